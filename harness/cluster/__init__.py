"""An emulated cluster on one machine, to rehearse multi-host runs (emulated.py), and its command
line `hccl-bench cluster up|status|exec|launch|down` (cli.py)."""
from harness.cluster.cli import main
from harness.cluster.emulated import down, launch, up

__all__ = ["down", "launch", "main", "up"]
