"""The package's layers import only downward, and the policy layer stays sans-I/O (DESIGN: Layers).

Every module of ``platoon/`` is parsed with ``ast`` (nothing is imported) and each import, including a relative one,
a ``TYPE_CHECKING`` one and a literal ``importlib.import_module("x")`` / ``__import__("x")``, is checked:

- ``platoon/policy`` imports none of :data:`POLICY_FORBIDDEN` and never calls ``open(``;
- ``simpy`` only in ``platoon/sim``; ``torch`` only in ``platoon/live``; ``asyncio`` only in ``platoon/live`` and
  ``platoon/cli.py``;
- a module never imports a higher layer (:data:`RANK`): config < policy < runs < sim, live < the façades
  (experimental, testing, analysis) < cli; the two runtimes never import each other.

A new top-level module or subpackage must be given a rank here; until then the test names it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "platoon"

#: Layer rank of each top-level part of the package; a module may import its own rank or lower.
RANK = {
    "__init__": 0,  # the root package: __version__ and the docstring, importable from anywhere
    "config": 0,
    "console": 0,  # the rich Console factory (rich only)
    "policy": 1,
    "runs": 2,
    "sim": 3,
    "live": 3,
    "experimental": 4,
    "testing": 4,
    "analysis": 4,
    "_checks": 4,
    "report": 4,
    "cli": 5,
    "__main__": 5,
}
RUNTIMES = {"sim", "live"}

#: What the sans-I/O policy layer may not import: event loops, simulators, tensors, clocks, threads, processes,
#: sockets, and anything that reaches the file system.
POLICY_FORBIDDEN = {
    "asyncio",
    "simpy",
    "torch",
    "time",
    "threading",
    "subprocess",
    "socket",
    "os",
    "io",
    "pathlib",
    "tempfile",
    "shutil",
}
#: Libraries allowed only in some layers.
ONLY_IN = {"simpy": {"sim"}, "torch": {"live"}, "asyncio": {"live", "cli"}}


@dataclass(frozen=True)
class Violation:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


def layer_of(relpath: str) -> str:
    """The layer of a module given as ``platoon/<...>.py``: its first part under ``platoon/``."""
    parts = Path(relpath).with_suffix("").parts
    return parts[1] if len(parts) > 1 else "__init__"


def _package_of(relpath: str) -> list[str]:
    """The dotted package a module's relative imports start from."""
    parts = list(Path(relpath).with_suffix("").parts)
    return parts if parts[-1] == "__init__" and parts.pop() else parts[:-1]


def _dynamic_import(node: ast.Call) -> str | None:
    """The module of ``importlib.import_module("x")``, ``import_module("x")`` or ``__import__("x")``, if literal."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def check_source(source: str, relpath: str) -> list[Violation]:
    """Every layering violation of one module's ``source``; ``relpath`` is its path, ``platoon/<...>.py``."""
    layer = layer_of(relpath)
    found: list[Violation] = []
    if layer not in RANK:
        return [Violation(relpath, 1, f"'{layer}' has no layer: give it a rank in tests/test_layering.py")]

    def target(module: str, line: int) -> None:
        parts = module.split(".")
        top = parts[0]
        if top == "platoon":
            other = parts[1] if len(parts) > 1 else "__init__"
            if other not in RANK:
                found.append(Violation(relpath, line, f"imports {module}, whose layer '{other}' has no rank"))
            elif layer in RUNTIMES and other in RUNTIMES and other != layer:
                found.append(
                    Violation(relpath, line, f"runtime {layer} imports the other runtime ({module})")
                )
            elif RANK[other] > RANK[layer]:
                found.append(
                    Violation(
                        relpath, line, f"{layer} (a lower layer) imports {module} (the higher layer {other})"
                    )
                )
            return
        if layer == "policy" and top in POLICY_FORBIDDEN:
            found.append(Violation(relpath, line, f"platoon/policy is sans-I/O but imports {module}"))
        elif top in ONLY_IN and layer not in ONLY_IN[top]:
            where = " and ".join(f"platoon/{p}" for p in sorted(ONLY_IN[top]))
            found.append(Violation(relpath, line, f"imports {module}, allowed only in {where}"))

    for node in ast.walk(ast.parse(source, filename=relpath)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(relpath)
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module == "platoon":
                # from platoon import sim: the layer is what is imported; any other name (__version__) is the
                # root's attribute (an unranked subpackage is named by its own files' check)
                for alias in node.names:
                    target(f"platoon.{alias.name}" if alias.name in RANK else "platoon", node.lineno)
            else:
                target(module, node.lineno)
        elif isinstance(node, ast.Call):
            dynamic = _dynamic_import(node)
            if dynamic:
                target(dynamic, node.lineno)
            if layer == "policy" and isinstance(node.func, ast.Name) and node.func.id == "open":
                found.append(Violation(relpath, node.lineno, "platoon/policy is sans-I/O but calls open("))
    return sorted(found, key=lambda v: v.line)  # stable: source order within a line


def check_package(root: Path = PACKAGE) -> list[Violation]:
    """Every violation of every module under ``root`` (the ``platoon`` package directory)."""
    found: list[Violation] = []
    for path in sorted(root.rglob("*.py")):
        relpath = path.relative_to(root.parent).as_posix()
        found.extend(check_source(path.read_text(encoding="utf-8"), relpath))
    return found


def test_the_package_respects_its_layers():
    modules = sorted(p.relative_to(PACKAGE.parent).as_posix() for p in PACKAGE.rglob("*.py"))
    assert "platoon/policy/__init__.py" in modules and "platoon/runs/checkpoints.py" in modules
    violations = check_package()
    assert not violations, "layering violations:\n" + "\n".join(map(str, violations))


PLANTED = [
    ("platoon/policy/x.py", "import math\nimport os\n", 2, "sans-I/O but imports os"),
    ("platoon/policy/x.py", "from os.path import join\n", 1, "sans-I/O but imports os.path"),
    ("platoon/policy/x.py", "import time as clock\n", 1, "imports time"),
    ("platoon/policy/x.py", "from pathlib import Path\n", 1, "imports pathlib"),
    ("platoon/policy/x.py", "import threading, io\n", 1, "imports threading"),
    ("platoon/policy/x.py", "import asyncio\n", 1, "imports asyncio"),
    ("platoon/policy/x.py", "import torch.nn\n", 1, "imports torch.nn"),
    ("platoon/policy/x.py", "import simpy\n", 1, "imports simpy"),
    ("platoon/policy/x.py", "import socket, subprocess, tempfile, shutil\n", 1, "imports socket"),
    ("platoon/policy/x.py", "def f(p):\n    with open(p) as f:\n        return f.read()\n", 2, "calls open("),
    ("platoon/policy/samplers/x.py", "import importlib\nimportlib.import_module('os')\n", 2, "imports os"),
    (
        "platoon/policy/x.py",
        "from platoon.runs import RunDir\n",
        1,
        "policy (a lower layer) imports platoon.runs",
    ),
    ("platoon/policy/x.py", "from platoon import analysis\n", 1, "imports platoon.analysis"),
    ("platoon/policy/samplers/x.py", "from ...runs import jsonl\n", 1, "imports platoon.runs"),
    (
        "platoon/policy/x.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import platoon.sim\n",
        3,
        "imports platoon.sim",
    ),
    ("platoon/config/x.py", "from platoon.policy.stats import FATES\n", 1, "config (a lower layer) imports"),
    ("platoon/runs/x.py", "import simpy\n", 1, "allowed only in platoon/sim"),
    (
        "platoon/runs/x.py",
        "from . import x\nfrom ..sim import engine\n",
        2,
        "imports platoon.sim (the higher layer sim)",
    ),
    ("platoon/sim/x.py", "import torch\n", 1, "allowed only in platoon/live"),
    ("platoon/sim/x.py", "import asyncio\n", 1, "allowed only in platoon/cli and platoon/live"),
    ("platoon/sim/x.py", "from platoon.live import backend\n", 1, "runtime sim imports the other runtime"),
    ("platoon/live/x.py", "import simpy\n", 1, "allowed only in platoon/sim"),
    ("platoon/analysis.py", "from platoon.cli import app\n", 1, "imports platoon.cli"),
    ("platoon/analysis.py", "__import__('asyncio')\n", 1, "imports asyncio"),
    ("platoon/__init__.py", "from platoon.policy import stats\n", 1, "imports platoon.policy"),
    ("platoon/runs/x.py", "import platoon.harness\n", 1, "layer 'harness' has no rank"),
    ("platoon/harness/x.py", "import json\n", 1, "'harness' has no layer"),
]


@pytest.mark.parametrize(("relpath", "source", "line", "message"), PLANTED)
def test_the_checker_catches_a_planted_violation(relpath, source, line, message):
    violations = check_source(source, relpath)
    assert violations, f"{relpath}: nothing caught in {source!r}"
    first = violations[0]
    assert (first.file, first.line) == (relpath, line)
    assert message in first.message
    assert str(first).startswith(f"{relpath}:{line}: ")


ALLOWED = [
    (
        "platoon/policy/x.py",
        "import math, random, hashlib, json, enum\nfrom platoon.config import registry\n",
    ),
    ("platoon/policy/samplers/x.py", "from ..stats import FATES\nfrom . import base\nimport platoon\n"),
    ("platoon/policy/x.py", "def f(d):\n    return d.open()\n"),  # a method named open is not the builtin
    ("platoon/runs/x.py", "import os, time, pathlib\nfrom platoon.policy import stats\n"),
    (
        "platoon/sim/x.py",
        "import simpy\nfrom platoon.runs import RunDir\nfrom platoon.policy import dispatcher\n",
    ),
    ("platoon/live/x.py", "import asyncio, torch\nfrom platoon.runs import RunDir\n"),
    ("platoon/cli.py", "import asyncio\nfrom platoon import analysis, sim, live\n"),
    ("platoon/__main__.py", "from platoon.cli import main\n"),
    ("platoon/config/registry.py", "from platoon import __version__\n"),
    ("platoon/testing.py", "from platoon.experimental import task_sampler\nfrom platoon.sim import x\n"),
    ("platoon/config/registry.py", "import importlib\nimportlib.import_module(name)\n"),
]


@pytest.mark.parametrize(("relpath", "source"), ALLOWED)
def test_the_checker_allows_downward_imports(relpath, source):
    assert check_source(source, relpath) == []


def test_check_package_walks_every_module(tmp_path):
    root = tmp_path / "platoon"
    (root / "policy" / "samplers").mkdir(parents=True)
    (root / "__init__.py").write_text('__version__ = "0"\n')
    (root / "policy" / "__init__.py").write_text("")
    (root / "policy" / "samplers" / "deep.py").write_text("x = 1\nimport subprocess\n")
    assert [str(v) for v in check_package(root)] == [
        "platoon/policy/samplers/deep.py:2: platoon/policy is sans-I/O but imports subprocess"
    ]
