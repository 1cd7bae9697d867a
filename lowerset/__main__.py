"""``python -m lowerset``: the command line of :mod:`lowerset.cli`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
