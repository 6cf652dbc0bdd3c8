"""A case reads only its own part of the ranks' logs: with NCCL_DEBUG=INFO rank 0's log grows by
megabytes a case, and reading it whole every case made a sweep's log reads grow quadratically."""
from pathlib import Path

from harness.engine.groups import WorkerGroup
from schema.group_key import GroupKey


def _bytes_read() -> int:
    """This process's bytes read through read(2) so far (Linux /proc/self/io rchar): counted, not timed."""
    return int(next(line.split()[1] for line in Path("/proc/self/io").read_text().splitlines() if line.startswith("rchar")))


def test_a_case_reads_its_own_log_lines_at_the_cost_of_those_lines_alone_at_100_mb(tmp_path):
    group = WorkerGroup(GroupKey("gloo", 2), tmp_path)
    log = tmp_path / "rank0.log"
    line = "host:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f recvbuff 0x7f count 262144 datatype 7 op 0\n"
    with open(log, "w") as out:
        out.write(line * (100 * 2**20 // len(line)))          # earlier cases' lines: 100 MB
    assert log.stat().st_size > 99 * 2**20
    case = "host:1:1 [0] NCCL INFO 1048576 Bytes -> Algo 1 proto 2 time 20.5\n\u00e9 ends here\n"
    before = _bytes_read()
    group.mark_logs()
    with open(log, "a") as out:
        out.write(case)
    got = group.since_last_case(log)
    read = _bytes_read() - before
    assert got == case
    assert read < 2**20, f"read {read} bytes of a 100 MB log for a case that wrote {len(case.encode())}"
    group.mark_logs()
    assert group.since_last_case(log) == "" and group.since_last_case(tmp_path / "rank9.log") == ""
    log.unlink()   # pytest keeps its last tmp folders: 100 MB each
