"""The repository's own text: no merge left half done."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = (".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg")


def test_no_file_holds_a_conflict_marker() -> None:
    left = []
    for folder in ("platoon", "tests", "docs", "benchmarks", "experiments", "extensions", ".ci"):
        for path in sorted((ROOT / folder).rglob("*")) if (ROOT / folder).is_dir() else ():
            if path.is_file() and (path.suffix in TEXT or path.parent.name == ".ci"):
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
                left += [f"{path.relative_to(ROOT)}:{i}" for i, line in enumerate(lines, 1)
                         if line.startswith(("<<<<<<< ", ">>>>>>> "))]
    for name in ("README.md", "Makefile", "pyproject.toml"):
        lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
        left += [f"{name}:{i}" for i, line in enumerate(lines, 1) if line.startswith(("<<<<<<< ", ">>>>>>> "))]
    assert left == []
