"""A training job's own evidence for `hccl-bench doctor --traces` / `--flight-recorder`: readers of
third-party trace files (formats.py picks one) giving records.py's typed records, and the judgements
over them (judge.py: who the others wait for; hang.py: where a hung job stopped)."""
