"""Benchmark tables rendered from ``results/*.json`` when the site is built.

A page writes::

    ```{results-table} bench_hf
    ```

and gets the Markdown that the benchmark's own renderer (``examples/bench_*.py``) makes from
its JSON, parsed as part of the page. Where the JSON is not in the checkout, the page says so
and names the command that writes it; nothing is typed by hand. Each JSON file is a dependency
of its page, so a re-run of a benchmark rebuilds the page.
"""

import importlib
import json
import sys
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"


def _example(name):
    """Module ``examples/<name>.py`` imported with examples/ on the path, as the scripts run."""
    folder = str(ROOT / "examples")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


def _bench_hf(data):
    m = _example("bench_hf")
    return m.markdown(data["rows"], m.machine_line(data["machine"]), data["size"],
                      data["rounds"])


def _bench_quality(data):
    m = _example("bench_quality")
    return m.markdown(data["rows"], m.machine_line(data["machine"]), data["exact_limit"])


def _bench_scale(data):
    m = _example("bench_scale")
    rows = data["rows"]
    slopes = m.fits(rows)
    return m.markdown(rows, slopes, m.targets(rows, slopes), m.machine_line(data["machine"]),
                      data["time_limit"])


def _bench_torch(data):
    m = _example("bench_torch")
    md = m.markdown(data["results"], data["machine"], data["preset"])
    seconds = data["machine"].get("seconds")
    return md + ("" if seconds is None else f"\nWall time: {seconds:.0f} s.\n")


def _profile_torch_executor(data):
    return _example("profile_torch_executor").render(data)


def _figure4(data):
    m = _example("reproduce_figure4")
    info = data["machine"]
    machine = ", ".join(f"{k} {v}" for k, v in info.items() if v is not None)
    return (f"Machine: {machine}. Command: `{data['command']}` ({data['elapsed_s']:.0f} s).\n\n"
            + m.markdown(data["results"]))


# name -> (JSON file under results/, renderer, the command that writes the JSON)
TABLES = {
    "bench_hf": ("bench_hf.json", _bench_hf, "python examples/bench_hf.py"),
    "bench_quality": ("bench_quality.json", _bench_quality,
                      "python examples/bench_quality.py"),
    "bench_scale": ("bench_scale.json", _bench_scale, "python examples/bench_scale.py"),
    "bench_scale_gpt": ("bench_scale_gpt.json", _bench_scale,
                        "python examples/bench_scale.py --families gpt llama "
                        "--out results/bench_scale_gpt"),
    "bench_torch_cpu": ("bench_torch_cpu.json", _bench_torch,
                        "python examples/bench_torch.py --preset cpu --threads 1"),
    "bench_torch_llama": ("bench_torch_llama/bench_torch_cpu.json", _bench_torch,
                          "python examples/bench_torch.py --preset cpu --models llama "
                          "--out results/bench_torch_llama"),
    "bench_torch_gpu": ("bench_torch_gpu.json", _bench_torch,
                        "bash scripts/gpu_device.sh torch (bench_torch.py --preset gpu)"),
    "profile_torch_executor": ("profile_torch_executor.json", _profile_torch_executor,
                               "python examples/profile_torch_executor.py"),
    "figure4_gpu_h100": ("figure4_gpu_h100.json", _figure4,
                         "bash scripts/gpu_device.sh figure4 --networks resnet50"),
}


def render(name):
    """Markdown of benchmark `name`: its tables, or a note naming the command that makes them."""
    file, renderer, command = TABLES[name]
    path = RESULTS / file
    if not path.exists():
        return (f"```{{note}}\nThis checkout has no `results/{file}`: `{command}` writes it, "
                "and the next build of the site shows its tables here.\n```\n")
    return renderer(json.loads(path.read_text()))


class ResultsTable(SphinxDirective):
    """``{results-table} NAME``: the tables of benchmark NAME, rendered from its JSON."""

    required_arguments = 1
    has_content = False

    def run(self):
        name = self.arguments[0]
        if name not in TABLES:
            raise self.error(f"unknown benchmark {name!r}; known: {', '.join(TABLES)}")
        path = RESULTS / TABLES[name][0]
        if path.exists():
            self.env.note_dependency(str(path))
        # a table's own headings would enter the page's outline: they become bold lines
        lines = []
        for line in render(name).splitlines():
            if line.startswith("#"):
                line = "**" + line.lstrip("#").strip() + "**"
            lines.append(line)
        box = nodes.container(classes=["results-table"])
        self.state.nested_parse(StringList(lines, source=str(path)), self.content_offset, box)
        return [box]


def setup(app):
    app.add_directive("results-table", ResultsTable)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


class ResultsMarkdown(SphinxDirective):
    """``{results-md} FILE``: a Markdown file a benchmark wrote under results/ where it wrote
    no JSON (its headings become bold lines); where absent, a note naming the command."""

    required_arguments = 1
    optional_arguments = 0
    has_content = True
    final_argument_whitespace = False

    def run(self):
        path = RESULTS / self.arguments[0]
        command = " ".join(self.content).strip() or "the benchmark's command"
        if path.exists():
            self.env.note_dependency(str(path))
            text = path.read_text()
        else:
            text = (f"```{{note}}\nThis checkout has no `results/{self.arguments[0]}`: "
                    f"`{command}` writes it.\n```\n")
        lines = [("**" + ln.lstrip("#").strip() + "**") if ln.startswith("#") else ln
                 for ln in text.splitlines()]
        box = nodes.container(classes=["results-table"])
        self.state.nested_parse(StringList(lines, source=str(path)), self.content_offset, box)
        return [box]


def _setup_md(app):
    app.add_directive("results-md", ResultsMarkdown)


_setup_tables = setup


def setup(app):  # noqa: F811
    _setup_md(app)
    return _setup_tables(app)
