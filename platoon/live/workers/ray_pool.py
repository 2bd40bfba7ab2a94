"""Rollouts in Ray actors spread over a cluster's nodes (``train.workflow_config.rollout_isolation: ray``).

The trainer's side is ``WorkerPool``'s, unchanged: ``run``/``run_job``, the member's lease block, permit, start slot
and straggler deadline, the launch gate, the service calls served on the trainer's real model service (batched with
every other rollout's), cancellation bounded by ``worker_termination_grace_seconds``, background teardowns. What
differs is where a rollout runs: on an idle ``RolloutActor`` of the pool instead of a new process. The actor runs
the very loop a worker process runs (``platoon.live.workers.worker``), over a TCP connection to the trainer that it
opens for each rollout (a token says which rollout it serves), so the two ends speak the worker's protocol.

Rules it keeps:

- **actors are long-lived**: one rollout at a time each, reused; the pool grows on demand to ``train.ray.max_actors``
  (default: the run's rollout permits), each actor placed with Ray's ``SPREAD`` strategy and holding
  ``actor_cpus``, ``actor_memory_bytes`` and ``actor_resources``. An actor imports the worker's stack and the
  preload modules and builds the entries' environments, listing their splits' tasks, once, as it starts (the fork
  server's preload, done once per actor instead of once per node);
- **failures**: an actor that dies mid-rollout (killed, its node lost) ends that rollout with ``WorkerDied`` naming
  its node, which the group's failure rules take as any failed rollout; the dead actor leaves the pool and a new
  one is started where a node can host it. A node whose actors die and that Ray no longer lists as alive is said
  once (``warning``: the run goes on with the nodes that remain). A rollout that finds no actor for
  ``start_timeout_seconds`` (no node can host one) fails with ``WorkerDied`` too, so a run that has lost its
  nodes stops at its checkpoint once groups fail in a row (``platoon.policy.failures``);
- **connecting**: ``address`` (else ``RAY_ADDRESS``) names a running cluster, which is left running; without either
  a local instance starts, quiet, and stops with the pool (``aclose``/``close``), or with the trainer
  however it ends (``platoon.ray_connect``). At opening the pool
  says which cluster it uses (nodes, CPUs), and refuses (``TrainError``) a node whose platoon version, or a version
  of the environments' distributions, differs from the trainer's, naming its address.
"""

from __future__ import annotations

import asyncio
import faulthandler
import os
import pickle
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from platoon.live.launch.errors import TrainError
from platoon.live.rollouts import rollout_trace
from platoon.live.workers import worker
from platoon.live.workers.channel import Channel
from platoon.live.workers.envs import EnvSpec
from platoon.live.workers.pool import KILL_WAIT_S, WorkerDied, WorkerPool, _Worker
from platoon.ray_connect import connect

__all__ = ["RayPool", "RolloutActor", "cluster_summary", "distributions_of", "installed"]

TOKEN_BYTES = 16
FULL_BACKOFF_S = 5.0
"""After an actor that no node had room for lost the race to an actor coming free, rollouts take the actors there
are for this long before the pool asks Ray for another (each ask that no node can place costs a start and a kill)."""


class RolloutActor:
    """One long-lived rollout host (a Ray actor class once ``ray.remote`` wraps it; see the module's doc)."""

    def __init__(self, builds: Sequence[Mapping[str, Any]], modules: Sequence[str]) -> None:
        import importlib

        from platoon.live.workers.envs import run_plan

        for name in ("platoon.live.workers._stack", *modules):
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - a rollout imports it again and fails with its own error
                print(f"platoon: rollout actor could not import {name}: {exc}", file=sys.stderr)
        run_plan(builds)

    def node(self) -> str:
        """The id of the node this actor runs on (once its start-up is done)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def run(self, job_bytes: bytes, host: str, port: int, token: bytes) -> None:
        """One rollout: connect to the trainer, say which rollout this is, then serve it as a worker process does."""
        job: worker.Job = pickle.loads(job_bytes)
        for path in (job.ready_file, job.diagnostics_file):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        sock = socket.create_connection((host, port))
        sock.sendall(token)
        worker.reseed()
        try:
            with open(job.diagnostics_file, "w") as diagnostics:
                faulthandler.enable(diagnostics)
                try:
                    asyncio.run(worker._serve(sock, job))
                finally:
                    faulthandler.disable()
        finally:
            sock.close()
            for path in (job.ready_file, job.diagnostics_file):
                Path(path).unlink(missing_ok=True)


def platoon_version() -> str:
    import platoon

    return getattr(platoon, "__version__", "unknown")


def installed(names: Sequence[str]) -> dict[str, str | None]:
    """This node's platoon version (``"platoon"``) and the installed version of each distribution of ``names``
    (None: not installed)."""
    from importlib import metadata

    out: dict[str, str | None] = {"platoon": platoon_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def distributions_of(envs: Mapping[str, Any]) -> dict[str, str]:
    """The installed distributions (name -> version) that provide the classes of ``envs``, platoon's own left out."""
    from importlib import metadata

    providers = metadata.packages_distributions()
    out: dict[str, str] = {}
    for env in envs.values():
        for name in providers.get(type(env).__module__.partition(".")[0], []):
            if name.lower() != "platoon":
                out[name] = metadata.version(name)
    return out


def cluster_summary(nodes: Sequence[Mapping[str, Any]]) -> str:
    """``N node(s), C CPUs`` of Ray's ``ray.nodes()`` rows that are alive."""
    alive = [n for n in nodes if n.get("Alive")]
    cpus = sum(float(n.get("Resources", {}).get("CPU", 0)) for n in alive)
    return f"{len(alive)} node(s), {cpus:g} CPUs"


class _Member:
    """An actor of the pool: its handle, node, and whether it is serving a rollout."""

    def __init__(self, handle: Any, node: str, name: str = "") -> None:
        self.handle, self.node, self.name = handle, node, name
        self.dead = False
        self.uses = 0  # rollouts started on it
        self.traced: tuple[Any, float] | None = None  # the traced rollout it serves, and since when


class _NoProcess:
    pid: int | None = None
    exitcode: int | None = None


class _ActorWorker(_Worker):
    """A rollout running on an actor: ``_Worker``'s ending, cancelling and killing, in Ray's terms."""

    def __init__(self, member: _Member, ref: Any, chan: Channel | None, files: tuple[Path, Path], started: float) -> None:
        super().__init__(_NoProcess(), chan, files, started)
        self.member, self.ref = member, ref
        self.reused: list[float] = []  # the pool's reused_startup_s
        self._settled: asyncio.Future | None = None

    def first_call(self, record: list[float]) -> None:
        """``_Worker``'s, and the same figure in ``reused_startup_s`` when the actor had served a rollout before."""
        if not self._first_call:
            super().first_call(record)
            if self.member.uses > 1:
                self.reused.append(record[-1])

    def _run_ended(self) -> asyncio.Future:
        if self._settled is None:
            self._settled = asyncio.ensure_future(_settle(self.ref))
        return self._settled

    async def exited(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(asyncio.shield(self._run_ended()), timeout_s)
        except TimeoutError:
            return False
        return True

    def kill(self) -> None:
        if self._settled is None or not self._settled.done():
            import ray

            self.member.dead = True
            ray.kill(self.member.handle, no_restart=True)

    async def died(self) -> WorkerDied:
        try:
            why = await asyncio.wait_for(asyncio.shield(self._run_ended()), KILL_WAIT_S)
        except TimeoutError:
            self.kill()
            why = "it stopped answering and was killed"
        self.member.dead = True
        self.remove_files()
        return WorkerDied(f"rollout actor on node {self.member.node} ended without returning its rollout"
                          f"{': ' + why if why else ''}")


async def _settle(ref: Any) -> str:
    """Wait for an actor's ``run`` to end: "" when it returned, else what ended it (its actor died, its node)."""
    try:
        await asyncio.wrap_future(ref.future())
    except Exception as exc:  # noqa: BLE001 - Ray's error says why the actor is gone
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return ""


class RayPool(WorkerPool):
    """Runs rollouts in Ray actors (see the module's doc). ``ray_cfg``: ``train.ray``; ``env_specs``: the entries'
    environments as the config names them (each actor builds them once); ``modules``: more modules each actor
    imports as it starts (``worker_preload``); ``permits``: the run's rollout permits (the pool's default size);
    ``concurrent_groups``: at most this many groups launch rollouts at once (``worker_launch_concurrent_groups``);
    ``distributions``: the environments' distributions and versions (``distributions_of``), each node's checked."""

    isolation = "ray"

    def __init__(self, ray_cfg: Any, *, env_specs: Mapping[str, EnvSpec] | None = None, modules: Sequence[str] = (),
                 grace_s: float = 10.0, permits: int = 1, scratch: Path | None = None,
                 concurrent_groups: int = 0, distributions: Mapping[str, str] | None = None) -> None:
        # the launch gate keeps its limit on groups launching at once; memory is Ray's to place (train.ray)
        super().__init__(method="exec", env_specs=env_specs, grace_s=grace_s, scratch=scratch,
                         gate={"available": lambda: None, "reserve": 0, "permits": None,
                               "concurrent_groups": concurrent_groups})
        self.cfg = ray_cfg
        self.distributions = dict(distributions or {})
        self.modules = list(modules)
        self.max_actors = ray_cfg.max_actors or max(1, int(permits))
        self._members: list[_Member] = []
        self._idle: list[_Member] = []
        self._waiters: list[asyncio.Future] = []  # rollouts waiting for an actor to come free, first first
        self._disconnect: Any = None  # the local instance's shutdown, when the pool started one
        self._listener: socket.socket | None = None
        self._host = "127.0.0.1"
        self._accepting: asyncio.Task | None = None
        self._waiting: dict[bytes, asyncio.Future] = {}
        self._lost_nodes: set[str] = set()
        self._full_until = 0.0
        self.rollouts_by_node: dict[str, int] = {}
        self.reused_startup_s: list[float] = []  # start to first model call of each rollout on a reused actor
        self.actor_startup_s: list[float] = []  # each actor's, from the ask to its imports and environments done
        self.actor_starts_by_node: dict[str, int] = {}

    # ------------------------------------------------------------------------------------------------ opening
    def open(self) -> None:
        """Connect to the cluster (or start a local instance), say which, check every node's platoon version, and
        listen for the actors' connections."""
        if self._listener is not None:
            return
        import ray

        address = self.cfg.address or os.environ.get("RAY_ADDRESS")
        self._disconnect = connect(ray, address, runtime_env=dict(self.cfg.runtime_env))
        try:
            self._check_versions()
        except BaseException:
            self.close()
            raise
        self._host = ray.util.get_node_ip_address()
        self._listener = socket.create_server((self._host, 0))
        self._listener.setblocking(False)
        where = address or "a local instance"
        self.log("info", f"rollouts run on Ray actors ({where}: {cluster_summary(ray.nodes())}); each actor holds "
                         f"{self.cfg.actor_cpus:g} CPU, at most {self.max_actors} at once")

    def _check_versions(self) -> None:
        """``TrainError`` naming the first node whose platoon, or a distribution of the environments', differs from
        the trainer's."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        mine = {"platoon": platoon_version(), **self.distributions}
        probe = ray.remote(num_cpus=0)(installed)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        theirs = ray.get([probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                          .remote(sorted(self.distributions)) for n in nodes])
        for node, versions in zip(nodes, theirs, strict=True):
            for name, version in mine.items():
                if versions.get(name) != version:
                    has = f"runs {name} {versions[name]}" if versions.get(name) else f"lacks {name}"
                    raise TrainError(f"Ray node {node.get('NodeManagerAddress')} ({node['NodeID']}) {has}, the "
                                     f"trainer {version}: install the same {name} on every node")

    async def ready(self) -> None:
        self.open()
        if self._accepting is None:
            self._accepting = asyncio.ensure_future(self._accept())

    async def _accept(self) -> None:
        """Hand each actor's connection to the rollout its token names."""
        loop = asyncio.get_running_loop()
        assert self._listener is not None
        while True:
            sock, _ = await loop.sock_accept(self._listener)
            try:
                token = await asyncio.wait_for(_read_exactly(loop, sock, TOKEN_BYTES), 10.0)
            except (TimeoutError, ConnectionError):
                sock.close()
                continue
            waiting = self._waiting.pop(token, None)
            if waiting is None or waiting.done():
                sock.close()
            else:
                waiting.set_result(sock)

    # ------------------------------------------------------------------------------------------------ a rollout
    async def _start(self, job: bytes, files: tuple[Path, Path]) -> _Worker:
        member = await self._acquire()
        started = time.perf_counter()  # a rollout's start-up is its actor's, from here: not its wait for one
        member.uses += 1
        trace = rollout_trace.current()
        if trace is not None:
            trace.ran_on(node=member.node, actor=member.name)
            member.traced = (trace, trace.clock())
        token = os.urandom(TOKEN_BYTES)
        connected = asyncio.get_running_loop().create_future()
        self._waiting[token] = connected
        assert self._listener is not None
        ref = member.handle.run.remote(job, self._host, self._listener.getsockname()[1], token)
        ended = asyncio.ensure_future(_settle(ref))
        try:
            await asyncio.wait({connected, ended}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            self._waiting.pop(token, None)
            ended.cancel()
            self._release(member, ref)
            raise
        self._waiting.pop(token, None)
        if not connected.done():
            connected.cancel()
            why = ended.result()
            member.dead = True
            self._release(member, ref)
            raise WorkerDied(f"rollout actor on node {member.node} ended before its rollout began: {why}")
        ended.cancel()
        w = _ActorWorker(member, ref, None, files, started)
        w.reused = self.reused_startup_s
        await self._connected(w, connected.result())
        self.rollouts_by_node[member.node] = self.rollouts_by_node.get(member.node, 0) + 1
        return w

    async def _acquire(self) -> _Member:
        """An idle actor; else a new one while the pool has room, unless an actor comes free first (a cluster full
        of actors cannot place another: then, for ``FULL_BACKOFF_S``, no new one is asked for); else the first to
        come free. ``WorkerDied`` when none can be had within ``start_timeout_seconds``."""
        deadline = time.monotonic() + self.cfg.start_timeout_seconds
        full = self._members and time.monotonic() < self._full_until  # the cluster placed no more of late
        if self._idle or len(self._members) >= self.max_actors or full:
            return await self._first_idle(deadline)
        placeholder = _Member(None, "starting")
        self._members.append(placeholder)
        creating = asyncio.ensure_future(self._new_actor(deadline))
        freed = asyncio.ensure_future(self._first_idle(deadline))
        for task in (creating, freed):  # the loser's error (it may end so as it is cancelled) is read, not warned of
            task.add_done_callback(_read_error)
        try:
            await asyncio.wait({creating, freed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._members.remove(placeholder)
            for task in (creating, freed):
                if not task.done():
                    task.cancel()
        made, came = (t.result() if t.done() and not t.cancelled() and t.exception() is None else None
                      for t in (creating, freed))
        if made is not None:
            self._members.append(made)
            if came is not None:
                self._release(came, None)  # both came: the other goes to the next rollout
            return made
        if came is not None:
            self._full_until = time.monotonic() + FULL_BACKOFF_S  # its actor was not placed: no node had room
            return came
        errors = [t.exception() for t in (creating, freed) if t.done() and not t.cancelled()]
        raise errors[0] if errors else WorkerDied("no rollout actor")

    async def _first_idle(self, deadline: float) -> _Member:
        """An idle actor, or the first to come free (handed over by ``_release``); ``WorkerDied`` at ``deadline``."""
        if self._idle:
            return self._idle.pop()
        handed: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters.append(handed)
        taken = False
        try:
            member = await asyncio.wait_for(asyncio.shield(handed), max(0.0, deadline - time.monotonic()))
            taken = True
            return member
        except TimeoutError:
            alive = sum(m.handle is not None for m in self._members)
            why = (f"{alive} alive, at most {self.max_actors}" if alive else
                   f"none alive: no node could host one, each holding {self.cfg.actor_cpus:g} CPU{self._held()}")
            raise WorkerDied(f"no rollout actor came free within {self.cfg.start_timeout_seconds:g} s ({why})") \
                from None
        finally:
            if handed in self._waiters:
                self._waiters.remove(handed)
            if not handed.done():
                handed.cancel()
            elif not taken and not handed.cancelled():
                self._release(handed.result(), None)  # handed over as this wait ended otherwise: to the next

    async def _new_actor(self, deadline: float) -> _Member:
        import ray

        remote = ray.remote(RolloutActor).options(
            num_cpus=self.cfg.actor_cpus, memory=self.cfg.actor_memory_bytes,
            resources=dict(self.cfg.actor_resources) or None, scheduling_strategy="SPREAD", max_restarts=0,
            max_concurrency=1)
        builds = [s.to_json() for s in self.env_specs.values()]
        asked = time.perf_counter()
        handle = remote.remote(builds, self.modules)
        try:
            node = await asyncio.wait_for(asyncio.wrap_future(handle.node.remote().future()),
                                          max(0.0, deadline - time.monotonic()))
        except BaseException as exc:
            ray.kill(handle, no_restart=True)
            if not isinstance(exc, Exception):
                raise
            why = (f"no node could host one within {self.cfg.start_timeout_seconds:g} s (each holds "
                   f"{self.cfg.actor_cpus:g} CPU{self._held()})" if isinstance(exc, TimeoutError)
                   else f"it failed to start: {type(exc).__name__}: {exc}")
            raise WorkerDied(f"no rollout actor: {why}") from None
        self.actor_startup_s.append(time.perf_counter() - asked)
        self.actor_starts_by_node[node] = self.actor_starts_by_node.get(node, 0) + 1
        return _Member(handle, node, f"actor-{sum(self.actor_starts_by_node.values())}")

    def _held(self) -> str:
        extra = [f"{v:g} {k}" for k, v in self.cfg.actor_resources.items()]
        if self.cfg.actor_memory_bytes:
            extra.append(f"{self.cfg.actor_memory_bytes} bytes of memory")
        return f", {', '.join(extra)}" if extra else ""

    def _gone(self, w: _Worker) -> None:
        super()._gone(w)
        if isinstance(w, _ActorWorker):
            self._release(w.member, w.ref)

    def _release(self, member: _Member, ref: Any) -> None:
        """Back to the idle actors, or, dead, out of the pool (its node said once when Ray has lost it); a traced
        rollout's time on it goes on the actor's own track."""
        if member.traced is not None:
            trace, began = member.traced
            member.traced = None
            trace.on_actor(f"{member.name} on node {member.node[:12]}", began)
        if member not in self._members:
            return
        if member.dead:
            self._members.remove(member)
            self._say_lost(member.node)
            return
        while self._waiters:
            waiting = self._waiters.pop(0)
            if not waiting.done():
                waiting.set_result(member)
                return
        self._idle.append(member)

    def _say_lost(self, node: str) -> None:
        import ray

        if node in self._lost_nodes:
            return
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        if node not in alive:
            self._lost_nodes.add(node)
            self.log("warning", f"Ray node {node} is lost: its rollouts failed, and rollouts go on on the "
                                f"{len(alive)} node(s) that remain")

    def _pids(self) -> list[int]:
        return []

    def metrics(self) -> dict[str, float]:
        """Per node: rollouts started, actors started, actors alive (``rollout_client/ray/...``)."""
        out: dict[str, float] = {}
        alive: dict[str, int] = {}
        for m in self._members:
            if not m.dead and m.handle is not None:
                alive[m.node] = alive.get(m.node, 0) + 1
        for node in sorted(set(self.rollouts_by_node) | set(self.actor_starts_by_node) | set(alive)):
            out[f"rollout_client/ray/node/{node[:12]}/rollouts"] = float(self.rollouts_by_node.get(node, 0))
            out[f"rollout_client/ray/node/{node[:12]}/actor_starts"] = float(self.actor_starts_by_node.get(node, 0))
            out[f"rollout_client/ray/node/{node[:12]}/actors_alive"] = float(alive.get(node, 0))
        return out

    # ------------------------------------------------------------------------------------------------- closing
    async def aclose(self) -> None:
        await super().aclose()
        if self._accepting is not None:
            self._accepting.cancel()
            await asyncio.gather(self._accepting, return_exceptions=True)
            self._accepting = None

    def close(self) -> None:
        super().close()
        for waiting in self._waiting.values():
            waiting.cancel()
        self._waiting.clear()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._members:
            import ray

            for m in self._members:
                if m.handle is not None:
                    ray.kill(m.handle, no_restart=True)
            self._members.clear()
            self._idle.clear()
        if self._disconnect is not None:
            self._disconnect()
            self._disconnect = None


def _read_error(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


async def _read_exactly(loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = await loop.sock_recv(sock, n - len(data))
        if not chunk:
            raise ConnectionError("closed before its token")
        data += chunk
    return data
