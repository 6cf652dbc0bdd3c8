"""Message sizes with nccl-tests semantics: ``min:max:factor`` or a list; K/M/G are powers of 2."""
from __future__ import annotations

import re

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+)\s*([A-Za-z]*)\s*$")


class SizeError(ValueError):
    """A size specification that cannot be parsed; the message says what is allowed."""


def parse_size(text: str) -> int:
    """``'64K'`` -> 65536. Units K, M, G (also KiB/KB...) are binary, as in nccl-tests' -b/-e."""
    m = _SIZE.match(text)
    if not m or m.group(2).upper() not in _UNITS:
        raise SizeError(f"bad size {text!r}: use a byte count with an optional K, M or G suffix (e.g. 8, 64K, 128M)")
    value = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if value < 1:
        raise SizeError(f"bad size {text!r}: sizes must be at least 1 byte")
    return value


def parse_sizes(spec: str) -> list[int]:
    """``'8:128M:2'`` (min:max:factor, like ``-b 8 -e 128M -f 2``) or ``'1K,64K,1M'``."""
    spec = spec.strip()
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            raise SizeError(f"bad --sizes {spec!r}: use min:max[:factor] (e.g. 8:128M:2) or a list (1K,64K,1M)")
        lo, hi = parse_size(parts[0]), parse_size(parts[1])
        factor_text = parts[2] if len(parts) == 3 else "2"
        if not factor_text.strip().isdigit() or int(factor_text) < 2:
            raise SizeError(f"bad --sizes {spec!r}: the factor must be an integer >= 2, got {factor_text!r}")
        if lo > hi:
            raise SizeError(f"bad --sizes {spec!r}: min {lo} is larger than max {hi}")
        factor, sizes, size = int(factor_text), [], lo
        while size <= hi:
            sizes.append(size)
            size *= factor
        return sizes
    items = [s for s in spec.split(",") if s.strip()]
    if not items:
        raise SizeError("bad --sizes '': give min:max[:factor] or a comma-separated list")
    return sorted({parse_size(s) for s in items})


def format_size(nbytes: int) -> str:
    """Short binary label used in test ids and tables: 8B, 64KiB, 4MiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


def comm_buffers(communicators: int, hccl_buffsize_mb: float = 200.0) -> float:
    """Bytes of HCCL's communication buffers in device memory: HCCL_BUFFSIZE MB twice (in, out) per communicator."""
    return 2 * communicators * hccl_buffsize_mb * 1e6
