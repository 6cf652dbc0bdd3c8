"""--previous-stack: an upgrade night settled the same night by a child session's sequential A/B of
this stack (A) against the previous one (B), into the same --results folder (docs/options.md)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import files
from kinds.options import Options
from reports.history import SAME_NIGHT

# options the child sets itself, or must not inherit: (name, takes a value)
DROPPED = {"--history": False, "--previous-stack": True, "--repeat": True, "--top-up": True, "--night-budget": True,
           "-k": True, "--baseline": True, "--cases": True, "--label": True, "--benchmark-json": True, "--junitxml": True,
           "--junit-xml": True, "--benchmark-save": True}


@dataclass
class Outcome:
    text: str            # what the session prints about it
    ok: bool             # the child ran to its end (its own verdict, whatever it was)


def child_args(invocation: list[str]) -> list[str]:
    """The session's own pytest arguments without those the child sets itself (DROPPED)."""
    out, args = [], iter(invocation)
    for arg in args:
        name = arg.split("=", 1)[0]
        if name in DROPPED:
            if DROPPED[name] and "=" not in arg:
                next(args, None)   # its value
        elif not (arg.startswith("-k") and len(arg) > 2 and not arg.startswith("--")):   # -kEXPR is dropped too
            out.append(arg)
    return out


def selection(opts: Options, keys: set[tuple]) -> list[str]:
    """The case ids (first launch, no side) whose cells are `keys`: what the child's --cases names."""
    import kinds
    return sorted({c.id for kind in kinds.KINDS if kind.cells for c in kind.build(opts)
                   if c.launch == 0 and not c.skip and kind.cell_key(c) in keys})


def budget(invocation: list[str]) -> int:
    """The child's launch budget: the session's --max-repeat, else its default."""
    for i, arg in enumerate(invocation):
        value = arg.split("=", 1)[1] if arg.startswith("--max-repeat=") else (
            invocation[i + 1] if arg == "--max-repeat" and i + 1 < len(invocation) else "")
        if value.isdigit():
            return int(value)
    return 12


def command(opts: Options, cases_file: Path) -> list[str]:
    """The child session: these benches and options, only `cases_file`'s ids, this stack against the previous one."""
    side_b = (["--ab-env", f"HCCL_BENCH_PYTHON={opts.previous_stack}"] if opts.previous_is_python
              else ["--ab-source", opts.previous_stack])
    return [sys.executable, "-m", "pytest", *child_args(opts.invocation), *side_b, "--ab-until-decided",
            "--label", "A=this stack", "--label", "B=previous stack", "--cases", str(cases_file)]


def run(opts: Options, run_dir: Path, keys: set[tuple]) -> Outcome:
    """The child A/B of the cells `keys`, its output kept in RUN_DIR/same_night_ab.log; never waited on forever."""
    ids = selection(opts, keys)
    if not ids:
        return Outcome(f"# same-night A/B: none of the {len(keys)} cells is a case of these benches", False)
    before = set(Path(opts.results).glob("*/"))
    cases_file = run_dir / "same_night_cases.txt"
    files.write_atomic(cases_file, "\n".join(ids) + "\n")
    cmd = command(opts, cases_file)
    limit = opts.timeout_s * (2 * len(ids) * budget(opts.invocation) + 2)   # every case hung to its --timeout
    log = run_dir / "same_night_ab.log"
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=limit)
        code: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)   # its ranks too: they are in its session
        output, _ = proc.communicate()
        code = f"killed after {limit:.0f} s"
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGINT)    # it writes what finished, marked incomplete
        proc.wait(timeout=60)
        raise
    files.write_atomic(log, " ".join(cmd) + "\n" + output)
    made = sorted(set(Path(opts.results).glob("*/")) - before)
    folder = next((d for d in made if (d / "results.json").exists() or (d / "cases.jsonl").exists()), None)
    if folder is not None and (folder / "results.json").exists():
        mark_direction(folder)
    what = f"{len(ids)} cases ({', '.join(ids[:4])}{', ...' if len(ids) > 4 else ''}) against {opts.previous_stack}"
    # a finished child exits 0 (no change), 1 (regression either way) or 6 (undecided cells); else it did not finish
    if not isinstance(code, int) or code not in (0, 1, 6) or folder is None or not (folder / "results.json").exists():
        tail = "; ".join(line for line in output.splitlines()[-3:] if line.strip())
        return Outcome(f"# same-night A/B failed ({'exit ' + str(code) if isinstance(code, int) else code}): {what}; "
                       f"the history's verdict stands; its output: {log} ({tail[-300:]})", False)
    files.write_atomic(run_dir / SAME_NIGHT, json.dumps({"run": folder.name, "previous_stack": opts.previous_stack,
                                                         "cases": ids, "exit": code}, indent=1))
    return Outcome(f"# same-night A/B: {what}: {folder}", True)


def mark_direction(folder: Path) -> None:
    """The child ran this stack (the candidate) as side A: its results.json records side B as its baseline
    and its table.txt is rewritten to match; an unreadable file is left as it is."""
    import kinds
    from reports import table
    from reports.result_files import load
    from schema.results import ResultError
    results = folder / "results.json"
    try:
        data = json.loads(results.read_text())
        data["hccl_bench"] = {**(data.get("hccl_bench") or {}), "baseline_side": "B"}
        files.write_atomic(results, json.dumps(data, indent=1, default=str))
        rows = [row for side in "AB" for row in table.launch_rows(load(folder, side=side))]
    except (OSError, ValueError, ResultError):
        return
    text = "\n\n".join(kinds.tables(rows, tuple(k for k in kinds.KINDS if k.cells)))
    head = ("# same-night A/B: side A (baseline) the previous stack, side B (candidate) this stack, B/A = this / "
            "previous (the session ran them as B and A; results.json records it)")
    files.write_atomic(folder / "table.txt", f"{head}\n{text}\n")
