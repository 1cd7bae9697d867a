"""Byte sizes written the way people write them: ``"11.4GB"``, ``"4GiB"``, ``"512MB"``, ``123``.

Decimal units are powers of 1000 (kB, MB, GB, TB; the paper's "11.4 GB" is 11.4e9 bytes), binary
units powers of 1024 (KiB, MiB, GiB, TiB). Unit letters are case-insensitive; a bare number is
bytes.
"""

from __future__ import annotations

import decimal
import numbers
import re

from ._typing import Number
from ._validate import check_budget
from .exceptions import ArgumentError, ArgumentTypeError

__all__ = ["parse_size", "format_size", "UNITS"]

#: Unit suffix (lower case) -> bytes.
UNITS = {"": 1, "b": 1,
         "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
         "t": 10**12, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}

_SIZE = re.compile(r"^\s*([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: Number | str) -> int:
    """Return a size in bytes (int, rounded down) from a number or a string with a unit.

    Parameters
    ----------
    text : int, float or str
        Bytes as a number, or a string such as ``"11.4GB"``, ``"4 GiB"``, ``"1.5e9"``.

    Returns
    -------
    int

    Raises
    ------
    ArgumentTypeError
        If `text` is neither a number nor a string (bools are refused).
    ArgumentError
        If the string is not a number with a known unit, or the size is negative, NaN or
        infinite; the message lists the units.

    Examples
    --------
    >>> from lowerset.units import parse_size
    >>> parse_size("11.4GB"), parse_size("4GiB"), parse_size(" 512 mb "), parse_size(1e3)
    (11400000000, 4294967296, 512000000, 1000)
    """
    if isinstance(text, bool) or not isinstance(text, (numbers.Real, str)):
        raise ArgumentTypeError(f"a size must be a number of bytes or a string such as '4GiB', "
                                f"got {type(text).__name__} {text!r}")
    if isinstance(text, str):
        m = _SIZE.match(text)
        unit = m.group(2).lower() if m else None
        if m is None or unit not in UNITS:
            raise ArgumentError(
                f"cannot read the size {text!r}: write a number of bytes optionally followed by "
                "a unit, e.g. 123, 1.5e9, 512MB, 11.4GB or 4GiB (decimal: kB MB GB TB; "
                "binary: KiB MiB GiB TiB)")
        # exact decimal arithmetic: 4.35 * 1e9 in floats is 4349999999.9999995
        value = decimal.Decimal(m.group(1)) * UNITS[unit]
        if value < 0:
            raise ArgumentError(f"a size must be >= 0 bytes, got {text!r}")
        return int(value)
    return check_budget(text, "a size")


def format_size(nbytes: Number, binary: bool = False) -> str:
    """Return `nbytes` as a short string: ``"11.40 GB"`` (decimal) or ``"10.62 GiB"`` (binary).

    Parameters
    ----------
    nbytes : int or float
        A size, bytes.
    binary : bool, default False
        True for powers of 1024 (KiB, MiB, GiB), False for powers of 1000.

    Examples
    --------
    >>> from lowerset.units import format_size
    >>> format_size(11_400_000_000), format_size(2**30, binary=True), format_size(512)
    ('11.40 GB', '1.00 GiB', '512 B')
    """
    nbytes = int(nbytes)
    base, names = (1024, ("KiB", "MiB", "GiB", "TiB")) if binary else (1000, ("kB", "MB", "GB",
                                                                            "TB"))
    if abs(nbytes) < base:
        return f"{nbytes} B"
    value, name = float(nbytes), None
    for name in names:
        value /= base
        if abs(value) < base:
            break
    return f"{value:.2f} {name}"
