#!/usr/bin/env bash
# The GPU path on an NVIDIA machine, in one command, with one summary. What it costs on one GPU (world 1),
# estimated from the rehearsal's per-case costs plus a device group's start (~10 s a step), not yet
# measured on a GPU; each step is stopped at its cap, the whole check at DEVICE_CHECK_BUDGET_S (300 s;
# 420 s with 2 GPUs or more, where every op is captured and the doctor runs):
#   1. sweep     every op eager, 8 B to 128 MiB (x8), 5 rounds of 5 ms     ~63 cases  ~45 s  (cap 75 s)
#                (no 1 GiB: building and checking its exact data takes the host 15-30 s a case)
#   2. captured  --graph both at 8 B, 64 KiB, 64 MiB, float32 only: each captured case checked after one
#                replay and held to the floor its bytes allow; about 7 captures a captured case (the
#                check's, then calibration's); world 1: all_gather and reduce_scatter only (NCCL enqueues
#                nothing for an in-place call on one rank: an empty graph)  ~12 cases  ~35 s  (cap 75 s)
#   3. refusals  captured all_gather with HCCL_BENCH_FAULT=corrupt on rank 0 (#wrong 2: the eager and the
#                captured check each count it); captured all_reduce (world 1: refused, an empty graph)
#                                                                            2 cases  ~15 s  (cap 25 s)
#   4. tuning    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING, a smoke run whose times are not used (the
#                logging slows every call): algo_ran read from rank 0's log; world 1 makes no choice to read
#                                                                            2 cases  ~13 s  (cap 25 s)
#   5. pat       --algos nccl:PAT, all_gather and reduce_scatter at 1 KiB and 1 MiB  4 cases  ~13 s  (cap 25 s)
#                (a group under NCCL_ALGO=PAT starts: its warm-up op is one PAT covers. World 1 takes NCCL's
#                one-rank path and several GPUs on one node skip PAT, so the fault it guards against shows
#                only with one GPU on each of 2+ nodes; here it shows the group starts and the cases run or skip)
#   6. dtypes    every dtype and reduction at 1 KiB and 1 MiB, eager, checked   ~256 cases  ~36 s  (cap 50 s)
#   7. layers    the layer benches on the GPU with their checks, tp=pp=1                   ~20 s  (cap 45 s;
#                90 s with 2 ranks or more: tp and pp 1,2, the pipelines too)
#   7b. moe      the expert-parallel layer (alltoallv, allgather; the fused torch_npu path skips with its
#                reason) and the hybrid step, on NCCL with their checks                    ~20 s  (cap 45 s)
#   7c. fused    the fused MoE path (torch_npu's npu_moe_distribute_dispatch/combine): op-plugin's documented
#                limits as skips with their reasons (tests/test_fused_moe.py), and the bench's fused cases: bf16
#                uniform runs and is checked against the single-rank reference on an Ascend NPU (hccl), float32
#                and skewed routing skip with the documented reason; elsewhere every fused case skips
#                                                                            ~10 s  (cap 45 s)
#   8. skew      the doctor's arrival skew on nccl (the doctor itself needs 2 GPUs)         ~8 s  (cap 20 s)
#   9. doctor    2 GPUs or more                                                             ~30 s  (cap 45 s)
#   then the provenance the sweep recorded (drivers, topology, versions, adapter variables).
# About 3 minutes on one GPU; a step stopped at its cap, or skipped once the budget is spent, is a
# problem in the summary (exit 1), never a pass.
# NCCL refuses two ranks on one GPU: ranks = GPUs (a one-GPU machine runs world 1 and says so).
# Runs from a copy of the repository without installing anything (PYTHONPATH; needs torch with CUDA,
# pytest, pytest-benchmark, numpy, scipy, matplotlib, jinja2). Writes only under $OUT/device_check
# (or a new temp folder), never into the checkout. Without an NVIDIA GPU it says so and exits 0.
# Exit: 0 every check passed (or no GPU), 1 a check failed, 2 this machine cannot run the check.
#   scripts/device_check.sh                     PYTHON=/path/python3 OUT=/somewhere scripts/device_check.sh
#   scripts/device_check.sh --rehearse-on-cpu   the same steps on gloo (checks this script, not a GPU)
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=${PYTHON:-python3}
started=$SECONDS
rehearse=0
[ "${1:-}" = "--rehearse-on-cpu" ] && rehearse=1

ascend=0
if [ $rehearse = 0 ] && [ ! -e /proc/driver/nvidia/version ] && "${PYTHON:-python3}" -c 'import torch_npu' >/dev/null 2>&1; then
    ascend=1   # an Ascend NPU: only the fused MoE step (7c) runs here; the other steps are NVIDIA's
elif [ $rehearse = 0 ] && [ ! -e /proc/driver/nvidia/version ] && ! nvidia-smi -L >/dev/null 2>&1; then
    echo "device_check: no NVIDIA GPU on this machine (no /proc/driver/nvidia/version, no nvidia-smi): nothing to check"
    exit 0
fi
if ! command -v "$py" >/dev/null 2>&1; then
    echo "device_check: no python interpreter '$py' (set PYTHON=/path/to/python3)"; exit 2
fi
missing=$("$py" -c 'import importlib.util as u; print(" ".join(m for m in ("torch", "pytest", "pytest_benchmark", "numpy",
    "scipy", "matplotlib", "jinja2") if u.find_spec(m) is None))' 2>&1) || missing="(the interpreter failed: $missing)"
if [ -n "$missing" ]; then
    echo "device_check: $py lacks $missing (nothing can be installed from here: use an interpreter that has them)"; exit 2
fi

if [ -n "${OUT:-}" ]; then out="$OUT/device_check"; else out=$(mktemp -d "${TMPDIR:-/tmp}/device_check.XXXXXX"); fi
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
case "$out/" in "$repo"/*) echo "device_check: $out is inside the checkout: set OUT to a folder outside it"; exit 2;; esac
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
cd "$repo" || exit 2
: > "$out/notes.txt"
: > "$out/steps.txt"
note() { echo "$*" | tee -a "$out/notes.txt"; }

if [ $ascend = 1 ]; then
    backend=hccl
    nproc=$("$py" -c 'import torch, torch_npu; print(torch.npu.device_count())' 2>/dev/null) || nproc=0
    [ "${nproc:-0}" -lt 1 ] && { echo "device_check: torch_npu loads but sees no NPU"; exit 2; }
    note "Ascend: $nproc NPUs, backend hccl; only the fused MoE step runs (the other steps are NVIDIA's)"
elif [ $rehearse = 1 ]; then
    backend=gloo; nproc=2
    sweep_sizes=8:64K:8; captured_sizes=8,64K; captured_ops=(); dtype_sizes=1K; layer_args=(--tp 1,2 --pp 1,2)
    note "REHEARSAL on gloo with 2 CPU ranks: this checks the script, not a GPU (captured cases skip on gloo)"
else
    backend=nccl
    nproc=$("$py" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null) || nproc=0
    if [ "${nproc:-0}" -lt 1 ]; then
        echo "device_check: an NVIDIA driver is here but $py's torch sees no CUDA GPU (a CPU-only torch build?)"; exit 2
    fi
    sweep_sizes=8:128M:8; captured_sizes=8,64K,64M; captured_ops=(); dtype_sizes=1K,1M; layer_args=()
    [ "$nproc" = 1 ] && layer_args=(--tp 1 --pp 1) && captured_ops=(--ops all_gather,reduce_scatter)
    name=$("$py" -c 'import torch; print(torch.cuda.get_device_name(0))' 2>/dev/null)
    note "device: $nproc x $name; one rank per GPU (NCCL refuses two ranks on one GPU): --nproc $nproc"
    [ "$nproc" = 1 ] && note "one GPU: world 1 everywhere (launch path, events, graph replay, dtypes, layers at tp=pp=1);" \
                             "busbw is 0 at world 1 (no peer), algbw and per-call times are what it measured; sendrecv skips;" \
                             "timed and captured: out-of-place ops only (an in-place call on one rank enqueues nothing: no transfer to time," \
                             "an empty graph); the smoke steps still check the in-place calls"
fi
printf '{"backend": "%s", "nproc": %s, "only": %s}\n' "$backend" "$nproc" \
    "$([ $ascend = 1 ] && echo '["fused"]' || echo '[]')" > "$out/context.json"
budget=${DEVICE_CHECK_BUDGET_S:-$([ "$nproc" -ge 2 ] && echo 420 || echo 300)}
layer_cap=$([ "$nproc" -ge 2 ] && echo 90 || echo 45)   # 2 ranks or more: tp and pp 1,2, pipelines too
note "results: $out"

left() { echo $(( budget - (SECONDS - started) )); }
# step NAME CAP COMMAND...: runs it within min(CAP, what is left of the budget less 30 s: a step's
# last 15 s after SIGINT and the summary)
step() {
    local name=$1 cap=$2 limit rc; shift 2
    limit=$(left); limit=$(( limit - 30 < cap ? limit - 30 : cap ))
    if [ "$limit" -lt 10 ]; then echo "$name skipped (budget spent)" >> "$out/steps.txt"; echo "[$name] skipped: budget spent"; return; fi
    echo "[$name] up to ${limit}s: $*"
    local t0=$SECONDS
    timeout -s INT -k 15 "$limit" "$@" > "$out/$name.log" 2>&1
    rc=$?
    if [ $rc = 124 ]; then echo "$name timed out after ${limit}s" >> "$out/steps.txt"
    else echo "$name $rc (exit status, $((SECONDS - t0))s)" >> "$out/steps.txt"; fi
    echo "[$name] exit $rc in $((SECONDS - t0))s (log $out/$name.log)"
}

bench=("$py" -m pytest -q -rs -p no:randomly -p no:timeout --backend "$backend" --nproc "$nproc" --timeout 60)
# the fused MoE ops: one bf16 case at the documented shape of this many NPUs (A3 takes hidden 7168 only;
# ep = every rank: A2 16/32/64, A3 8..288, else it skips with that reason), float32 and skewed skip
fused=("${bench[@]}" tests/test_fused_moe.py benches/test_expert.py --moe-impl fused --moe-dtype bfloat16,float32
       --routing uniform,skewed:0.5 --topk 2 --experts $((2 * nproc)) --tokens 16 --hidden 7168 --results "$out/fused")
if [ $ascend = 1 ]; then
    step fused 120 "${fused[@]}"
    "$py" scripts/device_check.py summary "$out" | tee "$out/summary.txt"
    rc=${PIPESTATUS[0]}
    echo "device_check: $((SECONDS - started))s in all; summary in $out/summary.txt"
    exit "$rc"
fi
step sweep 75 "${bench[@]}" benches/test_collectives.py --benchmark --sizes "$sweep_sizes" \
    --rounds 5 --round-time 0.005 --results "$out/sweep"
step captured 75 "${bench[@]}" benches/test_collectives.py --benchmark --sizes "$captured_sizes" --graph both \
    ${captured_ops[@]+"${captured_ops[@]}"} --rounds 5 --round-time 0.005 --results "$out/captured"
step refusals 25 env HCCL_BENCH_FAULT=corrupt:0:all_gather "${bench[@]}" benches/test_collectives.py --graph on \
    --ops all_gather,all_reduce --sizes 1K --results "$out/refusals"
step tuning 25 env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING "${bench[@]}" benches/test_collectives.py \
    --ops all_reduce,all_gather --sizes 1M --results "$out/tuning"
step pat 25 "${bench[@]}" benches/test_collectives.py --algos nccl:PAT --ops all_gather,reduce_scatter --sizes 1K,1M \
    --results "$out/pat"
step dtypes 50 "${bench[@]}" benches/test_collectives.py --sizes "$dtype_sizes" \
    --dtypes float32,float16,bfloat16,float64,int32,int64,int8,uint8 --redops sum,prod,max,min --results "$out/dtypes"
step layers "$layer_cap" "${bench[@]}" benches/test_layers.py ${layer_args[@]+"${layer_args[@]}"} --results "$out/layers"
step moe 45 "${bench[@]}" benches/test_expert.py benches/test_hybrid.py --tokens 128 --hidden 128 --seq 64 --results "$out/moe"
step fused 45 "${fused[@]}"
step skew 20 "$py" scripts/device_check.py skew "$backend" "$out/skew.json"
if [ "$nproc" -ge 2 ]; then
    step doctor 45 "$py" -m harness.cli doctor --backend "$backend" --nproc "$nproc" --repeat 3 -o "$out/doctor" \
        --launcher "$py -m torch.distributed.run --standalone --nproc-per-node {nproc} --no-python {cmd}" --timeout 45
else
    echo "doctor skipped (the doctor compares ranks: one GPU gives one rank; its skew step ran on it above)" >> "$out/steps.txt"
fi
"$py" scripts/device_check.py summary "$out" | tee "$out/summary.txt"
rc=${PIPESTATUS[0]}
echo "device_check: $((SECONDS - started))s in all; summary in $out/summary.txt"
exit "$rc"
