"""Only ``platoon/runs`` writes files (DESIGN: the run directory): a module elsewhere renders its bytes, a table or
a figure and hands it to ``platoon.runs``, which writes it atomically.

Every module of ``platoon/`` outside ``platoon/runs`` is parsed with ``ast`` (nothing is imported) and each call
that writes a file is named, whatever the path it writes to (a path is seldom known before the run):

- a call of a method or function whose name writes: :data:`WRITING_NAMES` (``write_text``, ``savefig``,
  ``to_parquet``, ``extractall``, ...), or a module's writer: :data:`WRITING_CALLS` (``torch.save``,
  ``shutil.copy``, ``os.replace``, ...);
- ``open(file, mode)`` (and ``io.open``, ``os.fdopen``) with a mode that writes (``w``, ``a``, ``x`` or ``+``) or one
  that is not a literal (it cannot be told); ``X.open(mode)`` (``Path.open``) or ``tarfile.open(..., mode=...)``
  with a literal writing mode (a ``.open`` with no literal mode is some other object's: a pool, a channel);
- ``yaml.safe_dump`` and its kin given a stream (without one they return text, as ``config show`` prints it).

A write outside ``platoon/runs`` that is not a run's is allowed in :data:`ALLOWED`, by module and call, with the
reason; an allowance that no longer matches a call fails too, so the list cannot go stale. Creating an empty
directory (``mkdir``) is not a write here: the files in it are.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "platoon"
WRITER = "platoon/runs/"

#: Method or function names that write a file, whatever they are called on.
WRITING_NAMES = frozenset({
    "write_text", "write_bytes", "savefig", "imsave", "to_csv", "to_parquet", "to_pickle", "to_feather",
    "to_excel", "to_hdf", "save_pretrained", "extractall", "touch", "symlink_to", "hardlink_to",
})
#: ``module.function`` calls that write a file.
WRITING_CALLS = frozenset({
    "torch.save", "np.save", "np.savez", "np.savetxt", "numpy.save", "numpy.savez", "numpy.savetxt",
    "shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree", "shutil.move", "os.replace", "os.rename",
    "os.link", "os.symlink", "json.dump", "pickle.dump",
})
#: YAML's dumps, which write only when given a stream (without one they return the text: ``config show``'s).
STREAM_DUMPS = frozenset({"yaml.dump", "yaml.safe_dump", "yaml.dump_all", "yaml.safe_dump_all"})
#: Modules whose ``open(name, mode)`` takes the mode second, as the builtin does.
MODE_SECOND = frozenset({"io", "os", "tarfile", "gzip", "bz2", "lzma", "codecs"})

#: (module, call) -> why that write is not a run's file (or is one that reaches ``platoon/runs`` as bytes).
ALLOWED = {
    ("platoon/live/inference/model.py", "torch.save"): "TinyPolicy.save(path), the tiny model's own file API (tests "
    "call it); a run's weights reach platoon/runs as bytes (live/training/trainer.py)",
    ("platoon/live/inference/hf.py", "save_pretrained"): "HFPolicy.save(path), the wrapped model's own file API, as "
    "TinyPolicy's",
    ("platoon/live/training/trainer.py", "torch.save"): "into a BytesIO: the state's bytes go to platoon/runs",
    ("platoon/live/agent/toolchain.py", "open"): "the toolchain cache on node scratch: its staging lock and a "
    "write probe, no run's file",
    ("platoon/live/agent/toolchain.py", "shutil.copytree"): "a toolchain staged into the node-local cache (renamed "
    "into place whole), no run's file",
    ("platoon/live/agent/toolchain.py", "os.rename"): "a staged toolchain copy renamed into the cache, an old one set "
    "aside, no run's file",
    ("platoon/live/workers/ray_pool.py", "open"): "a rollout actor's faulthandler log on its node's scratch, removed "
                                                  "when its rollout ends (the worker's, for an actor)",
    ("platoon/live/workers/worker.py", "open"): "a rollout worker's faulthandler log on node scratch, removed "
    "when the worker ends",
    ("platoon/live/workers/worker.py", "write_text"): "a rollout worker's ready file on node scratch",
    ("platoon/live/workers/worker.py", "os.replace"): "the ready file renamed into place on node scratch",
    ("platoon/live/inference/launch.py", "open"): "a launched vLLM server's log, handed to the server as its "
    "output (the server writes it, not platoon)",
    ("platoon/live/inference/weights.py", "shutil.copyfile"): "the checkpoint's config copied into a weight "
    "version's partial directory, renamed into place whole: weights for inference servers, no run state",
    ("platoon/live/inference/weights.py", "os.replace"): "a whole weight version's directory renamed into place "
    "for inference servers to load",
}


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _mode(call: ast.Call, position: int) -> ast.expr | None:
    """The mode argument of an ``open``-like call: ``mode=`` or the positional one at ``position``."""
    for kw in call.keywords:
        if kw.arg == "mode":
            return kw.value
    return call.args[position] if len(call.args) > position else None


def _writes(mode: ast.expr | None, *, unknown_writes: bool) -> bool:
    if mode is None:
        return False  # the default mode reads
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return any(c in mode.value for c in "wax+")
    return unknown_writes


def writing_call(call: ast.Call) -> str | None:
    """The name of what ``call`` writes with (``open``, ``savefig``, ``torch.save``), or None when it writes nothing
    this test can see."""
    func = call.func
    name = _dotted(func)
    if name in WRITING_CALLS:
        return name
    if name in STREAM_DUMPS:
        return name if len(call.args) > 1 or any(kw.arg == "stream" for kw in call.keywords) else None
    if isinstance(func, ast.Name) and func.id == "open":
        return "open" if _writes(_mode(call, 1), unknown_writes=True) else None
    if isinstance(func, ast.Attribute):
        owner = _dotted(func.value)
        if func.attr == "fdopen" or (func.attr == "open" and owner in MODE_SECOND):
            return "open" if _writes(_mode(call, 1), unknown_writes=True) else None
        if func.attr == "open":
            return "open" if _writes(_mode(call, 0), unknown_writes=False) else None
        if func.attr in WRITING_NAMES:
            return func.attr
    return None


def file_writes(source: str, relpath: str) -> list[tuple[int, str]]:
    """(line, call) of every write of one module outside ``platoon/runs`` (none inside it), in source order."""
    if relpath.startswith(WRITER):
        return []
    found = [(node.lineno, name) for node in ast.walk(ast.parse(source, filename=relpath))
             if isinstance(node, ast.Call) and (name := writing_call(node)) is not None]
    return sorted(found)


def package_writes(root: Path = PACKAGE) -> dict[tuple[str, str], list[int]]:
    """(module, call) -> the lines of every write of the package under ``root`` outside ``platoon/runs``."""
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted(root.rglob("*.py")):
        relpath = path.relative_to(root.parent).as_posix()
        for line, name in file_writes(path.read_text(encoding="utf-8"), relpath):
            found.setdefault((relpath, name), []).append(line)
    return found


def test_only_platoon_runs_writes_files():
    writes = package_writes()
    crossings = [f"{module}:{line}: {name}" for (module, name), lines in writes.items()
                 if (module, name) not in ALLOWED for line in lines]
    assert not crossings, ("files written outside platoon/runs (hand the bytes to platoon.runs, or allow the write "
                           "in tests/test_writers.py with its reason):\n" + "\n".join(crossings))


def test_every_allowance_still_matches_a_write():
    stale = sorted(set(ALLOWED) - set(package_writes()))
    assert not stale, f"allowed in tests/test_writers.py but written nowhere (drop them): {stale}"


PLANTED = [
    ("platoon/report.py", "def f(p, t):\n    p.write_text(t)\n", 2, "write_text"),
    ("platoon/report.py", "def f(fig, out):\n    fig.savefig(out / 'a.png', dpi=100)\n", 2, "savefig"),
    ("platoon/cli.py", "def f(out):\n    (out / 'sweep.md').write_text('x', encoding='utf-8')\n", 2, "write_text"),
    ("platoon/cli.py", "def f(df, out):\n    df.to_parquet(out, index=False)\n", 2, "to_parquet"),
    ("platoon/tasks.py", "def f(df, out):\n    df.to_csv(out)\n", 2, "to_csv"),
    ("platoon/sim/x.py", "def f(p):\n    with open(p, 'w') as f:\n        f.write('x')\n", 2, "open"),
    ("platoon/sim/x.py", "def f(p):\n    open(p, mode='ab').close()\n", 2, "open"),
    ("platoon/sim/x.py", "def f(p, m):\n    open(p, m).close()\n", 2, "open"),  # a mode it cannot tell
    ("platoon/sim/x.py", "def f(p):\n    return p.open('w')\n", 2, "open"),
    ("platoon/sim/x.py", "import io\ndef f(p):\n    return io.open(p, 'x')\n", 3, "open"),
    ("platoon/sim/x.py", "import tarfile\ndef f(b, p):\n    tarfile.open(fileobj=b).extractall(p)\n", 3,
     "extractall"),
    ("platoon/live/x.py", "import torch\ndef f(x, p):\n    torch.save(x, p)\n", 3, "torch.save"),
    ("platoon/live/x.py", "import shutil\ndef f(a, b):\n    shutil.copy(a, b)\n", 3, "shutil.copy"),
    ("platoon/analysis.py", "import os\ndef f(a, b):\n    os.replace(a, b)\n", 3, "os.replace"),
    ("platoon/config/x.py", "import json\ndef f(x, fp):\n    json.dump(x, fp)\n", 3, "json.dump"),
    ("platoon/config/x.py", "import yaml\ndef f(x, fp):\n    yaml.safe_dump(x, stream=fp)\n", 3, "yaml.safe_dump"),
]


@pytest.mark.parametrize(("relpath", "source", "line", "call"), PLANTED)
def test_the_scan_catches_a_planted_write(relpath, source, line, call):
    assert file_writes(source, relpath)[:1] == [(line, call)]


NOT_WRITES = [
    ("platoon/report.py", "def f(p):\n    return open(p).read() + open(p, 'rb').read().decode()\n"),
    ("platoon/report.py", "def f(p):\n    return p.read_text() + p.open().read() + p.open('r').read()\n"),
    ("platoon/live/x.py", "async def f(pool, sock):\n    pool.open()\n    await Channel.open(sock)\n"),
    ("platoon/sim/x.py", "import tarfile\ndef f(b):\n    return tarfile.open(fileobj=b, mode='r:gz')\n"),
    ("platoon/config/x.py", "import yaml\ndef f(x):\n    return yaml.safe_dump(x, sort_keys=False) + str(x).replace('a', 'b')\n"),
    ("platoon/runs/x.py", "import os\ndef f(p, fig, t):\n    p.write_text(t)\n    fig.savefig(p)\n"
     "    open(p, 'wb').close()\n    os.replace(p, p)\n"),  # platoon/runs is the writer
]


@pytest.mark.parametrize(("relpath", "source"), NOT_WRITES)
def test_the_scan_passes_reads_and_the_writer(relpath, source):
    assert file_writes(source, relpath) == []


def test_package_writes_walks_every_module(tmp_path):
    root = tmp_path / "platoon"
    (root / "live" / "workers").mkdir(parents=True)
    (root / "runs").mkdir()
    (root / "live" / "workers" / "deep.py").write_text("def f(p):\n    x = 1\n    p.write_bytes(b'')\n")
    (root / "runs" / "w.py").write_text("def f(p):\n    p.write_bytes(b'')\n")
    assert package_writes(root) == {("platoon/live/workers/deep.py", "write_bytes"): [3]}
