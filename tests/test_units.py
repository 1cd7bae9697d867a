"""lowerset.units: sizes written with units, against hand-computed byte counts."""

import pytest

import lowerset as ls
from lowerset.units import format_size, parse_size


class TestParseSize:
    @pytest.mark.parametrize("text, expected", [
        ("11.4GB", 11_400_000_000), ("11.4 GB", 11_400_000_000), ("4GiB", 4 * 1024**3),
        ("4.35GB", 4_350_000_000), ("512MB", 512_000_000), ("512mb", 512_000_000),
        ("1.5KiB", 1536), ("100kB", 100_000), ("7", 7), ("1.5e9", 1_500_000_000),
        ("2TB", 2 * 10**12), ("0.5MiB", 524_288), ("3B", 3), ("1e3k", 10**6),
        (123, 123), (1e9, 1_000_000_000), (2.9, 2)])
    def test_values(self, text, expected):
        assert parse_size(text) == expected

    @pytest.mark.parametrize("bad", ["", "GB", "1XB", "1.2.3GB", "ten", "1 G B", "--1"])
    def test_unreadable(self, bad):
        with pytest.raises(ls.ArgumentError, match="cannot read the size"):
            parse_size(bad)

    @pytest.mark.parametrize("bad", ["-1GB", -5, float("nan"), float("inf")])
    def test_out_of_range(self, bad):
        with pytest.raises(ls.ArgumentError, match=">= 0|finite"):
            parse_size(bad)

    @pytest.mark.parametrize("bad", [None, True, [1]])
    def test_types(self, bad):
        with pytest.raises(ls.ArgumentTypeError):
            parse_size(bad)


def test_format_size():
    assert format_size(999) == "999 B"
    assert format_size(11_400_000_000) == "11.40 GB"
    assert format_size(1536, binary=True) == "1.50 KiB"
    assert format_size(3 * 2**30, binary=True) == "3.00 GiB"
