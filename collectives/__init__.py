"""How a collective is exercised: ops, sizes, data checks, algorithms, timing, statistics."""
