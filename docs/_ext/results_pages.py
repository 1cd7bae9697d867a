"""Benchmark tables and pictures rendered from ``results/*.json`` when the site is built.

A page writes::

    ```{results-table} bench_torch_hf
    ```

and gets the Markdown that the benchmark's own renderer (``examples/bench_*.py``) makes from
its JSON, parsed as part of the page; ``{results-figure} NAME`` draws the benchmark's picture
from its JSON with the benchmark's own plotting function into ``docs/_generated/`` (not
committed) and shows it. Where the JSON is not in the checkout, the page says so and names the
command that writes it; nothing is typed by hand. Each JSON file is a dependency of its page,
so a re-run of a benchmark rebuilds the page. ``{results-md} FILE`` shows a Markdown file of a
run that wrote no JSON (the GPU records of Table 1).
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


def _bench_quality(data):
    m = _example("bench_quality")
    return m.markdown(data["rows"], m.machine_line(data["machine"]), data["exact_limit"])


def _bench_scale(data):
    m = _example("bench_scale")
    rows = data["rows"]
    slopes = m.fits(rows)
    return m.markdown(rows, slopes, m.targets(rows, slopes), m.machine_line(data["machine"]),
                      data["time_limit"])


def _train_distributed(data):
    return _example("train_distributed").compare_markdown(data)


def _bench_torch(data):
    return _example("bench_torch").page_markdown(data)


def _profile_torch_executor(data):
    return _example("profile_torch_executor").render(data)


def _figure4(data):
    return _example("reproduce_figure4").page_markdown(data)


def _table1(data):
    return _example("reproduce_table1").page_markdown(data)


def _bench_planner(data):
    return _example("bench_planner").page_markdown(data)


def _bench_dtr(data):
    return _example("bench_dtr").page_markdown(data)


def _bench_optimality(data):
    return _example("bench_optimality").markdown(data)


def _bench_floor(data):
    return _example("bench_floor").markdown(data)


def _bench_costs(data):
    return _example("bench_costs").markdown(data)


def _bench_budgets(data):
    return _example("bench_budgets").markdown(data)


def _bench_executor(data):
    m = _example("bench_executor")
    return m.markdown(data["results"], data["machine"], data.get("repeats"))


# name -> (JSON file under results/, renderer, the command that writes the JSON)
TABLES = {
    "bench_quality": ("bench_quality.json", _bench_quality,
                      "python examples/bench_quality.py"),
    "bench_quality_windowed": ("bench_quality_windowed.json", _bench_quality,
                               "python examples/bench_quality.py --graphs resnet/250 "
                               "resnet/500 transformer/156 transformer/312 unet/227 unet/455 "
                               "--out results/bench_quality_windowed"),
    "bench_scale": ("bench_scale.json", _bench_scale, "python examples/bench_scale.py"),
    "bench_scale_gpt": ("bench_scale_gpt.json", _bench_scale,
                        "python examples/bench_scale.py --families gpt llama "
                        "--out results/bench_scale_gpt"),
    "bench_torch_cpu": ("bench_torch_cpu.json", _bench_torch,
                        "python examples/bench_torch.py --preset cpu --threads 1 --rounds 9"),
    "bench_torch_llama": ("bench_torch_llama/bench_torch_cpu.json", _bench_torch,
                          "python examples/bench_torch.py --preset cpu --models llama "
                          "--out results/bench_torch_llama"),
    "bench_torch_inductor": ("bench_torch_inductor/bench_torch_cpu.json", _bench_torch,
                             "python examples/bench_torch.py --preset cpu --threads 1 "
                             "--compiler inductor --out results/bench_torch_inductor"),
    "bench_torch_hf": ("bench_torch_hf/bench_torch_cpu.json", _bench_torch,
                       "python examples/bench_torch.py --preset cpu --threads 1 --models --hf "
                       "--out results/bench_torch_hf"),
    "train_distributed_fsdp2": (
        "train_distributed_fsdp2.json", _train_distributed,
        "torchrun --standalone --nproc-per-node 2 examples/train_distributed.py --wrapper fsdp2 "
        "--compare --json results/train_distributed_fsdp2.json"),
    "bench_torch_gpu": ("bench_torch_gpu.json", _bench_torch,
                        "bash scripts/gpu_device.sh torch (bench_torch.py --preset gpu)"),
    "profile_torch_executor": ("profile_torch_executor.json", _profile_torch_executor,
                               "python examples/profile_torch_executor.py"),
    "figure4_gpu_h100": ("figure4_gpu_h100.json", _figure4,
                         "bash scripts/gpu_device.sh figure4 --networks resnet50"),
    "figure4": ("figure4.json", _figure4, "python examples/reproduce_figure4.py"),
    "table1": ("table1.json", _table1, "./scripts/main.sh"),
    "bench_planner": ("bench_planner.json", _bench_planner,
                      "python examples/bench_planner.py --json results/bench_planner.json"),
    "bench_dtr": ("dtr/bench_dtr.json", _bench_dtr, "python examples/bench_dtr.py"),
    "bench_optimality": ("bench_optimality.json", _bench_optimality,
                         "python examples/bench_optimality.py --json "
                         "results/bench_optimality.json"),
    "bench_floor": ("bench_floor.json", _bench_floor,
                    "python examples/bench_floor.py --threads 1"),
    "bench_costs": ("bench_costs.json", _bench_costs,
                    "python examples/bench_costs.py --threads 1"),
    "budgets": ("budgets.json", _bench_budgets, "python examples/bench_budgets.py"),
    "bench_executor": ("bench_executor.json", _bench_executor,
                       "python examples/bench_executor.py"),
}


def _missing(file, command):
    return (f"```{{note}}\nThis checkout has no `results/{file}`: `{command}` writes it, "
            "and the next build of the site shows it here.\n```\n")


def render(name):
    """Markdown of benchmark `name`: its tables, or a note naming the command that makes them."""
    file, renderer, command = TABLES[name]
    path = RESULTS / file
    if not path.exists():
        return _missing(file, command)
    return renderer(json.loads(path.read_text()))


def _bold_headings(text):
    """A table's own headings would enter the page's outline: they become bold lines."""
    return [("**" + ln.lstrip("#").strip() + "**") if ln.startswith("#") else ln
            for ln in text.splitlines()]


def _parsed(directive, lines, source):
    box = nodes.container(classes=["results-table"])
    directive.state.nested_parse(StringList(lines, source=source), directive.content_offset, box)
    return [box]


class ResultsTable(SphinxDirective):
    """``{results-table} NAME``: the tables of benchmark NAME, rendered from its JSON."""

    required_arguments = 1
    has_content = False

    def run(self):
        """The parsed tables, or a note naming the command."""
        name = self.arguments[0]
        if name not in TABLES:
            raise self.error(f"unknown benchmark {name!r}; known: {', '.join(TABLES)}")
        path = RESULTS / TABLES[name][0]
        if path.exists():
            self.env.note_dependency(str(path))
        return _parsed(self, _bold_headings(render(name)), str(path))


def _draw_table1(data, path):
    _example("reproduce_table1").bar_chart(data["results"], path)


def _draw_figure4(data, path):
    m = _example("reproduce_figure4")
    m.plot(data["results"], path, m.picture_title(data))


def _draw_bench_scale(data, path):
    m = _example("bench_scale")
    m.picture(data["rows"], m.fits(data["rows"]), path)


def _draw_bench_torch(data, path):
    _example("bench_torch").plot(data["results"], path)


def _draw_bench_dtr(data, path):
    _example("bench_dtr").picture(data["results"], path)


# name -> (JSON file under results/, drawer(data, png path), the command that writes the JSON,
# alt text)
FIGURES = {
    "table1": ("table1.json", _draw_table1, "./scripts/main.sh",
               "Measured peaks of each strategy per network"),
    "figure4": ("figure4.json", _draw_figure4, "python examples/reproduce_figure4.py",
                "Time per iteration against batch size, per network and method"),
    "bench_scale": ("bench_scale.json", _draw_bench_scale, TABLES["bench_scale"][2],
                    "Planner time against graph size, per family"),
    "bench_scale_gpt": ("bench_scale_gpt.json", _draw_bench_scale,
                        TABLES["bench_scale_gpt"][2], "Planner time against depth"),
    "bench_torch_cpu": ("bench_torch_cpu.json", _draw_bench_torch, TABLES["bench_torch_cpu"][2],
                        "Measured peak against recomputed FLOPs, per network and method"),
    "bench_torch_gpu": ("bench_torch_gpu.json", _draw_bench_torch, TABLES["bench_torch_gpu"][2],
                        "Measured peak against recomputed FLOPs on the GPU"),
    "bench_dtr": ("dtr/bench_dtr.json", _draw_bench_dtr, TABLES["bench_dtr"][2],
                  "Recomputation against budget, per network and method"),
}


class ResultsFigure(SphinxDirective):
    """``{results-figure} NAME``: the picture of benchmark NAME, drawn from its JSON at build
    time into ``docs/_generated/NAME.png``."""

    required_arguments = 1
    has_content = False

    def run(self):
        """The image node, or a note naming the command."""
        name = self.arguments[0]
        if name not in FIGURES:
            raise self.error(f"unknown picture {name!r}; known: {', '.join(FIGURES)}")
        file, draw, command, alt = FIGURES[name]
        path = RESULTS / file
        if not path.exists():
            return _parsed(self, _missing(file, command).splitlines(), str(path))
        self.env.note_dependency(str(path))
        out = Path(self.env.srcdir) / "_generated" / f"{name}.png"
        out.parent.mkdir(exist_ok=True)
        draw(json.loads(path.read_text()), out)
        return [nodes.image(uri=f"/_generated/{name}.png", alt=alt)]


class ResultsMarkdown(SphinxDirective):
    """``{results-md} FILE``: a Markdown file a benchmark wrote under results/ where it wrote
    no JSON (its headings become bold lines); where absent, a note naming the command."""

    required_arguments = 1
    has_content = True

    def run(self):
        """The parsed file, or a note naming the command."""
        path = RESULTS / self.arguments[0]
        command = " ".join(self.content).strip() or "the benchmark's command"
        if path.exists():
            self.env.note_dependency(str(path))
            text = path.read_text()
        else:
            text = _missing(self.arguments[0], command)
        return _parsed(self, _bold_headings(text), str(path))


def setup(app):
    """Register the three directives."""
    app.add_directive("results-table", ResultsTable)
    app.add_directive("results-figure", ResultsFigure)
    app.add_directive("results-md", ResultsMarkdown)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
