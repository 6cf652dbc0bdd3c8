"""`hccl-bench doctor`: which host, link or rank is bad (cli.py), measured and judged by search.py
and schedule.py; with --traces or --flight-recorder, reports/traces/ judges what a job recorded."""
from harness.doctor.cli import main
from harness.doctor.search import Diagnosis, Suspect, diagnose, pair_rounds

__all__ = ["Diagnosis", "Suspect", "diagnose", "main", "pair_rounds"]
