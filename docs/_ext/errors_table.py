"""The errors page's tables, rendered from the exception classes when the site is built.

A page writes::

    ```{errors-table} torch_ext.exceptions
    ```

and gets one row per exception and warning class the module lists in ``__all__``: its name
(linked to its API page), the classes it derives from, and the first sentence of its
docstring (its reST roles as code). A class added, moved or reworded shows on the next build.
"""

import importlib
import inspect
import re

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective


def _public_name(cls):
    """The name users import `cls` under: its package's (``torch_ext.TraceError``)."""
    package = cls.__module__.split(".")[0]
    return f"{package}.{cls.__qualname__}"


_ROLE = re.compile(r":(?:mod|class|func|meth|attr|data):`~?([^`]+)`")
# a full stop before a capital: "eq. (2)" and "e.g. the" do not end a sentence
_SENTENCE_END = re.compile(r"\.\s+(?=[A-Z])")


def _first_sentence(cls):
    """The first sentence of `cls`'s docstring, its reST roles as Markdown code."""
    doc = inspect.getdoc(cls) or ""
    text = _ROLE.sub(r"`\1`", " ".join(doc.split("\n\n")[0].split()))
    end = _SENTENCE_END.search(text)
    return text if end is None else text[:end.start() + 1]


def rows(module_name):
    """(name, bases, summary) of each class in the module's ``__all__``."""
    module = importlib.import_module(module_name)
    out = []
    for name in module.__all__:
        cls = getattr(module, name)
        if not (inspect.isclass(cls) and issubclass(cls, (Exception, Warning))):
            continue
        bases = ", ".join(f"`{b.__name__}`" if b.__module__ == "builtins"
                          else f"{{py:class}}`~{_public_name(b)}`" for b in cls.__bases__)
        out.append((f"{{py:class}}`~{_public_name(cls)}`", bases, _first_sentence(cls)))
    return out


class ErrorsTable(SphinxDirective):
    """``{errors-table} <module>``: the table of that module's exception classes."""

    required_arguments = 1
    has_content = False

    def run(self):
        """The table as parsed Markdown, in a container."""
        lines = ["| class | derives from | what it means |", "|---|---|---|"]
        lines += [f"| {n} | {b} | {s.replace('|', '/')} |"
                  for n, b, s in rows(self.arguments[0])]
        box = nodes.container(classes=["errors-table"])
        self.state.nested_parse(StringList(lines, source=self.arguments[0]), self.content_offset,
                                box)
        return [box]


def setup(app):
    """Register the directive with Sphinx."""
    app.add_directive("errors-table", ErrorsTable)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
