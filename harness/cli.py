"""``hccl-bench``: commands around result files (the sweeps themselves run under pytest)."""
from __future__ import annotations

import argparse
import json
import sys

from harness import provenance
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hccl-bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("provenance", help="print this machine's versions and relevant environment as JSON")
    show = sub.add_parser("table", help="print the nccl-tests-style table of a results.json")
    show.add_argument("result")
    args = parser.parse_args(argv)
    if args.command == "provenance":
        print(json.dumps(provenance.collect(), indent=1))
        return EXIT_OK
    data = _load(args.result)
    rows = [b["extra_info"] for b in data.get("benchmarks", []) if "busbw_gbps" in b.get("extra_info", {})]
    print(table.render(rows))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
