"""torch_ext's errors: all in lowerset's hierarchy, each still the builtin it used to be."""

import sys

import pytest

torch = pytest.importorskip("torch")

import lowerset  # noqa: E402
import torch_ext  # noqa: E402
from torch_ext import exceptions  # noqa: E402
from torch_ext.measure import MemoryMeter  # noqa: E402

_batch = sys.modules["torch_ext.batch"]


@pytest.mark.parametrize("name", exceptions.__all__)
def test_every_error_is_a_lowerset_error_exported_from_torch_ext(name):
    cls = getattr(exceptions, name)
    assert issubclass(cls, exceptions.TorchExtError)
    assert issubclass(cls, lowerset.LowersetError)
    assert getattr(torch_ext, name) is cls and name in torch_ext.__all__


def test_the_batch_errors_live_in_exceptions_and_stay_in_batch():
    assert _batch.BatchScalingError is exceptions.BatchScalingError
    assert _batch.NoBatchFitsError is exceptions.NoBatchFitsError
    assert issubclass(exceptions.BatchScalingError, lowerset.BatchScalingError)
    assert issubclass(exceptions.NoBatchFitsError, lowerset.NoBatchFitsError)


def _step():
    m = torch.nn.Linear(2, 1)
    x = torch.ones(3, 2)
    return lambda: m(x).sum()


@pytest.mark.parametrize("kwargs", [{"cost_model": "time"}, {"repeats": 0},
                                    {"time_unit": -1.0}])
def test_bad_trace_arguments_raise_argument_error(kwargs):
    with pytest.raises(lowerset.ArgumentError) as e:
        torch_ext.trace(_step(), **kwargs)
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("params, match", [
    (5, "params must be a Module or an iterable of tensors, got int"),
    ([1], "params must hold tensors only"),
])
def test_bad_params_raise_argument_type_error(params, match):
    with pytest.raises(lowerset.ArgumentTypeError, match=match) as e:
        torch_ext.peak_memory(_step(), params=params)
    assert isinstance(e.value, TypeError)


def test_a_meter_inside_another_profiler_raises_measurement_error():
    with torch.profiler.profile():
        with pytest.raises(torch_ext.MeasurementError, match="already running") as e:
            with MemoryMeter("cpu"):
                pass
    assert isinstance(e.value, RuntimeError)
