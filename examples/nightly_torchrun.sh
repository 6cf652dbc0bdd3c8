#!/bin/bash
# The nightly guard with torchrun's multi-node launch, from the first node of any allocation
# (Slurm here; with another scheduler replace the srun step by your way of running one command per node):
#   NODES=2 GPUS=8 examples/nightly_torchrun.sh [extra pytest options]
# torchrun starts GPUS ranks on each node and meets at a c10d rendezvous on this node; the driver
# (this script's pytest) is reached at this host's name. Exit status as in nightly.sbatch.
set -euo pipefail
NODES=${NODES:-${SLURM_NNODES:-2}}
GPUS=${GPUS:-8}
RESULTS=${HCCL_BENCH_RESULTS:-$HOME/hccl-bench-nightly}
PYTHON=${HCCL_BENCH_PYTHON_EXE:-python3}
HEAD=$(hostname)
exec "$PYTHON" -m pytest benches/test_collectives.py --benchmark --backend "${HCCL_BENCH_BACKENDS:-auto}" \
    --nproc $((NODES * GPUS)) \
    --launcher "srun --nodes $NODES --ntasks-per-node 1 $PYTHON -m torch.distributed.run --nnodes $NODES \
--nproc-per-node $GPUS --rdzv-backend c10d --rdzv-endpoint $HEAD:29400 --rdzv-id nightly-$$ --no-python {cmd}" \
    --driver-host "$HEAD" --results "$RESULTS" --history "$@"
