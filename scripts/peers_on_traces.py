"""The same traces through the peers' straggler finders, beside `hccl-bench doctor --traces`, for
the comparison in docs/doctor.md. Run it in an environment of its own (the peers pin their own
pandas; `pip install HolisticTraceAnalysis msprof-analyze`), with this checkout on the path:

  python scripts/peers_on_traces.py FOLDER...   (folders of one job's traces: make_traces.py's, or
  any --traces reads: NCCL Kineto, torch_npu rank folders, msprof-analyze's cluster output)

- msprof-analyze's cluster_analyse slow_rank recipe (SlowRankVoteAnalysis, its own code): per
  group and same-named op (one collective), the Dixon test (3 sigma past 24 ranks) on the ranks'
  communication times, a vote for the rank with the shortest time when it is an outlier. Its input
  is an Ascend profiler database; the gloo traces' collectives are handed to it as the table it
  reads (rankId, groupName, opName, communication_time, startNs). It ranks, it does not name: the
  line gives the votes and whom the most votes go to.
- HTA's get_potential_stragglers (TraceAnalysis over the folder): its metric is the start of the
  significant GPU communication kernels per profiler step, so on CPU-only traces it says what it
  cannot find.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reports.traces import formats, job, judge  # noqa: E402


def doctor(folder: Path) -> str:
    traces = formats.read_job(folder)
    if job.alone(traces):
        return "nobody (one rank)"
    names = [s.name for s in judge.judge(traces).suspects]
    return ", ".join(names) or "nobody"


def msprof_votes(folder: Path) -> str:
    import pandas as pd
    from msprof_analyze.cluster_analyse.recipes.slow_rank.slow_rank import SlowRankVoteAnalysis
    rows = [{"rankId": t.rank, "groupName": c.group or "default", "opName": f"{c.op}__{c.seq}",
             "communication_time": c.dur_us * 1e3, "startNs": c.start_us * 1e3}
            for t in formats.read_job(folder) for c in t.collectives]
    votes, _ = SlowRankVoteAnalysis(pd.DataFrame(rows)).run()
    if votes is None or votes.empty:
        return "no votes"
    counts = votes["slowAffectCount"].sort_values(ascending=False)
    return (f"most votes: rank {counts.index[0]} ({int(counts.iloc[0])}); all: "
            + ", ".join(f"{r}:{int(v)}" for r, v in counts.items()))


def hta_stragglers(folder: Path) -> str:
    from hta.trace_analysis import TraceAnalysis
    try:
        return f"stragglers {TraceAnalysis(trace_dir=str(folder)).get_potential_stragglers()}"
    except Exception as exc:   # what the peer says on these traces is the finding
        return f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"


def main() -> None:
    for folder in map(Path, sys.argv[1:]):
        print(f"{folder.name}: doctor {doctor(folder)} | msprof-analyze slow_rank {msprof_votes(folder)} | "
              f"HTA {hta_stragglers(folder)}", flush=True)


if __name__ == "__main__":
    main()
