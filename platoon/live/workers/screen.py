"""Fork-safety screening: which of the fork server's candidate imports and builds leave it safe to fork.

A candidate is a module to import (``{"kind": "module", "name": ...}``) or an environment to build with its splits'
task lists (``{"kind": "build", "name": ..., "spec": EnvSpec.to_json(), "needs": [modules]}``). ``screen`` checks
them in a throwaway interpreter (``python -m platoon.live.workers.screen``, on the trainer's ``sys.path``) that
imports the worker's stack once and
then forks one throwaway child per candidate; each child takes its state, applies its candidate (a build's
``needs`` first, unmeasured), waits ``THREAD_GRACE_S`` and compares. A candidate is fork-safe when it left:

- no new thread (the OS's count in ``/proc/self/task``; ``jemalloc_bg_thd``, which jemalloc re-creates after a fork,
  is allowed);
- no new open file descriptor: file, socket, pipe or event loop (an epoll or eventfd); a read-only descriptor of the
  interpreter or of a shared object is allowed;
- no child process;
- no seed drawn from the OS for a numpy generator (calls of ``secrets.randbits``, through which numpy seeds,
  counted; numpy's own global generator, which each worker reseeds, is seeded with the stack, by ``_stack``).

Each of these processes ends with the one that started it (``platoon.lifeline``: the trainer's screening
thread waits in ``subprocess.run`` for the interpreter, which forks its children from its one thread).

``screen`` returns, for each candidate, what it left (empty: safe) and how many modules it imported. A candidate that
fails to import or build is not safe either ("failed: ..."), nor, when the screening interpreter itself fails, any.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from platoon.lifeline import die_with_parent

__all__ = ["THREAD_GRACE_S", "WORKER_STACK", "screen"]

WORKER_STACK = (
    "platoon.live.rollouts.workflow", "platoon.live.envs", "platoon.live.rollouts.evaluate", "platoon.live.workers.worker",
)
"""The modules every rollout worker runs on (evaluation's: its episodes), which the fork server imports first."""

THREAD_GRACE_S = 0.5
"""How long after a candidate a child waits before counting threads (a thread may start a moment after)."""

ALLOWED_THREADS = frozenset({"jemalloc_bg_thd"})

_SEEDS = 0
_VERDICTS: dict[str, dict[str, dict[str, Any]]] = {}  # this process's screenings, by their candidates


def screen(candidates: Sequence[Mapping[str, Any]], *, timeout_s: float = 300.0) -> dict[str, dict[str, Any]]:
    """Each candidate's verdict by name: ``{"left": [what it left behind, ...], "modules": n}``. The same candidates
    are screened once a process (an import's effects do not change while it runs)."""
    if not candidates:
        return {}
    key = json.dumps(list(candidates), sort_keys=True)
    if key not in _VERDICTS:
        _VERDICTS[key] = _screen(candidates, timeout_s)
    return _VERDICTS[key]


def _screen(candidates: Sequence[Mapping[str, Any]], timeout_s: float) -> dict[str, dict[str, Any]]:
    try:
        done = subprocess.run([sys.executable, "-m", "platoon.live.workers.screen", str(os.getpid())],
                              input=json.dumps({"sys_path": sys.path, "candidates": list(candidates)}),
                              capture_output=True, text=True, timeout=timeout_s, env=os.environ.copy())
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else
                               f"exit code {done.returncode}")
        return json.loads(done.stdout)
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
        return {c["name"]: {"left": [f"could not be screened ({exc})"], "modules": 0} for c in candidates}


# ------------------------------------------------------------------------------------------------- the screening
def _main() -> None:
    given = json.loads(sys.stdin.read())
    sys.path[:] = given["sys_path"]  # the trainer's, as the fork server gets it
    candidates = given["candidates"]
    _count_seeds()
    for module in (*WORKER_STACK, "platoon.live.workers._stack"):  # as the fork server imports them
        importlib.import_module(module)
    _count_seeds()  # numpy, imported with the stack, binds its entropy source at import
    children = []
    for c in candidates:
        read, write = os.pipe()
        screening = os.getpid()
        pid = os.fork()
        if pid == 0:
            die_with_parent(screening)
            os.close(read)
            try:
                verdict = _check(c)
            except BaseException as exc:  # noqa: BLE001 - whatever it raised, the candidate is not kept
                verdict = {"left": [f"failed: {type(exc).__name__}: {exc}"], "modules": 0}
            os.write(write, json.dumps(verdict).encode())
            os._exit(0)
        os.close(write)
        children.append((c["name"], pid, read))
    verdicts = {}
    for name, pid, read in children:
        with os.fdopen(read, "rb") as f:
            data = f.read()
        os.waitpid(pid, 0)
        verdicts[name] = json.loads(data) if data else {"left": ["failed: its check ended without a verdict"],
                                                         "modules": 0}
    sys.stdout.write(json.dumps(verdicts))


def _check(c: Mapping[str, Any]) -> dict[str, Any]:
    if c["kind"] == "build":
        from platoon.live.workers.envs import EnvSpec

        for module in c.get("needs", ()):
            importlib.import_module(module)
        spec = c["spec"]
        spec = EnvSpec(spec["env"], spec.get("options") or {}, spec.get("package"), tuple(spec.get("splits") or ()))
        before, modules = _state(), len(sys.modules)
        env = spec.build()
        for split in spec.splits:
            env.task_ids(split)
    else:
        before, modules = _state(), len(sys.modules)
        importlib.import_module(c["name"])
    time.sleep(THREAD_GRACE_S)
    return {"left": _left(before, _state()), "modules": len(sys.modules) - modules}


def _state() -> dict[str, Any]:
    threads = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                threads += f.read().strip() not in ALLOWED_THREADS
        except OSError:
            pass
    return {"threads": threads, "fds": _fds(), "children": _children(), "seeds": _SEEDS}


def _fds() -> dict[int, str]:
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
            with open(f"/proc/self/fdinfo/{name}") as f:
                flags = next(int(line.split()[1], 8) for line in f if line.startswith("flags:"))
        except (OSError, StopIteration):
            continue  # the descriptor listdir itself opened, closed by now
        if flags & os.O_ACCMODE == os.O_RDONLY and (".so" in os.path.basename(target)
                                                    or target == os.path.realpath(sys.executable)):
            continue
        out[int(name)] = target
    return out


def _children() -> set[int]:
    pids: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.update(int(p) for p in f.read().split())
        except OSError:
            pass
    return pids


def _left(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    left = []
    if after["threads"] > before["threads"]:
        left.append(f"started {after['threads'] - before['threads']} thread(s)")
    opened = [t for fd, t in after["fds"].items() if before["fds"].get(fd) != t]
    for kind, label in (("socket:", "socket"), ("pipe:", "pipe"), ("anon_inode:[eventpoll]", "event loop (epoll)"),
                        ("anon_inode:[eventfd]", "eventfd")):
        n = sum(t.startswith(kind) for t in opened)
        if n:
            left.append(f"left {n} {label}(s) open")
    files = [t for t in opened if not t.startswith(("socket:", "pipe:", "anon_inode:"))]
    if files:
        left.append(f"left {len(files)} file(s) open ({', '.join(files[:3])})")
    others = [t for t in opened if t.startswith("anon_inode:") and t not in ("anon_inode:[eventpoll]",
                                                                              "anon_inode:[eventfd]")]
    if others:
        left.append(f"left {', '.join(others[:3])} open")
    started = after["children"] - before["children"]
    if started:
        left.append(f"started {len(started)} child process(es)")
    if after["seeds"] > before["seeds"]:
        left.append("seeded a numpy generator from the OS")
    return left


def _count_seeds() -> None:
    """Count the OS seeds drawn for numpy generators, through ``secrets.randbits`` (and numpy's binding of it)."""
    import secrets

    def counting(k: int, _randbits=secrets.randbits) -> int:
        global _SEEDS
        _SEEDS += 1
        return _randbits(k)

    if not getattr(secrets.randbits, "_platoon_counting", False):
        counting._platoon_counting = True  # type: ignore[attr-defined]
        secrets.randbits = counting
    bit_generator = sys.modules.get("numpy.random.bit_generator")
    if bit_generator is not None and not getattr(getattr(bit_generator, "randbits", None), "_platoon_counting", False):
        bit_generator.randbits = secrets.randbits


if __name__ == "__main__":
    die_with_parent(int(sys.argv[1]) if len(sys.argv) > 1 else None)  # the trainer's pid, which started it
    _main()
