"""The trainer's side of rollout workers (``train.workflow_config.rollout_isolation: process``).

``WorkerPool.run(workflow, row)`` is what ``GroupRolloutWorkflow`` awaits instead of ``arun_episode_single(row)``
when its rollouts run in workers: it starts a worker process for the rollout (``platoon.live.workers.worker``), makes
the worker's service calls on the workflow's real service (so they are batched with every other rollout's), and
returns the worker's ``Rollout`` or raises its exception. Everything around it stays in the trainer and is unchanged:
the member's lease block, permit, start slot and straggler deadline. ``run_job(episode, envs, service)`` runs any
other picklable rollout (a ``worker.Episode``) the same way: evaluation's held-out episodes during training
(``platoon.live.rollouts.evaluate.EvalEpisode``), whose start slots and routing ids their caller keeps. Rules it keeps:

- **first call**: the worker's first model call is the member's ``first_model_call()`` here (its start slot comes back,
  a traced rollout gets its ``startup`` span; ``run_job``'s ``first_call``); each call is a ``model_call`` span of a traced rollout, and each step
  the worker times an ``env_step`` span;
- **cancellation** (a straggler cut, a failing group, a stop; a failing evaluation) of the member cancels the worker's rollout: it is sent
  ``cancel`` and given ``worker_termination_grace_seconds`` to unwind, then killed (``SIGKILL``); the member's
  ``CancelledError`` propagates once the worker is gone and its readiness and diagnostics files are removed;
- **teardowns**: a worker whose rollout left background teardowns running holds the member's permit through one
  background teardown here, which ends when they have (``background_teardown``: at most the permit's teardown wait);
- **failure**: the rollout's exception is raised here; a worker that ends without an answer (killed, crashed) raises
  ``WorkerDied`` with its exit code and the tail of its diagnostics file (a crash's traceback);
- ``aclose()`` (the runtime's shutdown) ends every worker still alive.

Workers start through ``multiprocessing``: ``forkserver`` (forked from the fork server of
``platoon.live.workers.preload``, which imported the worker's stack and what the environments open with) or ``exec``
(a fresh interpreter each, which imports everything itself). Scratch files live in ``node_scratch()``.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from platoon.live.inference.direct import Posts
from platoon.live.launch.errors import TrainError
from platoon.live.rollouts import rollout_trace
from platoon.live.rollouts.lease import background_teardown, first_model_call
from platoon.live.workers import worker
from platoon.live.workers.channel import Channel, portable
from platoon.live.workers.envs import EnvSpec
from platoon.live.workers.gate import LaunchGate
from platoon.live.workers.preload import PreloadPlan, open_fork_server

__all__ = ["WorkerDied", "WorkerPool", "node_scratch"]

Logger = Callable[[str, str], None]

_NOT_SENT = ("envs", "service", "warn", "inform", "rollout_workers", "routing")
"""A workflow's attributes a worker gets its own of (the rest travel pickled)."""

KILL_WAIT_S = 5.0
"""How long a killed worker is waited for (``SIGKILL`` cannot be refused; this bounds a wedged kernel)."""


class WorkerDied(TrainError):
    """A rollout worker (or Ray actor) ended without returning its rollout, or none could be had: a training
    rollout's group fails with it; raised out of an evaluation, it ends the run (exit 1, resumable)."""


def node_scratch() -> Path:
    """The rollout workers' scratch directory on this node: ``platoon-workers-<uid>`` under the first set of
    ``PLATOON_NODE_SCRATCH``, ``PBS_LOCALDIR``, ``SLURM_TMPDIR``, ``TMPDIR``, else ``/tmp``."""
    for name in ("PLATOON_NODE_SCRATCH", "PBS_LOCALDIR", "SLURM_TMPDIR", "TMPDIR"):
        root = os.environ.get(name)
        if root:
            break
    else:
        root = "/tmp"
    return Path(root) / f"platoon-workers-{os.getuid()}"


class WorkerPool:
    """Runs rollouts in worker processes (see the module docstring).

    ``method``: ``forkserver`` or ``exec``; ``plan``: what the fork server imports beyond the worker's stack
    (``platoon.live.workers.preload``; None: nothing at all, as under ``worker_python_env_isolation``); ``env_specs``: the
    entries' environments as the config names them (a worker builds them, or finds them in its fork server); an
    environment without a spec travels pickled. ``grace_s``: how long a cancelled worker may take to unwind;
    ``parent_grace_s``: how long a worker may outlive this process (``platoon.lifeline``); ``gate``:
    the ``LaunchGate``'s keywords (its floor, soft limit, groups at once, wait limit, permits, memory readers).
    ``audit_opens``: workers count the files they open (``opens``, for benchmarks).
    """

    isolation = "process"
    """The ``rollout_isolation`` this pool carries out (said in its errors)."""

    def __init__(self, *, method: str = "forkserver", plan: PreloadPlan | None = None,
                 env_specs: Mapping[str, EnvSpec] | None = None, grace_s: float = 10.0,
                 scratch: Path | None = None, audit_opens: bool = False, parent_grace_s: float = 60.0,
                 gate: Mapping[str, Any] | None = None) -> None:
        if method not in ("forkserver", "exec"):
            raise ValueError(f"method must be 'forkserver' or 'exec', got {method!r}")
        self.method = method
        self._ctx = multiprocessing.get_context("forkserver" if method == "forkserver" else "spawn")
        self.plan = plan
        self.env_specs = dict(env_specs or {})
        self.grace_s = float(grace_s)
        self.parent_grace_s = float(parent_grace_s)
        self.scratch = scratch or node_scratch()
        self.audit_opens = audit_opens
        self.messages: list[tuple[str, str]] = []  # everything logged, (level, message)
        self._log: Logger | None = None
        self._log_lock = threading.Lock()
        self._opening: Future | None = None
        self._starter = ThreadPoolExecutor(max_workers=4, thread_name_prefix="platoon-worker-start")
        self._names = itertools.count()
        self._pickled: dict[int, tuple[Any, bytes]] = {}
        self._alive: set[_Worker] = set()
        self.gate = LaunchGate(alive=self._pids, method=method, log=self.log, **dict(gate or {}))
        self._budget_checked = False
        self._reaping: set[asyncio.Task] = set()
        self.startup_s: list[float] = []  # each worker's seconds from its start to its first model call
        self.opens: list[int] = []  # with audit_opens: the files each worker opened

    def open(self) -> None:
        """Start the fork server (``forkserver``; in a thread, see ``platoon.live.workers.preload``); under ``exec``
        there is nothing to start. The first rollout waits until it has. The permits' budget is checked once, here,
        at the workers' estimated size (``LaunchGate.check_budget``)."""
        if not self._budget_checked:
            self._budget_checked = True
            self.gate.check_budget()
        if self.method == "forkserver" and self._opening is None:
            self._opening = open_fork_server(self.plan, self.log)

    async def ready(self) -> None:
        """Return once workers can start (re-raising what failed the fork server's start)."""
        self.open()
        if self._opening is not None:
            await asyncio.wrap_future(self._opening)

    def log(self, level: str, message: str) -> None:
        """Log to the run's logger once one is attached (``attach_log``), else keep it for that logger."""
        with self._log_lock:
            self.messages.append((level, message))
            target = self._log
        if target is not None:
            target(level, message)

    def attach_log(self, log: Logger) -> None:
        """Log to ``log`` from now on, after what was logged before."""
        with self._log_lock:
            self._log = log
            earlier = list(self.messages)
        for level, message in earlier:
            log(level, message)

    # ------------------------------------------------------------------------------------------------ a rollout
    async def run(self, workflow: Any, row: Any) -> Any:
        """Run ``workflow.arun_episode_single(row)`` in a worker; its ``Rollout`` (or its exception)."""
        from platoon.live.rollouts.workflow import _FirstCall

        episode = worker.WorkflowEpisode(self._pickle(workflow, lambda: (type(workflow), _state(workflow))),
                                         pickle.dumps(row))
        service = _FirstCall(workflow.service, on_first_call=lambda: None)  # the worker signals its own first call
        rollout = await self.run_job(episode, workflow.envs, service, warn=workflow.warn, group=row.key)
        # routing ids are counted here, where every call of the rollout is served (the worker's watch is mute)
        workflow.say(workflow.routing.rollout_ended(f"rollout {row.member} of task {row.task_id} (group {row.key})",
                                                    calls=service.calls, present=service.routed))
        return rollout

    async def run_job(self, episode: worker.Episode, envs: Mapping[str, Any], service: Any, *,
                      warn: Callable[[str], None], first_call: Callable[[], None] = first_model_call,
                      group: Any = "eval") -> Any:
        """Run ``episode`` in a worker, playing ``envs`` (by entry: an entry of ``env_specs`` is built from its spec,
        or found in the fork server; any other travels pickled); its value (or its exception). The worker's service
        calls are made on ``service`` (a caller that counts calls or routing ids wraps it), its first model call
        calls ``first_call``, its warnings go to ``warn``. Cancelled, the worker is cancelled, then killed after
        ``grace_s``, before this raises; its background teardowns hold the caller's lease block, if any. The launch
        goes through the gate first, as one of ``group``'s (evaluation's episodes: one group)."""
        await self.ready()
        job, files = self._job(episode, envs, service)
        launch = await self.gate.admit(group)
        try:
            w = await self._start(job, files)
        except BaseException:
            launch.done()
            raise
        w.launch = launch
        try:
            result, teardowns = await self._serve(w, service, warn, first_call)
        except BaseException:
            await _unwound(w.stop(self.grace_s))
            self._gone(w)
            raise
        if teardowns:
            background_teardown(self._finish(w, teardown=True))
        else:
            self._reap(self._finish(w, teardown=False))
        return result

    def pickled(self, obj: Any) -> bytes:
        """``obj`` pickled, once for as long as it lives (a renderer every evaluation episode sends its worker)."""
        return self._pickle(obj, lambda: obj)

    def _job(self, episode: worker.Episode, envs: Mapping[str, Any], service: Any) -> tuple[bytes, tuple[Path, Path]]:
        name = f"{os.getpid()}-{next(self._names)}"
        self.scratch.mkdir(parents=True, exist_ok=True)
        attrs = {name: value for name in ("version", "direct_target")
                 if (value := getattr(service, name, None)) is not None}
        files = (self.scratch / f"rollout-{name}.ready", self.scratch / f"rollout-{name}.diagnostics")
        job = worker.Job(
            episode=episode,
            envs={label: self.env_specs.get(label) or self.pickled(env) for label, env in envs.items()},
            service_attrs={"direct" if name == "direct_target" else name: v for name, v in attrs.items()},
            ready_file=str(files[0]), diagnostics_file=str(files[1]), audit_opens=self.audit_opens,
            traced=rollout_trace.current() is not None)
        try:
            return pickle.dumps(job), files
        except Exception as exc:  # noqa: BLE001 - whatever pickle refuses, said in the rollout's terms
            raise TypeError(f"{type(episode).__name__} does not pickle, so it cannot reach a rollout worker "
                            f"(rollout_isolation: {self.isolation}): {exc}") from exc

    def _pickle(self, obj: Any, value: Callable[[], Any]) -> bytes:
        cached = self._pickled.get(id(obj))
        if cached is None or cached[0] is not obj:
            try:
                cached = self._pickled[id(obj)] = (obj, pickle.dumps(value()))
            except Exception as exc:  # noqa: BLE001 - whatever pickle refuses, said once, in the rollout's terms
                raise TypeError(f"{type(obj).__name__} does not pickle, so it cannot reach a rollout worker "
                                f"(rollout_isolation: {self.isolation}): {exc}") from exc
        return cached[1]

    async def _start(self, job: bytes, files: tuple[Path, Path]) -> _Worker:
        ours, theirs = socket.socketpair()
        started = time.perf_counter()
        start = asyncio.get_running_loop().run_in_executor(self._starter, self._spawn, theirs, job)
        try:
            proc = await asyncio.shield(start)
        except BaseException:
            try:
                proc = await _unwound(start)
            finally:
                theirs.close()
                ours.close()
            await _unwound(_Worker(proc, None, files, started).stop(0.0))
            raise
        theirs.close()
        return await self._connected(_Worker(proc, None, files, started), ours)

    async def _connected(self, w: _Worker, sock: socket.socket) -> _Worker:
        """``w``, alive, with its connection over ``sock``. It counts alive before the connection's await, so that a
        cancel there still ends it (and removes its files, frees its actor)."""
        self._alive.add(w)
        try:
            w.chan = await Channel.open(sock)
        except BaseException:
            sock.close()
            await _unwound(w.stop(0.0))
            self._gone(w)
            raise
        return w

    def _spawn(self, theirs: socket.socket, job: bytes) -> Any:
        """Start a worker (in a start thread, which lives as long as the pool: the kernel's parent-death signal is
        tied to the thread that created the process); the process. Its parent, for the worker's check that it
        still has one: the fork server (started now if it is not running) or this process."""
        parent = os.getpid()
        if self.method == "forkserver":
            server = multiprocessing.forkserver._forkserver
            server.ensure_running()
            parent = server._forkserver_pid
        proc = self._ctx.Process(target=worker.main, args=(theirs, job, parent, os.getpid(), self.parent_grace_s),
                                 daemon=True, name="platoon-rollout")
        proc.start()
        return proc

    async def _serve(self, w: _Worker, service: Any, warn: Callable[[str], None],
                     first_call: Callable[[], None]) -> tuple[Any, int]:
        calls: dict[int, asyncio.Task] = {}
        assert w.chan is not None
        posts = Posts(w.chan.send)  # a direct call's tries, which the worker makes (platoon.live.inference.direct)
        try:
            while True:
                message = await w.chan.recv()
                if message is None:
                    raise await w.died()
                kind = message[0]
                if kind == "ready":
                    if w.launch is not None:
                        w.launch.done(w.proc.pid)
                elif kind == "call":
                    _, i, name, args, kwargs = message
                    w.first_call(self.startup_s)
                    if name == "sample_placed":
                        kwargs = {**kwargs, "post": posts.poster(i)}
                    calls[i] = asyncio.ensure_future(_answer(w.chan, i, service, name, args, kwargs))
                elif kind == "drop":
                    task = calls.pop(message[1], None)
                    if task is not None:
                        task.cancel()
                elif kind == "posted":
                    posts.answered(*message[1:])
                elif kind == "first_call":
                    w.first_call(self.startup_s)
                    first_call()
                elif kind == "warn":
                    warn(message[1])
                elif kind == "env_step":
                    trace = rollout_trace.current()
                    if trace is not None:  # the worker's monotonic clock, read on the run's
                        offset = trace.clock() - time.monotonic()
                        trace.env_step(message[1] + offset, message[2] + offset)
                elif kind == "opens":
                    self.opens.append(message[1])
                elif kind == "result":
                    return message[1], message[2]
                elif kind == "error":
                    raise message[1]
        finally:
            for task in calls.values():
                task.cancel()

    async def _finish(self, w: _Worker, *, teardown: bool) -> None:
        """Wait for a worker that returned its rollout: for its teardowns to end, when it left some, then for it to
        end (``grace_s`` at most; then it is killed); its files are removed."""
        try:
            if teardown and w.chan is not None:
                while (message := await w.chan.recv()) is not None and message[0] != "teardowns_done":
                    pass
            if not await w.exited(self.grace_s):
                await w.stop(0.0)
        finally:
            w.kill()  # cancelled meanwhile (its teardown wait ran out, a stop): a worker left alive would linger
            w.remove_files()
            self._gone(w)

    def _gone(self, w: _Worker) -> None:
        """``w`` has ended (or is ending): out of the live set, its launch (if still open) given back."""
        self._alive.discard(w)
        if w.launch is not None:
            w.launch.done()
        self.gate.changed()

    def _pids(self) -> list[int]:
        return [w.proc.pid for w in self._alive if w.proc.pid is not None and w.proc.exitcode is None]

    def _reap(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._reaping.add(task)
        task.add_done_callback(self._reaping.discard)

    # ------------------------------------------------------------------------------------------------- closing
    async def aclose(self) -> None:
        """End every worker still alive (killed at once) and wait for the ones ending."""
        for w in list(self._alive):
            await _unwound(w.stop(0.0))
        self._alive.clear()
        if self._reaping:
            await asyncio.gather(*self._reaping, return_exceptions=True)
        self.close()

    def close(self) -> None:
        """Kill any worker left (from any thread, without a loop) and stop starting new ones."""
        for w in list(self._alive):
            w.kill()
            w.remove_files()
        self._alive.clear()
        self._starter.shutdown(wait=False)


class _Worker:
    """One started worker: its process, its connection, its files."""

    def __init__(self, proc: Any, chan: Channel | None, files: tuple[Path, Path], started: float) -> None:
        self.proc, self.chan, self.files = proc, chan, files
        self.started = started
        self.launch: Any = None  # its LaunchGate admission, until it is ready
        self._first_call = False
        self._ended: asyncio.Future | None = None

    def first_call(self, record: list[float]) -> None:
        if not self._first_call:
            self._first_call = True
            record.append(time.perf_counter() - self.started)

    async def exited(self, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` for the process to end (reaping it); whether it has."""
        if self.proc.pid is None:  # never started
            return True
        if self.proc.exitcode is None:
            try:
                await asyncio.wait_for(asyncio.shield(self._exit()), timeout_s)
            except TimeoutError:
                return False
        self.proc.join(0)
        return self.proc.exitcode is not None

    def _exit(self) -> asyncio.Future:
        """A future done once the process ends: one reader of its sentinel, whoever waits."""
        if self._ended is None:
            loop = asyncio.get_running_loop()
            self._ended = done = loop.create_future()
            sentinel = self.proc.sentinel

            def ended() -> None:
                loop.remove_reader(sentinel)
                if not done.done():
                    done.set_result(None)

            loop.add_reader(sentinel, ended)
        return self._ended

    async def stop(self, grace_s: float) -> None:
        """Cancel the worker's rollout, give it ``grace_s`` to end, then kill it; remove its files."""
        try:
            if self.chan is not None and grace_s > 0:
                self.chan.send("cancel")
                await self.chan.drain()
            if not await self.exited(grace_s):
                self.kill()
                await self.exited(KILL_WAIT_S)
        finally:
            self.remove_files()
            if self.chan is not None:
                self.chan.close()

    def kill(self) -> None:
        if self.proc.pid is not None and self.proc.exitcode is None:
            self.proc.kill()

    async def died(self) -> WorkerDied:
        """The error of a worker whose connection closed without an answer (after it has ended)."""
        if not await self.exited(KILL_WAIT_S):
            self.kill()
            await self.exited(KILL_WAIT_S)
        ready, diagnostics = self.files
        when = "after" if ready.exists() else "before"
        try:
            text = diagnostics.read_text(errors="replace").strip()
        except OSError:
            text = ""
        self.remove_files()
        tail = f": {text[-2000:]}" if text else ""
        return WorkerDied(f"rollout worker {self.proc.pid} ended (exit code {self.proc.exitcode}) {when} it was "
                          f"ready, without returning its rollout{tail}")

    def remove_files(self) -> None:
        for path in self.files:
            path.unlink(missing_ok=True)
            path.with_name(path.name + ".tmp").unlink(missing_ok=True)


def _state(workflow: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(workflow).items() if k not in _NOT_SENT}


async def _answer(chan: Channel, i: int, service: Any, name: str, args: tuple, kwargs: dict) -> None:
    """Make a worker's service call ``name`` on ``service`` and send back its value or exception."""
    try:
        value = getattr(service, name)(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # noqa: BLE001 - the worker's call raises it
        chan.send("reply", i, False, portable(exc))
        return
    chan.send("reply", i, True, value)


async def _unwound(aw: Any) -> Any:
    """Await ``aw`` to its end whatever cancels this task meanwhile (a cancelled member still ends its worker)."""
    future = asyncio.ensure_future(aw)
    while True:
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.done():
                return future.result()
