"""A rollout worker: one rollout, run in a process of its own.

The trainer (``platoon.live.workers.pool``) starts a worker per rollout with one end of a socket pair and a pickled
``Job``: its ``Episode`` (what to run: a workflow member's ``arun_episode_single``, ``WorkflowEpisode``, or any other
picklable episode, such as evaluation's ``platoon.live.rollouts.evaluate.EvalEpisode``), the environments it plays
(specs, or pickled instances) and the service's ``version`` at the rollout's start. The worker runs the episode's
code unchanged, with a ``ServiceProxy`` for the model service: every call of a service method goes to the trainer,
which makes it on the real model service (batched with every other rollout's) and sends back its value or its
exception. What the worker sends:

- ``("call", i, name, args, kwargs)`` / ``("drop", i)``: a service call, and its cancellation;
- ``("ready",)``: its episode is set up (after its imports; the trainer's launch gate measures it then);
- ``("first_call",)``: the rollout's first model call (``first_model_call``): its start slot comes back;
- ``("warn", message)``: the episode's warnings; ``("env_step", start, end)``: a traced rollout's step, on the
  monotonic clock;
- ``("result", rollout, teardowns)`` or ``("error", exc)``; with background teardowns still running
  (``teardowns`` > 0), ``("teardowns_done",)`` once they have ended.

With the inference servers in reach (``train.inference.engine: vllm``), a ``sample`` is sent as
``("call", i, "sample_placed", (), {"seed": ...})`` and the worker posts it to the server the trainer names in each
``("post", i, url, seed)``, answering ``("posted", i, outcome, value)`` (``platoon.live.inference.direct``).

It reads ``("reply", i, ok, value)`` and ``("cancel",)``: a cancel (or its trainer gone: the connection closed)
cancels the rollout, which unwinds as it would in the trainer, and the worker ends. It ends with its trainer
however the trainer ends (``platoon.lifeline``: the kernel's parent-death signal, and a watch that ends
it ``worker_parent_grace_seconds`` after its trainer is gone, for a rollout that does not unwind). The worker writes a readiness
file once its episode is set up (its workflow built) and keeps a diagnostics file (``faulthandler``'s output: a crash's traceback) in
node-local scratch, and removes both when it ends; the trainer removes what a killed worker could not.

This module imports nothing heavy: a worker started fresh (``exec``) imports the episode's modules when it unpickles
its job, after ``main`` has begun (so that ``audit_opens`` counts those imports' files). A forked worker reseeds
numpy's and torch's generators (Python's ``random`` reseeds itself after a fork), so that no two share a stream.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import os
import pickle
import signal
import socket
import sys
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from platoon.lifeline import die_with_parent, watch_parent
from platoon.live.workers.channel import Channel, portable

__all__ = ["Episode", "Job", "ServiceProxy", "WorkflowEpisode", "cuda_started", "main", "report", "reseed"]

_OPENS = 0


class Episode(Protocol):
    """A rollout a worker runs: a picklable object (its class importable by name in the worker)."""

    def start(self, envs: Mapping[str, Any], service: Any,
              warn: Callable[[str], None]) -> Coroutine[Any, Any, Any]:
        """The rollout's coroutine, playing ``envs`` (by entry) with ``service`` (the worker's ``ServiceProxy``),
        warning through ``warn`` (the trainer's log); its value is what the trainer's ``run_job`` returns. Raising
        here fails the rollout before the worker is ready."""
        ...


@dataclass(frozen=True)
class WorkflowEpisode:
    """A workflow member's rollout: ``workflow.arun_episode_single(row)``. ``workflow``: pickled ``(class,
    attributes)`` (the worker gets its own environments, service, warnings and routing-id watch); ``row``: the
    pickled ``GroupRow`` (its ``member`` set)."""

    workflow: bytes
    row: bytes

    def start(self, envs: Mapping[str, Any], service: Any,
              warn: Callable[[str], None]) -> Coroutine[Any, Any, Any]:
        cls, state = pickle.loads(self.workflow)
        workflow = cls.__new__(cls)
        workflow.__dict__.update(state)
        workflow.envs = dict(envs)
        workflow.service = service
        workflow.warn = warn
        workflow.routing = _RoutingCountedByTrainer()
        workflow.inform = warn  # no notice comes from a worker: the trainer counts routing ids
        return workflow.arun_episode_single(pickle.loads(self.row))


@dataclass(frozen=True)
class Job:
    """What a worker runs (see the module docstring). ``episode``: an ``Episode``; ``envs``: by entry, an
    ``EnvSpec`` or a pickled instance; ``ready_file`` and ``diagnostics_file``: its files in scratch; ``traced``: the
    trainer traces the rollout (``_RemoteTrace``)."""

    episode: Episode
    envs: Mapping[str, Any]
    service_attrs: Mapping[str, Any]
    ready_file: str
    diagnostics_file: str
    audit_opens: bool = False
    traced: bool = False


class ServiceProxy:
    """The model service as a worker sees it: ``service_attrs`` (``version``, as at the rollout's start) and every
    other public name a method whose calls the trainer makes on the real service. With a ``direct`` target the
    worker reaches (``platoon.live.inference.direct``), ``sample`` posts to the inference servers itself, where the
    trainer says."""

    def __init__(self, chan: Channel, attrs: Mapping[str, Any]) -> None:
        self._chan = chan
        self._attrs = dict(attrs)
        target = self._attrs.pop("direct", None)
        self._direct: Any = None
        if target is not None and target.reachable():
            from platoon.live.inference.direct import DirectCalls

            self._direct = DirectCalls(target)
        self._calls: dict[int, asyncio.Future] = {}
        self._next = 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._attrs:
            return self._attrs[name]
        if name == "sample" and self._direct is not None:
            return self._sample_direct

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self._call(self._number(), name, args, kwargs)

        return call

    def _number(self) -> int:
        self._next += 1
        return self._next - 1

    async def _sample_direct(self, prompt_tokens: Any, *, seed: int | None = None, **kwargs: Any) -> Any:
        i = self._number()
        self._direct.prepare(i, prompt_tokens, seed=seed, **kwargs)
        try:
            placement = await self._call(i, "sample_placed", (), {"seed": seed})
            return self._direct.sample(i, placement)
        finally:
            self._direct.forget(i)

    async def _call(self, i: int, name: str, args: tuple, kwargs: dict) -> Any:
        future = asyncio.get_running_loop().create_future()
        self._calls[i] = future
        self._chan.send("call", i, name, args, kwargs)
        try:
            return await future
        except asyncio.CancelledError:
            self._chan.send("drop", i)
            raise
        finally:
            self._calls.pop(i, None)

    async def read(self) -> None:
        """Resolve replies (and post direct calls where the trainer says) until the trainer cancels the rollout or
        is gone."""
        while True:
            message = await self._chan.recv()
            if message is None or message[0] == "cancel":
                return
            if message[0] == "post" and self._direct is not None:
                _, i, url, seed = message
                self._direct.post(i, url, seed, self._chan.send)
            elif message[0] == "reply":
                _, i, ok, value = message
                future = self._calls.get(i)
                if future is not None and not future.done():
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(value)

    async def aclose(self) -> None:
        if self._direct is not None:
            await self._direct.aclose()


def main(sock: socket.socket, job_bytes: bytes, parent: int | None = None, trainer: int | None = None,
         parent_grace_s: float = 60.0) -> None:
    """The worker's entry point (a ``multiprocessing.Process`` target). ``parent``: the pid that starts it (the
    trainer under ``exec``, the fork server under ``forkserver``), ``trainer``: the trainer's; the worker ends with
    either (``platoon.lifeline``), outliving its trainer at most ``parent_grace_s``."""
    die_with_parent(parent)  # first: a trainer killed from here on takes the worker with it
    files: list[str] = []  # the watch removes them when it ends the worker
    if trainer is not None:
        watch_parent(os.getppid() if parent is None else parent, trainer, parent_grace_s, files)
    # A Ctrl-C reaches the whole process group: the trainer decides what becomes of its rollouts (it cancels them).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    job: Job = pickle.loads(job_bytes)
    files += [job.ready_file, job.diagnostics_file]
    if job.audit_opens:
        sys.addaudithook(_count_opens)
    reseed()
    with open(job.diagnostics_file, "w") as diagnostics:
        faulthandler.enable(diagnostics)
        try:
            asyncio.run(_serve(sock, job))
        finally:
            faulthandler.disable()
    for path in (job.ready_file, job.diagnostics_file):
        Path(path).unlink(missing_ok=True)


async def _serve(sock: socket.socket, job: Job) -> None:
    chan = await Channel.open(sock)
    proxy = ServiceProxy(chan, job.service_attrs)
    try:
        await _play(chan, proxy, job)
    finally:
        await proxy.aclose()


async def _play(chan: Channel, proxy: ServiceProxy, job: Job) -> None:
    from platoon.live.rollouts import rollout_trace
    from platoon.live.rollouts.lease import rollout_scope

    try:
        episode = job.episode.start(_environments(job), proxy, lambda message: chan.send("warn", str(message)))
    except BaseException as exc:
        chan.send("error", portable(exc))
        await chan.drain()
        return
    _write_ready(job)
    chan.send("ready")  # the trainer's launch gate counts it launched: its imports done, its memory measurable
    teardowns: list[asyncio.Task] = []
    with rollout_scope(lambda: chan.send("first_call"), teardowns):
        token = rollout_trace.use(_RemoteTrace(chan)) if job.traced else None
        rollout = asyncio.ensure_future(episode)
        if token is not None:
            rollout_trace.reset(token)
    reader = asyncio.ensure_future(proxy.read())
    await asyncio.wait({rollout, reader}, return_when=asyncio.FIRST_COMPLETED)
    if not rollout.done():  # cancelled by the trainer, or the trainer is gone
        rollout.cancel()
        await asyncio.wait({rollout})
        if not rollout.cancelled():
            rollout.exception()
        chan.close()
        return
    if rollout.cancelled():
        chan.send("error", RuntimeError("the rollout was cancelled inside its worker"))
    elif rollout.exception() is not None:
        chan.send("error", portable(rollout.exception()))
    else:
        if job.audit_opens:
            chan.send("opens", _OPENS)
        pending = [t for t in teardowns if not t.done()]
        chan.send("result", rollout.result(), len(pending))
        if pending:
            await asyncio.wait([reader, asyncio.gather(*pending, return_exceptions=True)],
                               return_when=asyncio.FIRST_COMPLETED)
            chan.send("teardowns_done")
    await chan.drain()
    reader.cancel()
    chan.close()


class _RemoteTrace:
    """A traced rollout's trace inside its worker: its ``env_step`` spans go to the trainer, timed on the monotonic
    clock the two processes share; the rest of its spans the trainer times itself (every other call does nothing)."""

    def __init__(self, chan: Channel) -> None:
        self._chan = chan

    def clock(self) -> float:
        return time.monotonic()

    def env_step(self, start: float) -> None:
        self._chan.send("env_step", start, time.monotonic())

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class _RoutingCountedByTrainer:
    """The worker's routing-id watch says nothing: the trainer counts a rollout's calls as it serves them
    (``WorkerPool.run``), so its warnings fire once per run, not once per worker."""

    def rollout_ended(self, rollout: str, *, calls: int, present: int) -> list[tuple[str, str]]:
        return []

    def metrics(self) -> dict[str, float]:
        return {}


def _environments(job: Job) -> dict[str, Any]:
    from platoon.live.workers.envs import EnvSpec, environment

    return {label: environment(e) if isinstance(e, EnvSpec) else pickle.loads(e) for label, e in job.envs.items()}


def _write_ready(job: Job) -> None:
    path = Path(job.ready_file)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "ready_at": time.time()}))
    os.replace(tmp, path)


def reseed() -> None:
    """Reseed numpy's global generator and torch's CPU one from the OS (a forked worker would share its fork
    server's streams); the fork server calls it once too, so that the lazy imports of its first call are done."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.default_generator.seed()


def cuda_started() -> bool:
    """Whether this process started the CUDA driver (through torch, when imported): a process forked from it would
    hold a driver state it cannot use."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.cuda.is_initialized())


def _count_opens(event: str, args: tuple) -> None:
    global _OPENS
    if event == "open":
        _OPENS += 1


def report(conn: Any) -> None:
    """The fork server's warm-up (a ``Process`` target): send its pid, the modules it imported beyond the worker's
    stack and whether its imports started the CUDA driver, then end."""
    stack, done = sys.modules.get("platoon.live.workers._stack"), sys.modules.get("platoon.live.workers._plan")
    conn.send((os.getppid(), done.MODULES - stack.MODULES if stack and done else 0,
               bool(done and done.CUDA_STARTED)))
    conn.close()
