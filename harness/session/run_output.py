"""What a session leaves: results.json and table.txt in its run folder, and the tables, verdicts and
closing lines at the end of the terminal output."""
from __future__ import annotations

import json
import textwrap

import kinds
from harness import files
from harness.session.session import BenchSession
from kinds.options import Options


def benchmark_session(config):
    """pytest-benchmark's BenchmarkSession, or None without the plugin (-p no:benchmark); the one place
    to mend if it moves (docs/options.md, pytest-benchmark's session)."""
    return config.pluginmanager.get_plugin("pytest-benchmark")


def quiet_benchmark_tables(config) -> None:
    """pytest-benchmark's per-case tables (hundreds of lines, 500 wide) hid the results; the JSON is unchanged."""
    bs = benchmark_session(config)
    if bs is not None and not config.getoption("benchmark_tables"):
        bs.quiet = True


def benchmark_json(config) -> dict:
    """pytest-benchmark's JSON of this session (every round's data), as its --benchmark-json writes it."""
    bs = benchmark_session(config)
    if bs is None:
        return {"benchmarks": [], "hccl_bench": None}
    return config.hook.pytest_benchmark_generate_json(
        config=config, benchmarks=bs.benchmarks, include_data=True, machine_info=bs.get_machine_info(),
        commit_info=config.hook.pytest_benchmark_generate_commit_info(config=config))


def header_lines(opts: Options) -> list[str] | None:
    """Said before anything runs: a one-launch session cannot fail on a verdict."""
    lines = []
    if opts.ab_source and not opts.ab_env:
        lines.append(f"hccl-bench: --ab-source {opts.ab_source} changes nothing in this environment (already sourced?): "
                     "side B runs this same stack, an A/A")
    if opts.repeat > 1 or opts.two_sides:
        return lines or None
    if opts.baseline:
        lines.append("hccl-bench: --baseline with one launch (--repeat 1): rounds of one launch are not independent "
                     "samples, so its verdicts can only be 'suspected' and cannot fail the session; use --repeat 3")
    if opts.history:
        lines.append("hccl-bench: --history with one launch (--repeat 1): this night is one point; a change needs "
                     "several nights to confirm it (--repeat 3 makes each night's point steadier)")
    return lines or None


def write_results(bench: BenchSession, output: dict) -> None:
    """results.json (pytest-benchmark's JSON with the hccl_bench section) and table.txt, each whole or not at all."""
    output["hccl_bench"] = bench.metadata()
    files.write_atomic(bench.run_dir / "results.json", json.dumps(output, indent=1, default=str))
    text = "\n\n".join(kinds.tables(bench.rows, tuple(k for k in kinds.KINDS if k.cells))) + "\n"
    files.write_atomic(bench.run_dir / "table.txt", text)


def _block(text: str, gap: bool = True) -> list[str]:
    """One table or verdict on the terminal, after a blank line unless it opens the section."""
    return ([""] if gap else []) + text.splitlines()


def summary_lines(bench: BenchSession) -> list[str]:
    """The hccl-bench section of the terminal summary: tables, skipped count, verdicts, closing block."""
    out: list[str] = []
    for i, section in enumerate(kinds.tables(bench.rows)):
        out += _block(section, gap=i > 0)
    if bench.skipped:
        out += _block(f"# {len(bench.skipped)} cases skipped (reasons in results.json; -rs lists them)")
    for verdict in bench.verdicts:
        out += _block(verdict.text)
    return out + [""] + closing_block(bench)


def closing_block(bench: BenchSession) -> list[str]:
    """The lines a user reads last: where the results are, the peaks, what failed, and the gates' verdicts."""
    out = ["# ---- hccl-bench summary"]
    if bench.store.made:
        state = f"incomplete: {bench.interrupted}" if bench.interrupted else "complete"
        out.append(f"# results: {bench.run_dir / 'results.json'} ({state})")
    out += [line for kind in kinds.KINDS for line in kind.closing_lines(kinds.rows_of(kind, bench.rows))]
    if bench.budget is not None and bench.rows and not bench.interrupted:   # an interrupted night ran what it could
        out += wrapped(bench.budget.line())
    if bench.failures:
        out += wrapped(f"# failures: {len(bench.failures)} cases, first: {bench.failures[0]['what']}: "
                       f"{bench.failures[0]['error']}")
    for verdict in bench.verdicts:
        out += wrapped(f"# verdict: {verdict.headline or verdict.text.splitlines()[0].lstrip('# ')}")
    return out


def wrapped(line: str) -> list[str]:
    """A closing line within 120 columns, carried on to '#   ' lines rather than cut mid-number."""
    return textwrap.wrap(line, 120, subsequent_indent="#   ", break_on_hyphens=False) or [line]
