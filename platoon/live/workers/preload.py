"""The rollout workers' fork server: what it imports before it forks them, kept only when it leaves it fork-safe.

Under ``rollout_isolation: process`` with ``worker_start_method: forkserver`` (the default) and without
``worker_python_env_isolation``, ``open_fork_server`` starts the standard library's fork server
(``multiprocessing``'s ``forkserver`` context, ``set_forkserver_preload``) as soon as the model service is up, in a
thread of its own, so that it imports while the run opens and saves at launch; the first rollout waits for it. What
it imports, once, before it forks any worker (``preload_plan``):

- the worker's stack (``screen.WORKER_STACK``: the workflow, the environments' protocol, evaluation, the worker);
- each entry's ``package`` (what it registers) and its environment's module (the registry lookup's);
- ``train.workflow_config.worker_preload`` (modules an environment imports only as it opens);
- builds: each entry's environment, built from its spec, with the task lists of the run's splits (``envs.run_plan``),
  so that a worker finds it built; and the trainer's main script, when it is one, run as ``__mp_main__`` as each
  worker would run it again otherwise.

Every candidate beyond the stack is screened (``platoon.live.workers.screen``), while the server imports them all
(the two at once, since screening rarely leaves anything out); one that starts a thread or a process, leaves a file,
socket, pipe or event loop open, or seeds a numpy generator from the OS is left out with a warning that says which and
why, the server is killed and started again without it before it forks any worker, and the workers import (or build)
it themselves; a build whose modules were left out is left out too. An environment variable a preloaded import sets is set in every worker, which the fork server forks
with its own environment. The fork server's first log line counts what it imported for the environments:
``rollout worker fork server <pid> imported the worker's stack and N module(s) the environments open with in X.Xs``.

Nothing it imports may start the CUDA driver (a forked worker could not use the driver state it would inherit): a
server whose imports or builds did (torch's CUDA initialised) refuses to serve, is stopped, and the first rollout
raises ``ForkServerRefused``.

Under ``exec`` nothing is imported ahead; under ``worker_python_env_isolation`` the fork server imports nothing.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing import spawn
from typing import Any

from platoon.live.workers.envs import PLAN_VARIABLE, EnvSpec
from platoon.live.workers.screen import WORKER_STACK, screen

__all__ = ["ForkServerRefused", "PreloadPlan", "open_fork_server", "preload_plan"]

Logger = Callable[[str, str], None]

_LOCK = threading.Lock()


class ForkServerRefused(RuntimeError):
    """The fork server will not fork workers: its imports started the CUDA driver."""


@dataclass(frozen=True)
class PreloadPlan:
    """What the fork server imports beyond the worker's stack: modules, then builds (by entry), each with the
    modules it needs."""

    modules: tuple[str, ...] = ()
    builds: Mapping[str, EnvSpec] | None = None
    needs: Mapping[str, tuple[str, ...]] | None = None

    def candidates(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"kind": "module", "name": m} for m in self.modules]
        for label, spec in (self.builds or {}).items():
            out.append({"kind": "build", "name": f"environment {label}", "spec": spec.to_json(),
                        "needs": list((self.needs or {}).get(label, ()))})
        return out


def preload_plan(specs: Mapping[str, EnvSpec], envs: Mapping[str, Any], extra: Sequence[str] = ()) -> PreloadPlan:
    """The plan for entries ``specs`` whose built environments are ``envs`` (their classes' modules are what the
    registry lookups import) and ``worker_preload``'s modules ``extra``."""
    modules: list[str] = []
    needs: dict[str, tuple[str, ...]] = {}
    for label, spec in specs.items():
        own = [m for m in (spec.package, type(envs[label]).__module__ if label in envs else None,
                           spec.env.partition(":")[0] if ":" in spec.env else None) if m]
        needs[label] = tuple(dict.fromkeys(own))
        modules += [m for m in own if m not in modules and m not in WORKER_STACK]
    modules += [m for m in extra if m not in modules]
    return PreloadPlan(tuple(modules), dict(specs), needs)


def open_fork_server(plan: PreloadPlan | None, log: Logger) -> Future:
    """Start the fork server in a thread: screen ``plan`` (None: import nothing ahead), warn of what it leaves out,
    start the server, wait for its imports and log its first line. The future is done (the server's pid) once
    workers can be forked from it."""
    future: Future = Future()

    def opening() -> None:
        try:
            future.set_result(_open(plan, log))
        except BaseException as exc:  # noqa: BLE001 - the first rollout raises it
            future.set_exception(exc)

    threading.Thread(target=opening, name="platoon-fork-server", daemon=True).start()
    return future


def _open(plan: PreloadPlan | None, log: Logger) -> int:
    began = time.perf_counter()
    ctx = multiprocessing.get_context("forkserver")
    left_out: list[str] = []
    if plan is None:
        _serve([], [])
    else:
        # Optimistic: the server imports everything while the candidates are screened, the two at once; when
        # screening leaves something out, the server is killed and started again without it before it forks anyone.
        _serve(_preload(plan.modules), [c["spec"] for c in plan.candidates() if c["kind"] == "build"])
        kept_modules, builds, left_out = _screened(plan)
        if left_out:
            _serve(_preload(kept_modules), builds, restart=True)
    pid, modules, cuda = _warm_up(ctx)
    if cuda:
        _stop()
        raise ForkServerRefused(
            f"the rollout workers' fork server {pid} refuses to serve: what it imported or built ahead started the "
            "CUDA driver (torch.cuda is initialised), whose state a forked worker cannot use. Keep CUDA out of the "
            "environments' modules and train.workflow_config.worker_preload at import, or set "
            "worker_start_method: exec")
    what = "nothing" if plan is None else "the worker's stack" + (
        f" and {modules} module(s) the environments open with" if modules else "")
    log("info", f"rollout worker fork server {pid} imported {what} in {time.perf_counter() - began:.1f}s")
    for warning in left_out:  # after its first line, which says what it did import
        log("warning", warning)
    return pid


def _preload(modules: Sequence[str]) -> list[str]:
    """The fork server's preload list: the script and ``sys.path`` (``_main``), the worker's stack, the count of its
    modules (``_stack``), ``modules``, then the builds (``_plan``)."""
    return ["platoon.live.workers._main", *WORKER_STACK, "platoon.live.workers._stack", *modules,
            "platoon.live.workers._plan"]


def _serve(preload: list[str], builds: list[dict[str, Any]], *, restart: bool = False) -> None:
    """Have the standard library's fork server running with ``preload`` and ``builds``: the one running already
    when it has the same preload (one per process), else a new one (``restart``: always, the old one killed, as its
    imports may have left threads that would keep it from ending)."""
    ctx = multiprocessing.get_context("forkserver")
    server = multiprocessing.forkserver._forkserver
    with _LOCK:
        if server._forkserver_pid is not None and (restart or server._preload_modules != preload):
            if restart:
                os.kill(server._forkserver_pid, signal.SIGKILL)
            server._stop()
        ctx.set_forkserver_preload(preload)
        main_path = spawn.get_preparation_data("ignore").get("init_main_from_path")
        os.environ[PLAN_VARIABLE] = json.dumps({"builds": builds, "main_path": main_path, "sys_path": sys.path})
        try:
            server.ensure_running()
        finally:
            os.environ.pop(PLAN_VARIABLE, None)


def _stop() -> None:
    """Kill the running fork server (what it started may keep it from ending when asked) and forget it."""
    with _LOCK:
        server = multiprocessing.forkserver._forkserver
        if server._forkserver_pid is not None:
            os.kill(server._forkserver_pid, signal.SIGKILL)
            server._stop()


def _screened(plan: PreloadPlan) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """The plan's modules and builds that screening keeps, and a warning for each it leaves out."""
    candidates = plan.candidates()
    verdicts = screen(candidates)
    left_out = {c["name"] for c in candidates if verdicts.get(c["name"], {"left": ["no verdict"]})["left"]}
    warnings = []
    for c in candidates:
        if c["name"] in left_out:
            what, doing, does = ((f"module {c['name']}", "importing", "imports") if c["kind"] == "module"
                                 else (c["name"], "building", "builds"))
            why = "; ".join(verdicts.get(c["name"], {}).get("left", ["no verdict"]))
            warnings.append(f"the rollout workers' fork server leaves out {what}: {doing} it {why}, which is not "
                            f"fork-safe; each worker {does} it itself")
    modules = [m for m in plan.modules if m not in left_out]
    builds = []
    for c in candidates:
        if c["kind"] != "build" or c["name"] in left_out:
            continue
        blocked = [m for m in c["needs"] if m in left_out]
        if blocked:
            warnings.append(f"the rollout workers' fork server leaves out {c['name']}: it needs "
                            f"{', '.join(blocked)}, left out; each worker builds it itself")
            continue
        builds.append(c["spec"])
    return modules, builds, warnings


def _warm_up(ctx: Any) -> tuple[int, int, bool]:
    """Fork one worker that only reports (the server's pid, the modules beyond the stack, whether the server started
    the CUDA driver): it returns once the server has imported everything."""
    from platoon.live.workers.worker import report

    ours, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=report, args=(theirs,), daemon=True, name="platoon-fork-server-warm-up")
    proc.start()
    theirs.close()
    try:
        pid, modules, cuda = ours.recv()
    finally:
        ours.close()
        proc.join()
    return int(pid), int(modules), bool(cuda)
