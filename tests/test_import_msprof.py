"""msprof-analyze's files given to `import` (tests/data/importers/msprof_*, SOURCES.md: Ascend/mstt's
own test resources): refused in one line saying what they are and which command reads them."""
from pathlib import Path

import pytest

from tests.conftest import run_cli

DATA = Path(__file__).parent / "data" / "importers"


@pytest.mark.parametrize("name, what", [
    ("msprof_analyze_cluster_communication.json", "msprof-analyze cluster_communication.json"),
    ("msprof_analyze_cluster_step_trace_time.csv", "msprof-analyze step_trace_time.csv"),
])
def test_msprof_analyze_files_are_refused_saying_what_they_are_and_what_reads_them(tmp_path, name, what):
    proc = run_cli("import", DATA / name, "-o", tmp_path / "out.json")
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert what in err and "hccl-bench doctor --traces DIR reads its folder" in err
    assert len(err) - len(str(DATA / name)) < 200
    assert not (tmp_path / "out.json").exists()


def test_a_rank_s_communication_json_is_told_apart_from_the_cluster_one(tmp_path):
    """torch_npu's per-rank communication.json nests the same records under a step, not a rank group:
    made here from the cluster file's records (the inner {op: {rank: record}} of its one group)."""
    import json
    cluster = json.loads((DATA / "msprof_analyze_cluster_communication.json").read_text())
    ops = cluster["(0, 1)"]["step"]
    per_rank = {"step1": {"collective": {op: ranks["0"] for op, ranks in ops.items()}, "p2p": {}}}
    rank_file = tmp_path / "communication.json"
    rank_file.write_text(json.dumps(per_rank))
    proc = run_cli("import", rank_file)
    assert proc.returncode == 2 and "torch_npu profiler communication.json" in proc.stderr
