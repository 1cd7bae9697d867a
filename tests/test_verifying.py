"""lowerset.verifying.compare without a framework: two runs' named values as Python numbers
and tuples, with a stand-in diff."""

import pytest

import lowerset as ls
from lowerset.verifying import VerifyReport, compare


def diff(a, b):
    """Stand-in for a front end's: tuples of floats, bitwise as equality, shapes as lengths."""
    if len(a) != len(b):
        return True, float("inf")
    return a != b, max([0.0] + [abs(x - y) for x, y in zip(a, b)])


def test_equal_runs():
    runs = {"loss": (1.5,), "grad w": (1.0, 2.0), "persistent mean": (0.0,)}
    r = compare(runs, dict(runs), diff, events_equal=True, recomputed=[4, 2])
    assert r == VerifyReport(ok=True, first_mismatch=None, mismatches=(), max_abs_diff=0.0,
                             events_equal=True, recomputed=(4, 2),
                             compared=("loss", "grad w", "persistent mean"))


def test_the_first_mismatch_in_the_plain_run_s_order():
    plain = {"loss": (1.5,), "grad a": (1.0, 2.0), "grad b": (3.0,), "buffer m": (0.0,)}
    planned = {"buffer m": (0.25,), "grad b": (3.5,), "grad a": (1.0, 2.0), "loss": (1.5,)}
    r = compare(plain, planned, diff, events_equal=True, recomputed=())
    assert r.first_mismatch == "grad b" and r.mismatches == ("grad b", "buffer m")
    assert r.max_abs_diff == 0.5 and not r.ok and r.events_equal
    assert r.compared == ("loss", "grad a", "grad b", "buffer m")


def test_missing_values_and_shapes_differ_infinitely():
    plain = {"loss": (1.0,), "grad a": None, "grad b": None, "grad c": (1.0, 2.0)}
    planned = {"loss": (1.0,), "grad a": None, "grad b": (0.0,), "grad c": (1.0,),
               "grad d": (2.0,)}
    r = compare(plain, planned, diff, events_equal=True, recomputed=())
    assert r.mismatches == ("grad b", "grad c", "grad d")   # two Nones are equal
    assert r.max_abs_diff == float("inf")
    assert r.compared[-1] == "grad d"                        # only in the planned run: last


def test_events_that_differ_make_it_not_ok():
    runs = {"loss": (1.0,)}
    r = compare(runs, dict(runs), diff, events_equal=False, recomputed=[1])
    assert not r.ok and r.first_mismatch is None and r.max_abs_diff == 0.0


def test_verification_error_names_the_mismatch():
    r = compare({"loss": (1.0,), "grad w": (1.0,)}, {"loss": (1.0,), "grad w": (2.0,)}, diff,
                events_equal=True, recomputed=())
    with pytest.raises(AssertionError, match="first at 'grad w'") as e:
        raise ls.VerificationError(r)
    assert e.value.report is r and isinstance(e.value, ls.LowersetError)
    r = compare({"loss": (1.0,)}, {"loss": (1.0,)}, diff, events_equal=False, recomputed=())
    assert "in the events it executed" in str(ls.VerificationError(r))
