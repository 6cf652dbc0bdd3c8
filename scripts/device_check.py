"""The two pieces of scripts/device_check.sh that are Python: the doctor's skew step on one device
rank (`skew`), and the one summary of everything the check recorded (`summary`).

    python3 scripts/device_check.py skew BACKEND OUT.json
    python3 scripts/device_check.py summary OUT_DIR      # exit 0: every check passed, 1: one did not
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

SIDE_BY_SIDE = (8, 1 << 10, 64 << 10, 1 << 20)   # the sizes whose eager and captured times the summary shows


def skew(backend_name: str, out: str) -> int:
    """The doctor's arrival step on a world of one: the time from entering the collective to its
    exit, read after the device synchronised (what the doctor does), and when the call returned
    (enqueue only: what it measured before)."""
    import numpy as np

    from collectives import doctor_tasks
    from collectives.backends import TorchBackend
    from schema.wire import DoctorSkewSpec
    os.environ.setdefault("HCCL_BENCH_STORE", out + ".store")
    backend = TorchBackend(backend_name, 0, 1, 0)
    try:
        got = doctor_tasks.skew(backend, DoctorSkewSpec(rounds=20, matrix=128, work=2))
        inside = [b - a for a, b in zip(got["entry_ns"], got["exit_ns"])]
        call = backend.call("all_reduce", *([backend.from_numpy(np.ones(2), "float32")] * 2), "sum", True)
        enqueue = []
        for _ in range(20):
            backend.device.synchronize()
            t0 = time.time_ns()
            call()
            enqueue.append(time.time_ns() - t0)
        backend.device.synchronize()
        record = {"backend": backend_name, "device": backend.device.name(), "synchronised_us": statistics.median(inside) / 1e3,
                  "enqueue_us": statistics.median(enqueue) / 1e3, "rounds": len(inside)}
    finally:
        backend.close()
        Path(out + ".store").unlink(missing_ok=True)
    Path(out).write_text(json.dumps(record))
    return 0


def _load(folder: Path):
    """The run under folder/<timestamp>/, or (None, why not)."""
    from reports.result_files import load
    from schema.results import ResultError
    runs = sorted(p for p in folder.glob("*/") if (p / "results.json").exists() or (p / "cases.jsonl").exists())
    if not runs:
        return None, f"no run recorded under {folder}"
    try:
        return load(runs[-1]), ""
    except ResultError as exc:
        return None, str(exc)


def _problems(run) -> list[str]:
    """Failures and wrong results of a run, one line each."""
    out = [f"FAILED {f.get('what', f.get('id', '?'))}: {f.get('error', '')}" for f in run.meta.failures]
    for cell in run.cells.values():
        for row in cell.rows.values():
            if row.wrong:
                out.append(f"WRONG {cell.series.label()} at {cell.size} B: #wrong {row.wrong}")
    return out


def _nothing_measured(step: str, run) -> list[str]:
    """A step that skipped everything it was there to check is a problem, not a pass."""
    from reports.table import rows_of
    if step in ("layers", "moe"):
        return [] if run.cells else [f"NOTHING MEASURED: every {step} case was skipped"]
    rows = rows_of(run)
    if not rows:
        return ["NOTHING MEASURED: every collective case was skipped"]
    if step == "captured" and any(r.backend in ("nccl", "hccl") for r in rows) and not any(r.graph for r in rows):
        return ["NOTHING MEASURED: no graph-captured case ran on the device"]
    return []


def _refusals(run, context: dict) -> tuple[list[str], list[str]]:
    """(lines, problems) of the refusals step, whose failures are what it checks: the captured
    all_gather corrupted on rank 0 counts #wrong 2 (the eager and the captured check each find it);
    the captured all_reduce is refused as an empty graph on one rank (NCCL enqueues nothing for an
    in-place call there) and runs clean on more. On a CPU backend every captured case skips."""
    from reports.table import rows_of
    if context.get("backend") not in ("nccl", "hccl"):
        return ["  captured cases skip on a CPU backend: nothing to refuse"], []
    rows, failures = rows_of(run), run.meta.failures
    gather = [r.wrong for r in rows if r.op == "all_gather" and r.graph]
    reduce = [r for r in rows if r.op == "all_reduce" and r.graph]
    refused = [f.get("error", "") for f in failures if "all_reduce" in str(f.get("id", f.get("what", "")))]
    lines = [f"  captured all_gather corrupted on rank 0: #wrong {gather} (want [2]: eager 1 + captured 1)"]
    problems = [] if gather == [2] else [f"the captured check did not count the corrupted element: #wrong {gather}, want [2]"]
    if context.get("nproc") == 1:   # nothing to capture: skipped at collection (kinds/collective.py ONE_RANK_IN_PLACE);
        # the empty-graph error itself is shown by tests/test_capture_check.py
        skipped = [s.get("reason", "") for s in run.meta.skipped if "all_reduce" in str(s.get("id", ""))
                   and "graph" in str(s.get("id", ""))]
        lines.append(f"  captured in-place all_reduce on one rank: {skipped[0] if skipped else 'not skipped'}")
        if not (skipped and "moves no data" in skipped[0]) or reduce or refused:
            problems.append("the captured in-place all_reduce on one rank was not skipped as an empty capture")
    else:
        lines.append(f"  captured all_reduce: #wrong {[r.wrong for r in reduce]}")
        if refused or [r.wrong for r in reduce] != [0]:
            problems.append(f"captured all_reduce failed: {'; '.join(refused) or [r.wrong for r in reduce]}")
    others = [f for f in failures if not any(op in str(f.get("id", f.get("what", ""))) for op in ("all_gather", "all_reduce"))]
    return lines, problems + [f"FAILED {f.get('what', f.get('id', '?'))}: {f.get('error', '')}" for f in others]


def _tuning(run, context: dict) -> tuple[list[str], list[str]]:
    """(lines, problems): NCCL_DEBUG_SUBSYS=TUNING's choice read into every row (algo_ran) with 2
    ranks or more; one rank makes no choice to print (enqueue.cc: nRanks == 1 goes to ncclLaunchOneRank)."""
    from reports.table import rows_of
    rows = rows_of(run)
    lines = [f"  {r.op} {r.bytes} B, {r.nranks} rank(s): algo_ran {r.algo_ran!r}" for r in rows]
    if context.get("backend") != "nccl":
        return lines + ["  not nccl: no TUNING lines to read"], _problems(run)
    if context.get("nproc") == 1:
        return lines + ["  one rank: NCCL makes no algorithm choice (nothing to read)"], _problems(run)
    empty = [f"algo_ran not read for {r.op} at {r.bytes} B" for r in rows if not r.algo_ran]
    return lines, _problems(run) + empty + ([] if rows else ["NOTHING MEASURED: no tuning case ran"])


def _pat(run, context: dict) -> tuple[list[str], list[str]]:
    """(lines, problems): --algos nccl:PAT's groups start and their cases pass, or are skipped with a reason."""
    from reports.table import rows_of
    lines = [f"  {r.op} {r.bytes} B: #wrong {r.wrong}, algo_ran {r.algo_ran!r}" for r in rows_of(run)]
    return lines, _problems(run)


def _skips(run) -> list[str]:
    reasons: dict[str, int] = {}
    for s in run.meta.skipped:
        reasons[s["reason"]] = reasons.get(s["reason"], 0) + 1
    return [f"  skipped {n}: {reason}" for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])]


def _sweep(run) -> list[str]:
    from collectives.sizes import format_size
    from kinds.collective import peak_order
    from reports.table import host_cost_lines, rows_of
    from schema.results import CollectiveRow
    rows = rows_of(run)
    out = [f"  {len(rows)} cases measured, {sum(r.graph for r in rows)} of them graph-captured"]
    peaks: dict[tuple, CollectiveRow] = {}
    for r in rows:
        key = (r.op, r.graph)
        if key not in peaks or peak_order(r) > peak_order(peaks[key]):
            peaks[key] = r
    for (op, graph), r in sorted(peaks.items()):
        out.append(f"  peak busbw {op:>14} {'captured' if graph else 'eager':>8}: {r.busbw_gbps or 0:9.2f} GB/s "
                   f"at {format_size(r.bytes)} (algbw {r.algbw_gbps or 0:.2f} GB/s)")
    if not any(r.graph for r in rows):
        return out
    cost = host_cost_lines([r for r in rows if r.bytes in SIDE_BY_SIDE])
    return out + ["  " + line for line in cost[1:]] if cost else out + ["  no eager/captured pair at 8B, 1KiB, 64KiB, 1MiB"]


def _dtypes(run) -> list[str]:
    by: dict[str, list] = {}
    for cell in run.cells.values():
        by.setdefault(cell.series.dtype or "?", []).extend(cell.rows.values())
    return [f"  {dtype:>9}: {len(rows)} cases checked, #wrong {sum(r.wrong or 0 for r in rows)}"
            for dtype, rows in sorted(by.items())]


def _layers(run) -> list[str]:
    out = []
    for cell in sorted(run.cells.values(), key=lambda c: c.series.sort_key()):
        r = cell.row
        out.append(f"  {cell.series.label():<70} step {r.step_us or 0:10.1f} us  #wrong {r.wrong}")
    return out


def _provenance(run) -> list[str]:
    prov = run.meta.provenance
    out = [f"  drivers: {json.dumps(prov.get('drivers'))}"]
    for name, text in (prov.get("topology") or {}).items():
        lines = str(text).splitlines()
        out.append(f"  {name}: {len(lines)} lines")
        out += [f"    {line}" for line in lines[:12]] + (["    ..."] if len(lines) > 12 else [])
    for name, group in run.meta.groups.items():
        out.append(f"  group {name}: devices {group.get('devices')} versions {json.dumps(group.get('versions'))}")
        out.append(f"    adapter variables the ranks saw: {json.dumps(group.get('adapter_env') or {})}")
    out.append(f"  variables recorded by the driver: {json.dumps(prov.get('env') or {})}")
    return out


def _fused(run, context: dict) -> tuple[list[str], list[str]]:
    """The fused MoE step: on hccl the bf16 case must run and be checked (its wrong elements fail it);
    elsewhere every fused case skips with its reason, which is what it shows."""
    problems = _problems(run)
    if context.get("backend") == "hccl" and not run.cells:
        problems.append("NOTHING MEASURED: no fused case ran on the NPUs (the skips say why)")
    return [], problems


def summary(folder: str) -> int:
    base = Path(folder)
    notes = (base / "notes.txt").read_text().splitlines() if (base / "notes.txt").exists() else []
    status = dict(line.split(" ", 1) for line in (base / "steps.txt").read_text().splitlines()) \
        if (base / "steps.txt").exists() else {}
    context = json.loads((base / "context.json").read_text()) if (base / "context.json").exists() else {}
    bad: list[str] = []
    out = ["", "==== device check summary ====", *notes]
    for step, title, show in (("sweep", "collective sweep, eager", _sweep),
                              ("captured", "graph-captured beside eager, each captured case checked after one replay", _sweep),
                              ("refusals", "what the captured check must refuse", None),
                              ("tuning", "NCCL_DEBUG_SUBSYS=TUNING read into algo_ran", None),
                              ("pat", "--algos nccl:PAT", None),
                              ("dtypes", "every dtype and reduction, smoke sizes", _dtypes),
                              ("layers", "layer benches", _layers),
                              ("moe", "expert-parallel layer and hybrid step (fused dispatch: Ascend only, skipped)", _layers),
                              ("fused", "fused MoE dispatch/combine: op-plugin's limits as skips, bf16 checked on an NPU",
                               None)):
        if context.get("only") and step not in context["only"]:
            continue
        out.append(f"-- {title} ({step}: {status.get(step, 'not run')})")
        ran = status.get(step, "").split(" ")[0]
        if ran not in ("0",) and not (step == "refusals" and ran == "1"):   # refusals' cases fail by design
            bad.append(f"{step}: {status.get(step, 'not run')}")
        run, why = _load(base / step)
        if run is None:   # every case skipped (the log says why, pytest -rs), or the step never ran
            log = base / f"{step}.log"
            out += [f"  {why}"] + ["  " + line for line in (log.read_text().splitlines() if log.exists() else [])
                                    if line.startswith("SKIPPED")][:10]
            if not (step == "pat" or (step in ("refusals", "fused") and context.get("backend") not in ("nccl", "hccl"))
                    or (step == "fused" and context.get("backend") == "nccl")):
                bad.append(f"{step}: {why}")
            continue
        judge = {"refusals": _refusals, "tuning": _tuning, "pat": _pat, "fused": _fused}.get(step)
        if judge is not None:
            lines, problems = judge(run, context)
        else:
            lines, problems = show(run) if show else [], _problems(run) + _nothing_measured(step, run)
        bad += problems
        out += ["  " + p for p in problems[:20]] + (["  ..."] if len(problems) > 20 else [])
        out += lines
        out += _skips(run)
        if step == "sweep":
            out += ["-- provenance recorded", *_provenance(run)]
    out.append(f"-- doctor ({status.get('doctor', 'not run')})")
    doctor_log = base / "doctor.log"
    doctor_lines = doctor_log.read_text().splitlines() if doctor_log.exists() else []
    out += ["  " + line for line in doctor_lines
            if line.startswith(("# arrival", "healthy", "SUSPECTS", "  rank", "  node", "  link", "hccl-bench doctor"))]
    if (base / "skew.json").exists():
        s = json.loads((base / "skew.json").read_text())
        out.append(f"  skew step, one rank on {s['device']}: entry to exit {s['synchronised_us']:.1f} us after the device "
                   f"synchronised; the call alone returns in {s['enqueue_us']:.1f} us (enqueue)")
    if status.get("skew", "0").split(" ")[0] != "0":
        bad.append(f"skew: {status['skew']}")
    # the doctor naming a rank (exit 1 with its SUSPECTS line) is what it measured, not a harness fault: a
    # busy core beside one CPU rank in the rehearsal makes that rank's work slower, and the doctor says so
    doctor_exit = status.get("doctor", "0").split(" ")[0]
    if doctor_exit == "1" and any(line.startswith("SUSPECTS") for line in doctor_lines):
        out.append("  (the doctor named suspects: a finding about these devices, not a failed check)")
    elif doctor_exit != "0" and not status["doctor"].startswith("skipped (the doctor compares"):
        bad.append(f"doctor: {status['doctor']}")
    out.append("==== " + ("every check passed" if not bad else f"{len(bad)} problem(s): " + "; ".join(bad[:5])) + " ====")
    print("\n".join(out))
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "skew":
        sys.exit(skew(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 3 and sys.argv[1] == "summary":
        sys.exit(summary(sys.argv[2]))
    print(__doc__.strip(), file=sys.stderr)
    sys.exit(2)
