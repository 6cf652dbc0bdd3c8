import pytest

from collectives.sizes import SizeError, format_size, parse_size, parse_sizes


def test_range_is_geometric_like_nccl_tests():
    assert parse_sizes("8:128:2") == [8, 16, 32, 64, 128]
    assert parse_sizes("4:4M:4") == [4 << (2 * i) for i in range(11)]
    assert parse_sizes("1K:1M") == [1024 << i for i in range(11)]


def test_binary_units_and_lists():
    assert parse_size("64K") == 65536 and parse_size("128M") == 128 << 20 and parse_size("1G") == 1 << 30
    assert parse_size("2KiB") == 2048
    assert parse_sizes("1M,1K,64K,1K") == [1024, 65536, 1 << 20]


def test_max_not_a_multiple_stops_below_it():
    assert parse_sizes("3:100:3") == [3, 9, 27, 81]


@pytest.mark.parametrize("bad, words", [
    ("64Q", "K, M or G"), ("-1", "byte count"), ("0", "at least 1"), ("1M:1K", "larger than max"),
    ("8:1M:1", "factor"), ("8:1M:x", "factor"), ("1:2:3:4", "min:max"), ("", "min:max"),
])
def test_bad_sizes_say_what_is_allowed(bad, words):
    with pytest.raises(SizeError, match=words):
        parse_sizes(bad)


def test_labels():
    assert [format_size(s) for s in (8, 1024, 65536, 3 << 20, 1 << 30, 1000)] == ["8B", "1KiB", "64KiB", "3MiB", "1GiB", "1000B"]


def test_a_size_that_rounds_onto_another_is_measured_once():
    """At 8 ranks 8 B of all_gather is one float a rank, 32 B: the 8 B case is skipped with the
    reason, the 32 B case measures it, and all_reduce (no rounding there) keeps both."""
    from kinds import collective
    from kinds.options import Options
    opts = Options(backends=["gloo"], nproc=8, sizes=[8, 32, 128], ops=["all_gather", "all_reduce"], dtypes=["float32"],
                   redops=["sum"])
    skips = {(c.op, c.size): c.skip for c in collective.build(opts)}
    assert skips[("all_gather", 8)] == "8B rounds to 32B at 8 ranks: the 32B case measures that"
    assert skips[("all_gather", 32)] == "" and skips[("all_reduce", 8)] == "" and skips[("all_reduce", 32)] == ""
