"""Regenerate the configuration reference in README.md from lockstep's Settings model (make docs)."""

from __future__ import annotations

import sys
from pathlib import Path

from lockstep.config import reference_markdown

START = "<!-- config-reference:start (generated: make docs) -->"
END = "<!-- config-reference:end -->"


def main(readme: Path) -> int:
    text = readme.read_text()
    if START not in text or END not in text:
        print(f"{readme}: missing the markers {START} ... {END}", file=sys.stderr)
        return 1
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    readme.write_text(f"{head}{START}\n{reference_markdown()}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "README.md")))
