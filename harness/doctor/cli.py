"""`hccl-bench doctor`: which host, link or rank is bad, judged against its peers (search.py); with
--traces or --flight-recorder nothing is launched (reports/traces/ judges what the job recorded).
Exit 0 healthy, 1 suspect found, 2 unusable."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from collectives.backends import BACKENDS
from collectives.sizes import SizeError, format_size, parse_sizes
from harness import files
from harness.doctor.schedule import FIRST_GROUPS
from harness.doctor.search import Diagnosis, diagnose, pair_rounds
from harness.engine.groups import CaseFailure
from harness.provenance import numpy_torch_problem
from reports.traces.output import suspects_block
from schema.exit_codes import ExitCode

EXIT_HEALTHY, EXIT_SUSPECT, EXIT_UNUSABLE = ExitCode.OK, ExitCode.SUSPECT, ExitCode.BAD_INPUT
HEATMAP_HOSTS = 64     # a bigger host x host heatmap is unreadable


def _hosts_words(names: list[str]) -> str:
    return "+".join(names) if len(names) <= 4 else f"{names[0]}+{len(names) - 1} more"


def text(diag: Diagnosis) -> str:
    out = [f"# doctor: {len(diag.hosts)} hosts x ranks {diag.ranks_per_host}; link "
           f"{'sweep' if diag.schedule == 'pairs' else 'search'} in {diag.rounds} {diag.schedule_words}"]
    for rnd in diag.search:
        sizes = sorted({len(t["hosts"]) for t in rnd["tests"]})
        slow = [f"{_hosts_words(t['hosts'])} ({t['role']}, {t['slow']['ratio']:.1f}x {t['slow']['by']})"
                for t in rnd["tests"] if t["slow"]]
        out.append(f"# round {rnd['round']}: {len(rnd['tests'])} rings of {'/'.join(map(str, sizes))} hosts; "
                   f"slow: {', '.join(slow) or 'none'}")
    if diag.bandwidth_gbps and len(diag.hosts) <= 16:
        out.append("# inter-host GB/s (rows: host, columns: peer)")
        out.append(f"#{'':>12} " + " ".join(f"{h[:10]:>10}" for h in diag.hosts))
        for h in diag.hosts:
            out.append(f" {h[:12]:>12} " + " ".join(f"{diag.bandwidth_gbps.get(h, {}).get(p, float('nan')):>10.3f}"
                                                    if p != h else f"{'-':>10}" for p in diag.hosts))
    if diag.intra_gbps:
        out.append("# inside each host GB/s: " + ", ".join(f"{h} {v:.3f}" for h, v in diag.intra_gbps.items()))
    out.append("# arrival at the collective after the same work (us): "
               + ", ".join(f"rank {r} {a['work_us']:.0f} work / {a['late_us']:+.0f} late / {a['wait_us']:.0f} wait"
                           for r, a in sorted(diag.arrival.items())))
    out += suspects_block([f"  {s.kind} {s.host}{' - ' + s.peer if s.peer else ''}: {s.evidence}" for s in diag.suspects],
                          "healthy: no host, link or rank stands out from its peers")
    return "\n".join(out)


def write_outputs(diag: Diagnosis, out_dir: Path, json_path: str | None) -> None:
    if json_path:
        files.write_atomic(json_path, json.dumps(diag.to_json(), indent=1))
    from reports import doctor_page  # matplotlib and jinja2: only when a page is asked for
    out_dir.mkdir(parents=True, exist_ok=True)
    files.write_atomic(out_dir / "doctor.html", doctor_page.html(diag, text(diag), heatmap=1 < len(diag.hosts) <= HEATMAP_HOSTS))
    files.write_atomic(out_dir / "doctor.md", doctor_page.markdown(diag) + "\n")


def from_traces(args: argparse.Namespace) -> ExitCode:
    """--traces / --flight-recorder: judge what a job recorded (reports/traces/), print, write --json and -o."""
    from reports.traces import flight_recorder, formats, hang, job, judge, output
    from schema.results import ResultError
    try:
        if args.ranks_per_host is not None and args.ranks_per_host < 1:
            raise ValueError(f"--ranks-per-host {args.ranks_per_host}: give at least 1")
        if args.min_link_ratio is not None and not args.min_link_ratio > 1:
            raise ValueError(f"--min-link-ratio {args.min_link_ratio:g}: give a ratio above 1 (3: a group three times "
                             "slower than the groups apart from it)")
        if args.traces:
            traces = formats.read_job(Path(args.traces))
            if why := job.alone(traces):
                words, named = f"# doctor --traces: 1 rank\nhealthy: {why}", False
                data = {"source": "traces", "suspects": [], "world": 1, "notes": [why]}
            else:
                verdict = judge.judge(traces, args.ranks_per_host, args.min_late_ms * 1e3,
                                      min_link_ratio=args.min_link_ratio)
                words, data, named = output.text(verdict), output.to_json(verdict), bool(verdict.suspects)
        else:
            report = hang.forensics(flight_recorder.read_dir(Path(args.flight_recorder)), args.ranks_per_host)
            skipped = flight_recorder.not_dumps(Path(args.flight_recorder))
            words, data = output.hang_text(report, skipped), output.hang_json(report, skipped)
            named = bool(report.stops or report.mismatches)
    except (ResultError, ValueError) as exc:
        line = f"hccl-bench doctor: {(str(exc).splitlines() or [''])[0]}"
        # one short line whatever the path: a long one loses its middle, the reason at the end stays
        print(line if len(line) < 200 else f"{line[:90]}...{line[-105:]}", file=sys.stderr)
        return EXIT_UNUSABLE
    print(words)
    if args.json:
        files.write_atomic(args.json, json.dumps(data, indent=1))
    if args.output:
        from reports import doctor_page
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        files.write_atomic(out / "doctor.html", doctor_page.traces_html(data, words))
        files.write_atomic(out / "doctor.md", doctor_page.traces_markdown(data) + "\n")
        print(f"# doctor.html and doctor.md: {out}")
    return EXIT_SUSPECT if named else EXIT_HEALTHY


def main(argv: list[str] | None = None) -> ExitCode:
    parser = argparse.ArgumentParser(prog="hccl-bench doctor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--launcher", help="launcher template with {nproc} (as for the benches)")
    parser.add_argument("--nproc", type=int, help="ranks in all; each host needs at least one")
    parser.add_argument("--traces", metavar="DIR", help="judge a job's own traces instead of launching anything: "
                        "torch.profiler (Kineto) files of gloo, NCCL or RCCL jobs (one per rank), torch_npu profiler "
                        "folders (*_ascend_pt: communication.json) or msprof-analyze's cluster_analysis_output")
    parser.add_argument("--flight-recorder", metavar="DIR", help="a hung job's flight-recorder dumps (one per rank): "
                        "where each rank stopped, and the ranks that never reached the collective the others wait in")
    parser.add_argument("--ranks-per-host", type=int, help="--traces/--flight-recorder: ranks 0..N-1 are host0, ... "
                        "(for files that do not name their host)")
    parser.add_argument("--min-link-ratio", type=float, default=None, help="--traces: how much slower a group's "
                        "collectives must run once its last rank arrived, against other groups' same op and shape, "
                        "to name its link (default 3)")
    parser.add_argument("--min-late-ms", type=float, default=1.0, help="--traces: how late a rank must arrive in a "
                        "collective to count as late in it (default 1 ms)")
    parser.add_argument("--backend", default="mpi", choices=list(BACKENDS))
    parser.add_argument("--driver-host", default="127.0.0.1", help="the address every rank reaches the driver at")
    parser.add_argument("-o", "--output", help="folder for doctor.html (heatmap), doctor.md and the ranks' logs "
                        "(default: a new results/doctor-<timestamp>/)")
    parser.add_argument("--json", help="write the suspects and measurements as JSON")
    parser.add_argument("--repeat", type=int, default=5, help="independent measurements each judgement rests on (>= 3)")
    parser.add_argument("--bytes", default="1M", help="message size of the bandwidth exchanges (default 1M)")
    parser.add_argument("--min-effect", type=float, default=0.5,
                        help="how much worse than its peers a host or link must be (default 0.5: 1.5x)")
    parser.add_argument("--rank-effect", type=float, default=0.25,
                        help="how much longer a rank's fixed work must take than its peers' (default 0.25: 1.25x)")
    parser.add_argument("--full", action="store_true",
                        help="measure every host pair (N-1 rounds for N hosts) instead of adaptive group testing "
                        "(about log2 N rounds); also finds a single slow pair between two healthy hosts")
    parser.add_argument("--groups", type=int, default=FIRST_GROUPS,
                        help=f"rings in the search's first round (default {FIRST_GROUPS}; "
                        "fewer: bigger rings, more rounds)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a measurement counts as hung")
    args = parser.parse_args(argv)
    if args.traces or args.flight_recorder:
        if args.traces and args.flight_recorder or args.launcher:
            print("hccl-bench doctor: give one of --traces, --flight-recorder or --launcher", file=sys.stderr)
            return EXIT_UNUSABLE
        return from_traces(args)
    if not args.launcher or args.nproc is None:
        print("hccl-bench doctor: give --launcher and --nproc (or --traces DIR, --flight-recorder DIR)", file=sys.stderr)
        return EXIT_UNUSABLE
    try:
        if args.repeat < 3:
            raise ValueError(f"--repeat {args.repeat}: give at least 3 (a suspect needs a majority of repeats)")
        if args.nproc < 2:
            raise ValueError(f"--nproc {args.nproc}: the doctor compares ranks, give at least 2")
        if args.groups < 4:
            raise ValueError(f"--groups {args.groups}: give at least 4 (a ring is judged against the median of the "
                             "others: with 2 rings, one culprit in each leaves no healthy peer)")
        if not (args.min_effect > 0 and args.rank_effect > 0):
            raise ValueError(f"--min-effect {args.min_effect} --rank-effect {args.rank_effect}: give numbers > 0")
        (nbytes,) = parse_sizes(args.bytes)
        if BACKENDS[args.backend].family == "torch" and (abi := numpy_torch_problem()):
            raise ValueError(abi)   # every rank's torch.from_numpy would fail: said once, before any rank starts
        out = Path(args.output) if args.output else files.new_run_dir("results", time.strftime("doctor-%Y%m%d-%H%M%S"))
        diag = diagnose(args.launcher, args.nproc, args.backend, args.driver_host, out / "logs", args.repeat, nbytes,
                        args.min_effect, args.rank_effect, args.timeout, args.full, args.groups)
    except (ValueError, SizeError) as exc:
        print(f"hccl-bench doctor: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    except CaseFailure as exc:
        print(f"hccl-bench doctor: the ranks failed: {str(exc).splitlines()[0]}", file=sys.stderr)
        return EXIT_UNUSABLE
    except Exception as exc:  # a bug: one line, and never the exit status of a suspect
        print(f"hccl-bench doctor: internal error: {type(exc).__name__}: {exc} (please report it)", file=sys.stderr)
        return ExitCode.INTERNAL
    print(text(diag))
    full_rounds = len(pair_rounds(len(diag.hosts)))
    print(f"# rounds: {diag.rounds} ({len(diag.hosts)} hosts, "
          + ("every pair" if diag.schedule == "pairs" else f"adaptive group testing; --full takes {full_rounds}")
          + f"); message {format_size(nbytes)}; {args.repeat} repeats")
    write_outputs(diag, out, args.json)
    print(f"# doctor.html, doctor.md and the ranks' logs: {out}")
    return EXIT_SUSPECT if diag.suspects else EXIT_HEALTHY


if __name__ == "__main__":
    sys.exit(main())
