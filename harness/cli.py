"""``hccl-bench``: commands around result files (the sweeps themselves run under pytest)."""
from __future__ import annotations

import argparse
import json
import sys

from harness import provenance
from layers import memory
from reports import table

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def _load(path: str) -> dict:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        raise SystemExit(_fail(f"cannot read result file {path}: {exc}"))


def _fail(message: str) -> int:
    print(f"hccl-bench: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _memory(args) -> int:
    if args.params <= 0 or min(args.tp, args.pp, args.dp) < 1 or args.zero not in (0, 1, 2, 3):
        return _fail("--params must be > 0, --tp/--pp/--dp >= 1 and --zero one of 0, 1, 2, 3")
    est = memory.estimate(args.params, args.tp, args.pp, args.dp, args.zero, args.layers, args.hidden, args.heads,
                          args.seq, args.micro_batch, args.microbatches, args.schedule, args.sp, args.recompute,
                          hccl_buffsize_mb=args.hccl_buffsize)
    print(f"# per-rank memory, params={args.params:g} tp={args.tp} pp={args.pp} dp={args.dp} zero={args.zero} "
          f"(mixed-precision Adam: 2 + 2 + 12 bytes/param; GB = 1e9 bytes)")
    for label, value in (("weights", est.weights), ("gradients", est.grads), ("optimizer states", est.optimizer),
                         ("activations", est.activations), ("comm buffers", est.comm_buffers), ("total", est.total)):
        print(f"{label:>18} {value / memory.GB:10.2f} GB")
    if not args.layers:
        print("# activations need --layers --hidden --heads --seq (Korthikanti et al. 2022)")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hccl-bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("provenance", help="print this machine's versions and relevant environment as JSON")
    show = sub.add_parser("table", help="print the nccl-tests-style table of a results.json")
    show.add_argument("result")
    mem = sub.add_parser("memory", help="per-rank memory estimate for a model shape and tp/pp/dp")
    mem.add_argument("--params", type=float, required=True, help="parameter count, e.g. 100e9")
    for name, default in (("tp", 1), ("pp", 1), ("dp", 1), ("zero", 0), ("layers", 0), ("hidden", 0), ("heads", 0),
                          ("seq", 0), ("micro-batch", 1), ("microbatches", 1)):
        mem.add_argument(f"--{name}", type=int, default=default)
    mem.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b"])
    mem.add_argument("--sp", action="store_true", help="sequence parallelism")
    mem.add_argument("--recompute", default="none", choices=list(memory.RECOMPUTE))
    mem.add_argument("--hccl-buffsize", type=float, default=200.0, help="HCCL_BUFFSIZE in MB (default 200)")
    args = parser.parse_args(argv)
    if args.command == "provenance":
        print(json.dumps(provenance.collect(), indent=1))
        return EXIT_OK
    if args.command == "memory":
        return _memory(args)
    data = _load(args.result)
    rows = [b["extra_info"] for b in data.get("benchmarks", []) if "busbw_gbps" in b.get("extra_info", {})]
    print(table.render(rows))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
