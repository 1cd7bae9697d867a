"""Sphinx configuration of the lowerset manual (built by scripts/docs.sh)."""

import importlib.util
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))

project = "lowerset"
author = "the lowerset authors"
copyright = "the lowerset authors"
release = "0.1.0"

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
    "results_pages",
    "errors_table",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "_generated", "requirements.txt"]
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 4  # the changelog's "###" headings are level 4 in its page

# The frameworks a front end needs are imported where installed; where one is not (a build in an
# environment without Chainer or PyTorch), autodoc documents that package from mocks.
HAVE_CHAINER = importlib.util.find_spec("chainer") is not None
HAVE_TORCH = importlib.util.find_spec("torch") is not None
autodoc_mock_imports = ([] if HAVE_CHAINER else ["chainer", "cupy"]) + \
    ([] if HAVE_TORCH else ["torch", "torchvision", "transformers"])

autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()
# Signatures show names and defaults only: each docstring's Parameters section gives the types
# with their units, and the annotations' expanded aliases (lowerset._typing.Number is
# int | float | integer[Any] | floating[Any]) made signatures four lines long. (It also keeps a
# string annotation of a name imported under TYPE_CHECKING, such as VerificationError's
# VerifyReport, from becoming a cross-reference that two front ends' re-exports make ambiguous.)
autodoc_typehints = "none"

# Doctests: only the ``{doctest}`` / ``{testcode}`` blocks of the pages run (the docstrings'
# examples run in pytest --doctest-modules, scripts/test.sh). A page's block that needs a
# framework says so with ``:skipif: not HAVE_TORCH`` (or HAVE_CHAINER); one that reads the
# authors' graphs, with ``:skipif: not HAVE_GRAPHS`` (the graphs are not in the repository).
doctest_test_doctest_blocks = ""
doctest_global_setup = """
import importlib.util, os, warnings
from authors_graphs import GRAPHS, have_graphs
HAVE_CHAINER = importlib.util.find_spec("chainer") is not None
HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_GRAPHS = have_graphs()
import lowerset
import lowerset as ls
"""

html_theme = "pydata_sphinx_theme"
html_title = "lowerset"
html_static_path = []
html_theme_options = {
    "navigation_depth": 2,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "header_links_before_dropdown": 7,
}
html_sidebars = {"changelog": []}

# Only internal links are checked (scripts/docs.sh runs -b linkcheck): the build machine reaches
# package registries only.
linkcheck_ignore = [r"https?://.*"]


def _compiled_literal(app, what, name, obj, options, lines):
    """Stopgap for ````torch.compile``d```` in torch_ext's docstrings (executor.py:92, 137;
    batch.py:302; trace.py:489, 520): reST ends an inline literal only before a space or
    punctuation, so the suffix needs an escaped space."""
    lines[:] = [line.replace("``torch.compile``d", "``torch.compile``\\ d") for line in lines]


def _no_canonical(self):
    """The re-exported classes (``lowerset.VerificationError`` in both front ends, ...) are
    documented under each package's name; without this, autodoc also registers their defining
    module's name for each, and the second package's page is a duplicate description."""
    return None


def setup(app):
    from sphinx.ext.autodoc import ClassDocumenter

    ClassDocumenter.get_canonical_fullname = _no_canonical
    app.connect("autodoc-process-docstring", _compiled_literal)
