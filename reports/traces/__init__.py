"""A training job's own evidence for `hccl-bench doctor --traces` / `--flight-recorder`: readers of
third-party files (kineto.py: torch.profiler traces, with nccl.py for NCCL/RCCL kernels; ascend.py:
torch_npu's per-rank profiler output; msprof_cluster.py: msprof-analyze's cluster output;
flight_recorder.py: torch's flight-recorder dumps; formats.py: which one a folder needs), each giving
the typed records of records.py, and the judgements over them (judge.py: which
rank, host or group the others wait for; hang.py: where a hung job's ranks stopped). Every bad file is
one ResultError line."""
