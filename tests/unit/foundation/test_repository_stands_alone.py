"""The repository's documents and code point at nothing outside it, and the architecture notes name
files that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "operator" / "lockstep"
OUTSIDE = re.compile(r"DESIGN\.md|\.\./shared|shared/apiserver-conformance|/work/")


def repository_texts() -> list[Path]:
    texts = [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("bench/**/*.md")]
    texts += [
        *PACKAGE.rglob("*.py"),
        *PACKAGE.rglob("*.md"),
        *ROOT.glob("charts/**/*"),
        *ROOT.glob("examples/*"),
    ]
    return [p for p in texts if p.is_file()]


def test_no_document_or_comment_points_outside_the_repository() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in repository_texts()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not offenders, "\n".join(offenders)


def test_architecture_notes_name_files_that_exist() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:[a-z_]+/)*[a-z_]+\.py)`", text))
    assert len(named) > 20
    files = [p.relative_to(ROOT).as_posix() for p in ROOT.glob("**/*.py") if ".venv" not in p.parts]
    missing = [name for name in sorted(named) if not any(f == name or f.endswith("/" + name) for f in files)]
    assert not missing, missing
