"""The arguments shared by the benchmarks that compare source trees on the start-up shape."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_shape_and_tree_arguments(parser: argparse.ArgumentParser, runs: str, runs_default: int) -> None:
    """``--nodes --pods --gang-size``, the repeat count ``runs`` (``--runs``, ``--rounds``), ``--json``
    and ``--tree NAME=DIR`` (repeatable)."""
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--gang-size", type=int, default=8)
    parser.add_argument(runs, type=int, default=runs_default)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="a source tree to compare (its directory holding the lockstep package); runs alternate",
    )


def parse_trees(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str | None]:
    """The ``--tree`` values by name; ``{"": None}`` (the importing tree) when none was given."""
    trees: dict[str, str | None] = {}
    for tree in args.tree:
        name, separator, directory = tree.partition("=")
        if not separator or not name or not Path(directory, "lockstep").is_dir():
            parser.error(f"--tree {tree!r}: expected NAME=DIR with DIR/lockstep a package directory")
        trees[name] = directory
    return trees or {"": None}
