"""The package's layers import only downward, and the policy layer stays sans-I/O (DESIGN: Layers).

Every module of ``platoon/`` is parsed with ``ast`` (nothing is imported) and each import, including a relative one,
a ``TYPE_CHECKING`` one and a literal ``importlib.import_module("x")`` / ``__import__("x")``, is checked:

- ``platoon/policy`` imports none of :data:`POLICY_FORBIDDEN` (libraries) and :data:`POLICY_FORBIDDEN_MODULES` (the
  package's own modules that load plug-ins, read files or the environment) and never calls ``open(``: it receives
  its task samplers and admission rules resolved (``platoon/components``);
- ``simpy`` only in ``platoon/sim``; ``torch`` only in ``platoon/live``; ``asyncio`` only in ``platoon/live`` and
  ``platoon/cli.py``;
- a module never imports a higher layer (:data:`RANK`): config < policy < components < runs < sim, live < the façades
  (experimental, environments, testing, analysis) < cli; the two runtimes never import each other.

A new top-level module or subpackage must be given a rank here; until then the test names it.

And the package has no import cycle: the graph of every import that runs (at the top of a module or inside a
function) has no loop, and the test names each one it finds with the lines of its imports.
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
    "lifeline": 0,  # a started process ends with its starter (stdlib only): workers, fork server, sweep pools
    "reaper": 0,  # what a library starts ends with its starter too (stdlib only): a local Ray instance
    "ray_connect": 0,  # connecting to Ray, a local instance reaped (beside reaper): sweeps and rollout actors
    "policy": 1,
    "components": 1.5,  # plug-ins resolved for the policy: needs its core classes and config's loader (see its doc)
    "runs": 2,
    "sim": 3,
    "live": 3,
    "experimental": 4,
    "environments": 4,
    "testing": 4,
    "analysis": 4,
    "_checks": 4,
    "report": 4,
    "tasks": 4,  # platoon tasks show/export, beside report
    "cli": 5,
    "__main__": 5,
}
RUNTIMES = {"sim", "live"}

#: What the sans-I/O policy layer may not import: event loops, simulators, tensors, clocks, threads, processes,
#: sockets, and anything that reaches the file system, the environment, the interpreter's state or entry points.
POLICY_FORBIDDEN = {
    "asyncio",
    "importlib",  # importlib.metadata too: entry points and installed distributions
    "pkgutil",
    "runpy",
    "sys",
    "glob",
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
#: The package's own modules the policy layer may not import: they load plug-ins (imports, entry points, the
#: environment's switches) or read files. Resolution lives in ``platoon.components``, above the policy.
POLICY_FORBIDDEN_MODULES = {
    "platoon.config.registry",
    "platoon.config.component_resolution",
    "platoon.config.resolve",
    "platoon.config.lock_records",
    "platoon.config.rules",
    "platoon.config.validate",
    "platoon.config.loader",
    "platoon.config.overrides",
    "platoon.config.presets",
    "platoon.config.sim_files",
    "platoon.config.yaml_loader",
    "platoon.config.tracking",
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
        if layer == "policy" and any(module == m or module.startswith(m + ".") for m in POLICY_FORBIDDEN_MODULES):
            found.append(Violation(relpath, line, f"platoon/policy is sans-I/O but imports {module} (it loads "
                                                  "plug-ins or reads files; resolve above the policy)"))
            return
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
                # from platoon.config import registry: the module imported may be the name itself
                named = [f"{module}.{alias.name}" for alias in node.names]
                target(next((n for n in named if n in POLICY_FORBIDDEN_MODULES), module), node.lineno)
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
    ("platoon/policy/samplers/x.py", "importlib.import_module('os')\n", 1, "imports os"),
    ("platoon/policy/x.py", "import importlib\n", 1, "sans-I/O but imports importlib"),
    ("platoon/policy/x.py", "import json\nimport importlib.metadata as md\n", 2, "imports importlib.metadata"),
    ("platoon/policy/x.py", "from importlib.metadata import entry_points\n", 1, "imports importlib.metadata"),
    ("platoon/policy/x.py", "import sys\n", 1, "sans-I/O but imports sys"),
    ("platoon/policy/x.py", "from platoon.config import registry\n", 1, "imports platoon.config.registry"),
    ("platoon/policy/admission/x.py", "from platoon.config import errors, registry\n", 1, "platoon.config.registry"),
    (
        "platoon/policy/samplers/x.py",
        "from platoon.config.component_resolution import find_class\n",
        1,
        "imports platoon.config.component_resolution (it loads plug-ins",
    ),
    ("platoon/policy/x.py", "import platoon.config.registry as r\n", 1, "imports platoon.config.registry"),
    ("platoon/policy/x.py", "from ..config.resolve import SamplerCheckContext\n", 1, "platoon.config.resolve"),
    ("platoon/policy/x.py", "from platoon.components import build_policy\n", 1, "the higher layer components"),
    ("platoon/components/x.py", "from platoon.runs import RunDir\n", 1, "components (a lower layer) imports"),
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
        "import math, random, hashlib, json, enum, inspect\nfrom platoon.config import errors\n"
        "from platoon.config.components import PassRateOptions\nfrom platoon import __version__\n",
    ),
    (
        "platoon/components/x.py",
        "import importlib\nfrom platoon.config import registry\nfrom platoon.policy import SamplerSet\n",
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


def test_every_forbidden_module_exists():
    """The list of the package's forbidden modules names real ones, so that a rename cannot empty it unnoticed."""
    missing = [m for m in POLICY_FORBIDDEN_MODULES if not (PACKAGE.parent / (m.replace(".", "/") + ".py")).is_file()]
    assert missing == []


def test_check_package_walks_every_module(tmp_path):
    root = tmp_path / "platoon"
    (root / "policy" / "samplers").mkdir(parents=True)
    (root / "__init__.py").write_text('__version__ = "0"\n')
    (root / "policy" / "__init__.py").write_text("")
    (root / "policy" / "samplers" / "deep.py").write_text("x = 1\nimport subprocess\n")
    assert [str(v) for v in check_package(root)] == [
        "platoon/policy/samplers/deep.py:2: platoon/policy is sans-I/O but imports subprocess"
    ]


# ------------------------------------------------------------------------------------------------ import cycles
#
# A module of platoon never imports, however indirectly, a module that imports it back: not at the top and not in
# a function (a function-local import hides a cycle from the reader, it does not break it). A cycle is broken by
# moving the piece both sides need to a module they can both import downward, as live/envs/resolve.py and
# live/inference/model_kinds.py were. An import under ``if TYPE_CHECKING:`` never runs, so it is no edge here (the layer
# check above still reads it).


def module_name(relpath: str) -> str:
    """The dotted name of the module at ``platoon/<...>.py`` (a package's ``__init__`` is the package)."""
    parts = list(Path(relpath).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    """Whether an ``if`` tests ``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    name = test.attr if isinstance(test, ast.Attribute) else test.id if isinstance(test, ast.Name) else None
    return name == "TYPE_CHECKING"


def package_imports(source: str, relpath: str, modules: set[str]) -> dict[str, int]:
    """The modules of ``modules`` that one module imports, each with the line of its first import.

    Every import that runs counts, at any depth of the tree: ``import a.b``, ``from a import b`` (the module ``a.b``
    when it is one, else ``a``), a relative one, and a literal ``import_module("a.b")``; one under
    ``if TYPE_CHECKING:`` does not. Importing a submodule does not count as importing its parent package (the parent
    runs first, but it is not imported *by* the submodule).
    """
    found: dict[str, int] = {}
    me = module_name(relpath)
    tree = ast.parse(source, filename=relpath)
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _is_type_checking(node.test)
        for stmt in node.body
        for inner in ast.walk(stmt)
    }

    def target(module: str, line: int) -> None:
        while module not in modules and "." in module:
            module = module.rsplit(".", 1)[0]
        if module in modules and module != me:
            found.setdefault(module, line)

    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
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
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                target(sub if sub in modules else module, node.lineno)
        elif isinstance(node, ast.Call):
            dynamic = _dynamic_import(node)
            if dynamic:
                target(dynamic, node.lineno)
    return dict(sorted(found.items(), key=lambda item: item[1]))


def import_cycles(sources: dict[str, str]) -> list[str]:
    """One line per import cycle among ``sources`` (``platoon/<...>.py`` -> source text), sorted.

    Each strongly connected part of the import graph with more than one module is one cycle, named by the shortest
    loop through its first module in name order, with the line of each import:
    ``a -> b -> a (platoon/a.py:3, platoon/b.py:7)``.
    """
    paths = {module_name(relpath): relpath for relpath in sources}
    modules = set(paths)
    graph = {name: package_imports(sources[relpath], relpath, modules) for name, relpath in paths.items()}

    # Tarjan's strongly connected components, iterative so that a long chain cannot hit the recursion limit.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    parts: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                if len(part) > 1:
                    parts.append(sorted(part))

    lines = []
    for part in parts:
        start, inside = part[0], set(part)
        came_from: dict[str, str] = {}
        frontier = [start]
        while start not in came_from:  # breadth first from start, back to start: the shortest loop
            nxt = []
            for node in frontier:
                for child in sorted(graph[node]):
                    if child in inside and child not in came_from:
                        came_from[child] = node
                        nxt.append(child)
            frontier = nxt
        loop = [start]
        while True:
            loop.append(came_from[loop[-1]])
            if loop[-1] == start:
                break
        loop.reverse()
        where = ", ".join(f"{paths[a]}:{graph[a][b]}" for a, b in zip(loop, loop[1:], strict=False))
        lines.append(f"{' -> '.join(loop)} ({where})")
    return sorted(lines)


def test_the_package_has_no_import_cycle():
    sources = {p.relative_to(PACKAGE.parent).as_posix(): p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py")}
    modules = set(map(module_name, sources))
    edges = sum(len(package_imports(source, relpath, modules)) for relpath, source in sources.items())
    assert edges > 100, f"the import graph has {edges} edges: the parser no longer sees the package's imports"
    cycles = import_cycles(sources)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


PLANTED_CYCLES = [
    (
        {"platoon/a.py": "import platoon.b\n", "platoon/b.py": "from platoon.a import f\n"},
        "platoon.a -> platoon.b -> platoon.a (platoon/a.py:1, platoon/b.py:1)",
    ),
    (  # a function-local import, as live/inference/model -> live/inference/hf was
        {
            "platoon/live/inference/model.py":
                "x = 1\n\n\ndef build():\n    from platoon.live.inference.hf import HF\n",
            "platoon/live/inference/hf.py": "from platoon.live.inference.model import PolicyModel\n",
        },
        "platoon.live.inference.hf -> platoon.live.inference.model -> platoon.live.inference.hf "
        "(platoon/live/inference/hf.py:1, platoon/live/inference/model.py:5)",
    ),
    (
        {
            "platoon/x/a.py": "import json\n\nfrom .b import B\n",
            "platoon/x/b.py": "from . import c\n",
            "platoon/x/c.py": "import importlib\nimportlib.import_module('platoon.x.a')\n",
        },
        "platoon.x.a -> platoon.x.b -> platoon.x.c -> platoon.x.a (platoon/x/a.py:3, platoon/x/b.py:1, "
        "platoon/x/c.py:2)",
    ),
    (  # a submodule that imports a name from its own package, whose __init__ imports the submodule
        {
            "platoon/envs/__init__.py": "from platoon.envs.search import Search\n",
            "platoon/envs/base.py": "class Task: ...\n",
            "platoon/envs/search.py": "from platoon.envs import Task\n",
        },
        "platoon.envs -> platoon.envs.search -> platoon.envs (platoon/envs/__init__.py:1, platoon/envs/search.py:1)",
    ),
]


@pytest.mark.parametrize(("sources", "cycle"), PLANTED_CYCLES)
def test_the_cycle_check_catches_a_planted_cycle(sources, cycle):
    assert import_cycles(sources) == [cycle]


def test_the_cycle_check_allows_downward_imports():
    sources = {
        # a package re-exporting its modules, which import each other downward and name their package's modules
        "platoon/envs/__init__.py": "from platoon.envs.base import Task\nfrom .resolve import resolve\n",
        "platoon/envs/search.py": "from platoon.envs.base import Task\n",
        "platoon/envs/resolve.py": "import platoon.envs.search\nfrom platoon.envs import base\n",
        "platoon/kinds.py": "def build():\n    from platoon.envs import resolve\n",
        # a type the other way, which never runs
        "platoon/envs/base.py": "import json\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import platoon.kinds\n",
    }
    assert import_cycles(sources) == []
    modules = set(map(module_name, sources))
    imports = package_imports(sources["platoon/envs/resolve.py"], "platoon/envs/resolve.py", modules)
    assert imports == {"platoon.envs.search": 1, "platoon.envs.base": 2}


# -- runtimes decide no rule ------------------------------------------------------------------------------------------
# A runtime (platoon/sim, platoon/live) carries out the driver's decisions; it decides no verdict and computes no
# deadline of a rule. Detected from the source (ast):
# - a verdict: a verdict name ("trained", "uniform", ...) as a constant anywhere but in a comparison (reading a
#   group's verdict is fine; producing one is the policy layer's group_verdict);
# - a deadline: arithmetic (+, -) on a name or attribute that names a rule's timing (quorum, straggler, deadline,
#   timeout): the straggler deadlines and the teardown and start-slot timers come from the driver's next_deadline().
RULE_TIMING = ("quorum", "straggler", "deadline", "timeout")
VERDICT_NAMES = {"trained", "uniform", "no_completed_root", "failed", "unknown"}
RUNTIME_MODULES = ("sim/runtime.py", "sim/rollouts.py", "sim/trainer.py", "sim/clock.py", "live/runtime.py",
                   "live/rollouts/lease_host.py", "live/rollouts/workflow.py", "live/rollouts/lease.py")


def _names_in(node: ast.AST) -> list[str]:
    return [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
            if isinstance(n, ast.Name | ast.Attribute)]


def runtime_rule_decisions(source: str) -> list[str]:
    """Where a runtime module decides a verdict or a deadline itself (see above), as 'line N: what'."""
    tree = ast.parse(source)
    compared = {id(c) for node in ast.walk(tree) if isinstance(node, ast.Compare)
                for c in ast.walk(node) if isinstance(c, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in VERDICT_NAMES and id(node) not in compared:
            found.append(f"line {node.lineno}: decides the verdict {node.value!r}")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
            timed = [n for n in _names_in(node) if any(word in n.lower() for word in RULE_TIMING)]
            if timed:
                found.append(f"line {node.lineno}: computes a rule's time from {timed[0]}")
    return found


@pytest.mark.parametrize("relpath", RUNTIME_MODULES)
def test_runtimes_decide_no_verdict_and_no_deadline(relpath):
    assert runtime_rule_decisions((PACKAGE / relpath).read_text()) == []


@pytest.mark.parametrize("source", [
    'verdict = "trained" if 0 < passes < n else "uniform"',
    "due = quorum_t + self.straggler_s + offset",
    "handle = loop.call_at(self.t0 + group.deadline, fire)",
])
def test_the_rule_check_catches_a_runtime_that_decides(source):
    assert runtime_rule_decisions(source)


def test_the_rule_check_allows_reading_a_verdict_and_arming_the_drivers_deadline():
    assert runtime_rule_decisions('trained = [g for g in groups if g.output.verdict == "trained"]\n'
                                  "handle = loop.call_at(self._t0 + due, fire)") == []


# -- runtimes order no cycle and read no dispatcher ---------------------------------------------------------------
# The step cycle is the driver's (platoon/policy/cycle.py): a runtime carries out what driver.poll answers and feeds
# back what happened. Detected from the source (ast), in every executor module:
# - reading the driver's internals: any attribute ``.dispatcher`` (the driver's public face is what a runtime uses);
# - deciding the cycle: a call or read of what decides it (``take_step``, ``commit_step``, ``finish_step``,
#   ``eval_due``, ``checkpoint_due``, ``step_metrics``, ``next_version``);
# - ordering it: one function that feeds two or more of the cycle's events (``Evaluated``, ``StepTrained``,
#   ``Published``, or the handlers they reach: ``on_evaluated``, ``on_trained``, ``on_published``), as a runtime
#   that trains and then publishes on its own would.
CYCLE_EVENTS = {"on_evaluated", "on_trained", "on_published", "Evaluated", "StepTrained", "Published"}
CYCLE_DECIDERS = {"take_step", "commit_step", "finish_step", "eval_due", "checkpoint_due", "step_metrics",
                  "next_version"}


def runtime_cycle_decisions(source: str) -> list[str]:
    """Where an executor module reads the dispatcher or decides or orders the step cycle, as 'line N: what'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "dispatcher":
            found.append(f"line {node.lineno}: reads the driver's dispatcher")
        elif isinstance(node, ast.Attribute) and node.attr in CYCLE_DECIDERS:
            found.append(f"line {node.lineno}: decides the cycle with {node.attr}")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names = (n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else None
                     for n in ast.walk(node))
            events = sorted({name for name in names if name in CYCLE_EVENTS})
            if len(events) > 1:
                found.append(f"line {node.lineno}: {node.name} orders the cycle's events {', '.join(events)} itself")
    return found


@pytest.mark.parametrize("relpath", RUNTIME_MODULES)
def test_runtimes_order_no_cycle_and_read_no_dispatcher(relpath):
    assert runtime_cycle_decisions((PACKAGE / relpath).read_text()) == []


@pytest.mark.parametrize(("source", "what"), [
    ("position = self.driver.dispatcher.outstanding[key].position", "reads the driver's dispatcher"),
    ("wait_s = policy.dispatcher.config.teardown_wait_s", "reads the driver's dispatcher"),
    ("step, starts = driver.take_step(now=now)", "decides the cycle with take_step"),
    ("if self.driver.eval_due(step.step):\n    evaluate()", "decides the cycle with eval_due"),
    ("def _trained(self):\n    self.driver.on_trained(now=t)\n    self.driver.on_published(now=t)",
     "_trained orders the cycle's events on_published, on_trained itself"),
    ("def _trained(self):\n    self._feed(StepTrained(metrics))\n    self._feed(Published())",
     "_trained orders the cycle's events Published, StepTrained itself"),
])
def test_the_cycle_check_catches_a_runtime_that_orders_the_cycle(source, what):
    assert any(what in f for f in runtime_cycle_decisions(source))


def test_the_cycle_check_allows_feeding_one_event_where_its_work_ends():
    assert runtime_cycle_decisions("def _trained(self):\n    self.carry(self.driver.on_trained(now=t))\n"
                                   "def _published(self):\n    self.carry(self.driver.on_published(now=t))\n"
                                   "def _evaluated(self):\n    self._feed(Evaluated(metrics))\n"
                                   "version = dec.version\n") == []


# -- the policy layer's public face ---------------------------------------------------------------------------------
# platoon/policy/__init__.py says what the rest of the package may use: a module outside platoon/policy imports from
# ``platoon.policy`` itself, never from a module behind it (``from platoon.policy.dispatcher import ...``).
def imports_past_the_policy_face(source: str) -> list[str]:
    """Where ``source`` imports a module behind ``platoon.policy``, as 'line N: module'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("platoon.policy."):
            found.append(f"line {node.lineno}: {node.module}")
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: {a.name}" for a in node.names if a.name.startswith("platoon.policy.")]
    return found


def test_nothing_outside_the_policy_layer_imports_past_its_face():
    crossings = {str(f.relative_to(PACKAGE)): found for f in sorted(PACKAGE.rglob("*.py"))
                 if f.relative_to(PACKAGE).parts[0] != "policy"
                 and (found := imports_past_the_policy_face(f.read_text()))}
    assert crossings == {}


@pytest.mark.parametrize("source", ["from platoon.policy.dispatcher import StartGroup",
                                    "def f():\n    from platoon.policy.samplers.base import Draw",
                                    "import platoon.policy.driver"])
def test_the_face_check_catches_an_import_past_it(source):
    assert imports_past_the_policy_face(source)


def test_the_face_check_allows_the_face():
    assert imports_past_the_policy_face("from platoon.policy import Driver, StartGroup\nimport platoon.policy") == []
