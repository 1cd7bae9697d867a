"""Where the pages' examples find the authors' graphs (``cg_*.txt``): ``$LOWERSET_GRAPHS``, else
``../shared/graphs`` beside the checkout. Sphinx's doctest setup (docs/conf.py) and pytest's
(docs/conftest.py) both read it here."""

import os
from pathlib import Path

GRAPHS = os.environ.get("LOWERSET_GRAPHS",
                        str(Path(__file__).resolve().parents[3] / "shared" / "graphs"))


def have_graphs(folder: str = GRAPHS) -> bool:
    """Whether `folder` holds any of the authors' graphs."""
    return os.path.isdir(folder) and any(f.startswith("cg_") for f in os.listdir(folder))
