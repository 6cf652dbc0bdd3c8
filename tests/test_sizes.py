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
