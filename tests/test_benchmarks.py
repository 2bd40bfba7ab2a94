"""The benchmarks are not run in CI (they time things), but they must still load: an API they use that changed
breaks them at import, which this catches."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_a_benchmark_loads(path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(path)])
    monkeypatch.syspath_prepend(str(path.parent))  # a benchmark may import its neighbours (heavy_env)
    spec = importlib.util.spec_from_file_location(f"_benchmark_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)  # its top level only: main() runs under __main__
    if path.stem.startswith("bench_"):
        assert callable(getattr(module, "main", None)), f"{path.name} has no main()"


def test_there_are_benchmarks():
    assert len(BENCHMARKS) >= 8
