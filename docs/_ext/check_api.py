"""Fail unless the API reference (docs/api/*.rst) lists every name of the packages' __all__."""

import importlib
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(DOCS.parent))
PACKAGES = ["lowerset", "lowerset.baselines", "lowerset.units", "lowerset.plot", "torch_ext",
            "chainer_ext"]


def listed():
    """{module: names} from the ``currentmodule`` and autosummary entries of the API pages."""
    out, module = {}, None
    for page in sorted((DOCS / "api").glob("*.rst")):
        for line in page.read_text().splitlines():
            m = re.match(r"\.\. currentmodule:: (\S+)", line)
            if m:
                module = m.group(1)
            elif re.match(r"   [A-Za-z_]\w*$", line) and module:
                out.setdefault(module, set()).add(line.strip())
    return out


def main():
    """Exit status: 0 where the API pages list every public name, else 1 (the names missing
    printed to stderr)."""
    have, missing = listed(), []
    for name in PACKAGES:
        module = importlib.import_module(name)
        missing += [f"{name}.{n}" for n in module.__all__ if n not in have.get(name, set())]
    if missing:
        print("docs/api/*.rst lacks these public names: " + ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
