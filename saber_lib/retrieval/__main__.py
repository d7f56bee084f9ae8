"""``python -m saber_lib.retrieval [--plugins MODULE ...]``: every registered retriever as a Markdown
table (name, what it is, its module, the whole-corpus index serving it), plugins' included."""
from __future__ import annotations

import argparse

from ..core.plugins import load_plugins
from .registry import markdown_table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m saber_lib.retrieval", description=__doc__.split("\n\n")[0])
    ap.add_argument("--plugins", nargs="*", default=[], metavar="MODULE", help="plugin modules to load first")
    args = ap.parse_args(argv)
    load_plugins(args.plugins)
    print(markdown_table(builtin_only=False), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
