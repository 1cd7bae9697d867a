"""Fixtures shared by the tests: the authors' published graphs."""

import os
from pathlib import Path

import pytest

import lowerset as ls

#: The seven graphs the paper's authors published (cg_<name>.txt).
CG_NAMES = ("vgg19", "unet", "resnet50", "googlenet", "pspnet", "resnet152", "densenet")


def graphs_dir():
    """The folder of the authors' cg_*.txt files: $LOWERSET_GRAPHS, else ../shared/graphs."""
    env = os.environ.get("LOWERSET_GRAPHS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "graphs"


@pytest.fixture(scope="session", params=CG_NAMES)
def cg_graph(request):
    """Each authors' graph, read once per session (skipped with the reason when absent)."""
    path = graphs_dir() / f"cg_{request.param}.txt"
    if not path.is_file():
        pytest.skip(f"authors' graph {path} not found; set LOWERSET_GRAPHS to the folder of "
                    "the cg_*.txt files")
    return ls.read_cg(path)
