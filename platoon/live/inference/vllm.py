"""vLLM servers as the model service: tokens in, tokens out over HTTP, the trainer's weights pushed after each step.

``VLLMService(servers, served_name=, weights=)`` is a ``ModelService`` (``platoon.live.inference.service``) over one or
more vLLM OpenAI-compatible servers (``httpx``, one pooled async client per server). Rules it keeps:

- **tokens in, tokens out**: a prompt goes to ``/v1/completions`` as its token ids (never re-tokenized text), with
  ``return_tokens_as_token_ids``, one log-probability per sampled token, the request's temperature, limit and seed;
  ``ignore_eos`` and ``stop_token_ids`` make the renderer's stops the only ones (as with the built-in service), a
  stop of several tokens ending the completion where it occurs. The ``Sample`` holds exactly the ids the server
  sampled and their log-probabilities (the server runs with ``--logprobs-mode processed_logprobs``: the
  distribution it sampled from, after temperature), and the server's ``routed_experts`` as its routing id;
- **routing** (``Router``): a rollout keeps its server across its turns (``rollout_session``: its prefix cache); a
  new one goes to the server with the fewest requests in flight;
- **failures**: a request that fails on a server (it cannot be reached, times out, answers 5xx) marks the server
  down and is tried again on another, at most ``retries`` times; a down server is tried again ``recheck_s`` later,
  brought to the current weights first. A request a server refuses (4xx: a prompt past its context) fails at once.
  When no server has answered for ``down_after_s``, requests fail with ``InferenceDown``, naming every server and
  its last error (the run's failure streak then stops it, at its last checkpoint);
- **weight sync** (``publish``): the weights are written (``WeightStore``: Hugging Face layout, atomic), new requests
  wait, then every server, in parallel: ``/pause`` (``in_flight``: ``abort`` ends the requests in flight, which are
  sent again on the new weights; ``keep`` freezes them, and they go on after), ``/collective_rpc reload_weights``
  from the version's directory, ``/update_weight_version``, ``/resume``. A sample whose request spanned an update
  under ``keep`` records the versions (``Sample.versions``), its ``version`` the oldest;
- **accounting**: every request ends in a sample or an exception; ``step_metrics()`` reports, since its last call,
  requests, retries, re-sent requests, the servers up, the last sync's seconds and the share of the time paused.
  Each sample names its server (its index) and the requests in flight there on average while it ran
  (``Sample.concurrency``, from each server's integral of its load over time): the trace's ``model_call`` spans
  carry both, and ``platoon calibrate`` fits the simulator's servers from them; ``last_pause_s`` is the last
  publish's pause (the trace's ``pause`` span).

A rollout worker's call (``rollout_isolation: process`` or ``ray``) is posted by the worker itself, where it reaches
the servers (``platoon.live.inference.direct``): ``sample_placed`` keeps every rule above for it, each try a
``post`` the worker makes; the wire format both use is ``platoon.live.inference.completions``.

``start()`` checks every server before step 0 (it answers and serves ``served_name``: else ``InferenceRefused``
naming the URL) and pushes the weights the service was built with, so a resumed run's servers serve its checkpoint.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from platoon.live.inference.completions import (
    InferenceError,
    Placement,
    ServerFailed,
    completion_payload,
    first_choice,
    post_json,
    routing_id,
    sample_of,
    words,
)
from platoon.live.inference.direct import DirectTarget, network_home
from platoon.live.inference.model import derive_seed
from platoon.live.inference.service import Sample, rollout_session
from platoon.live.inference.weights import WeightStore
from platoon.live.launch.errors import TrainError

__all__ = ["InferenceDown", "InferenceError", "InferenceRefused", "Router", "Server", "VLLMService"]


class InferenceDown(InferenceError):
    """No server has answered for the service's ``down_after_s``."""


class InferenceRefused(TrainError):
    """A server that cannot serve the run (unreachable at start, another model, no weight-sync endpoints)."""


@dataclass(eq=False)
class Server:
    """One server as the router sees it."""

    url: str
    client: Any
    in_flight: int = 0
    requests: int = 0
    version: int | None = None  # the weights it serves; None: not known yet
    failed_at: float | None = None
    error: str | None = None
    load_area: float = 0.0  # the integral of in_flight over time, up to load_since
    load_since: float = 0.0

    def load_changed(self, now: float, by: int) -> None:
        """``in_flight`` goes up or down ``by`` at ``now`` (the load integral taken up to then first)."""
        self.load_area += self.in_flight * (now - self.load_since)
        self.load_since, self.in_flight = now, self.in_flight + by

    def up(self, now: float, recheck_s: float) -> bool:
        return self.failed_at is None or now - self.failed_at >= recheck_s


class Router:
    """Which server a request goes to: its rollout's, else the least loaded of those up (see the module's doc)."""

    def __init__(self, servers: Sequence[Server], *, recheck_s: float) -> None:
        self.servers = list(servers)
        self.recheck_s = recheck_s
        self.last_answer = -math.inf  # set by the service as it starts
        self._sticky: weakref.WeakKeyDictionary[Any, Server] = weakref.WeakKeyDictionary()

    def pick(self, session: object | None, now: float, avoid: Collection[Server] = ()) -> Server | None:
        """A server for ``session``'s next request (not one of ``avoid`` while another is up); None when none is."""
        up = [s for s in self.servers if s.up(now, self.recheck_s)]
        candidates = [s for s in up if s not in avoid] or up
        if not candidates:
            return None
        kept = self._sticky.get(session) if session is not None else None
        server = kept if kept in candidates else min(candidates, key=lambda s: (s.in_flight, s.requests))
        if session is not None:
            self._sticky[session] = server
        return server

    def answered(self, server: Server, now: float) -> None:
        server.failed_at, server.error = None, None
        self.last_answer = now

    def silent_for(self, now: float) -> float:
        """Seconds since a server last answered, while none is known to be up (0 while one is)."""
        if any(s.failed_at is None for s in self.servers):
            return 0.0
        return now - self.last_answer

    def failures(self) -> str:
        return "; ".join(f"{s.url}: {s.error or 'no answer'}" for s in self.servers)


class VLLMService:
    """A ``ModelService`` over vLLM servers (see the module's doc)."""

    def __init__(self, servers: Sequence[str], *, served_name: str, weights: WeightStore,
                 initial_weights: Callable[[], Mapping[str, Any]] | None = None, version: int = 0, seed: int = 0,
                 in_flight: str = "abort", request_timeout_s: float = 600.0, connect_timeout_s: float = 10.0,
                 retries: int = 3, down_after_s: float = 120.0, recheck_s: float = 10.0,
                 transport: Any = None, clock: Callable[[], float] = time.monotonic) -> None:
        import httpx

        if in_flight not in ("abort", "keep"):
            raise ValueError(f"in_flight must be abort or keep, got {in_flight!r}")
        timeout = httpx.Timeout(request_timeout_s, connect=connect_timeout_s)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
        self.router = Router([Server(url.rstrip("/"), httpx.AsyncClient(base_url=url.rstrip("/"), timeout=timeout,
                                                                        limits=limits, transport=transport))
                              for url in servers], recheck_s=recheck_s)
        self.router.last_answer = clock()  # a server that never answers is down from now on
        self.served_name, self.weights, self.in_flight = served_name, weights, in_flight
        self.retries, self.down_after_s, self.seed, self.clock = retries, down_after_s, seed, clock
        self.request_timeout_s, self.connect_timeout_s = request_timeout_s, connect_timeout_s
        self._initial_weights = initial_weights
        self._version = int(version)
        self._weights: Any = None  # the directory of the weights published last (None: the servers' own)
        self._syncs = 0  # weight updates so far: a request that saw one was in flight across it
        self._open: asyncio.Event | None = None  # set while no weight sync is under way
        self._synced: dict[Server, asyncio.Lock] = {s: asyncio.Lock() for s in self.router.servers}
        self._arrivals = 0
        self._closed = False
        self._counts = {"requests": 0, "retries": 0, "resent": 0}
        self._sync_s: list[float] = []
        self._paused_s = 0.0
        self.last_pause_s: float | None = None  # the last publish's pause (new requests held, servers reloading)
        self._since = clock()

    @property
    def version(self) -> int:
        return self._version

    @property
    def servers(self) -> list[Server]:
        return self.router.servers

    # --- start ----------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Check every server (``InferenceRefused`` naming the first that cannot serve the run), then push the
        weights the service was built with as its version."""
        await asyncio.gather(*(self._check(s) for s in self.servers))
        if self._initial_weights is not None:
            await self.publish(self._initial_weights(), self._version)

    async def _check(self, server: Server) -> None:
        try:
            r = await server.client.get("/v1/models")
            r.raise_for_status()
            served = [m.get("id") for m in r.json().get("data", [])]
        except Exception as exc:  # noqa: BLE001 - any failure to answer is the server's, named with it
            raise InferenceRefused(f"inference server {server.url} does not answer /v1/models: {words(exc)}") from None
        if self.served_name not in served:
            raise InferenceRefused(f"inference server {server.url} serves {', '.join(map(repr, served)) or 'nothing'}, "
                                   f"not train.model_name {self.served_name!r}")

    # --- sampling -------------------------------------------------------------------------------------------

    async def sample(self, prompt_tokens: Sequence[int], *, max_new_tokens: int, temperature: float,
                     seed: int | None = None, stop: Collection[Sequence[int]] = ()) -> Sample:
        """One completion of ``prompt_tokens`` (see the module's doc); ``InferenceError`` when no server answers
        it, ``ValueError`` for a request no server could serve."""
        self._check_open()
        payload, stops = completion_payload(self.served_name, prompt_tokens, max_new_tokens=max_new_tokens,
                                            temperature=temperature, seed=seed, stop=stop)
        payload["seed"] = self._arrival(seed)
        answers: list[Mapping[str, Any]] = []

        async def post(server: Server, seed: int) -> Mapping[str, Any]:
            answers.append(first_choice(await self._post(server, "/v1/completions", json=payload)))
            return answers[-1]

        placement = await self._placed(post, payload["seed"])
        return placement.sample(*sample_of(answers[-1], max_new_tokens, stops))

    async def sample_placed(self, post: Callable[[str, int], Awaitable[Mapping[str, Any]]], *,
                            seed: int | None = None) -> Placement:
        """A request whose completion a rollout worker posts itself (``platoon.live.inference.direct``): this
        service picks its server, holds it through weight syncs, retries it and accounts for it as for its own,
        each try being ``await post(server_url, seed)``, which answers ``{"finish_reason", "routing_id"}`` of
        the choice or raises ``ServerFailed``/``InferenceError``; the ``Placement`` says where and on what it
        ran."""
        self._check_open()
        chosen = self._arrival(seed)

        async def tried(server: Server, seed: int) -> Mapping[str, Any]:
            return await post(server.url, seed)

        return await self._placed(tried, chosen)

    @property
    def direct_target(self) -> DirectTarget:
        """What a rollout worker needs to post its own calls to the servers (``platoon.live.inference.direct``)."""
        return DirectTarget(tuple(s.url for s in self.servers), self.served_name, self.request_timeout_s,
                            self.connect_timeout_s, network_home())

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("sample: the model service is closed")

    def _arrival(self, seed: int | None) -> int:
        """Count a request; its seed (None: the service's next)."""
        self._counts["requests"] += 1
        if seed is None:
            seed = derive_seed(self.seed, "request", self._arrivals)
        self._arrivals += 1
        return int(seed) % 2**63

    async def _placed(self, post: Callable[[Server, int], Awaitable[Mapping[str, Any]]], seed: int) -> Placement:
        """Try ``post`` on a server until one answers (see the module's doc: routing, failures, weight sync); where
        and on what version the answer ran."""
        session, tried, failures = rollout_session.get(), [], 0
        while True:
            await self._opened()
            server = await self._server(session, tried)
            version, syncs = self._version, self._syncs
            began = self.clock()
            server.load_changed(began, +1)
            area = server.load_area
            server.requests += 1
            try:
                choice = await post(server, seed)
            except ServerFailed as exc:
                if self._syncs != syncs:  # ended by a weight update (abort), not by the server failing
                    self._counts["resent"] += 1
                    continue
                self._failed(server, str(exc))
                failures += 1
                if failures > self.retries:
                    raise InferenceError(f"a request failed {failures} times; last on {server.url}: {exc}") from None
                self._counts["retries"] += 1
                tried.append(server)
                continue
            finally:
                server.load_changed(self.clock(), -1)
            self.router.answered(server, self.clock())
            if choice.get("finish_reason") == "abort":
                self._counts["resent"] += 1
                continue
            seconds = server.load_since - began
            versions = tuple(range(version, self._version + 1)) if self._syncs != syncs else ()
            return Placement(version, versions if len(versions) > 1 else (), server=self.servers.index(server),
                             concurrency=(server.load_area - area) / seconds if seconds > 0
                             else float(server.in_flight + 1),
                             routing_id=choice["routing_id"] if "routing_id" in choice else routing_id(choice))

    async def _post(self, server: Server, path: str, **kwargs: Any) -> Any:
        return await post_json(server.client, server.url, path, self.request_timeout_s, **kwargs)

    async def _server(self, session: object | None, tried: Sequence[Server]) -> Server:
        """A server for the request, at the current weights; waits while none is up, ``InferenceDown`` once none
        has answered for ``down_after_s``."""
        while True:
            now = self.clock()
            server = self.router.pick(session, now, avoid=tried)
            if server is not None:
                if self._weights is None or server.version == self._version or await self._bring_up(server):
                    return server
                continue
            if self.router.silent_for(now) >= self.down_after_s:
                raise InferenceDown(f"no inference server has answered for {self.down_after_s:g} s: "
                                    f"{self.router.failures()}")
            wake = min(s.failed_at + self.router.recheck_s for s in self.servers if s.failed_at is not None)
            await asyncio.sleep(max(0.05, wake - now))

    async def _bring_up(self, server: Server) -> bool:
        """Sync a server that missed an update (down at the time) to the current weights; whether it is current."""
        async with self._synced[server]:
            if server.version == self._version:
                return True
            try:
                assert self._weights is not None
                await self._sync_server(server, self._weights, self._version)
            except (ServerFailed, InferenceError) as exc:
                self._failed(server, f"bringing it to version {self._version}: {exc}")
                return False
            return True

    def _failed(self, server: Server, error: str) -> None:
        server.failed_at, server.error = self.clock(), error

    async def _opened(self) -> None:
        if self._open is None:
            self._open = asyncio.Event()
            self._open.set()
        await self._open.wait()

    # --- weights --------------------------------------------------------------------------------------------

    async def publish(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Write ``state_dict`` as ``version`` and put it live on every server that is up (see the module's doc);
        ``InferenceError`` naming the servers when none took it."""
        began = self.clock()
        path = await asyncio.to_thread(self.weights.write, state_dict, int(version))
        await self._opened()
        assert self._open is not None
        self._open.clear()
        paused = self.clock()
        try:
            now = self.clock()
            targets = [s for s in self.servers if s.up(now, self.router.recheck_s)]
            results = await asyncio.gather(*(self._sync_locked(s, path, int(version)) for s in targets),
                                           return_exceptions=True)
            self._version, self._weights = int(version), path
            self._syncs += 1
        finally:
            self._open.set()
        end = self.clock()
        self.last_pause_s = end - paused
        self._paused_s += end - paused
        self._sync_s.append(end - began)
        for server, result in zip(targets, results, strict=True):
            if isinstance(result, BaseException):
                self._failed(server, f"weight sync to version {version}: {words(result)}")
        if not any(s.version == self._version for s in self.servers):
            raise InferenceError(f"no inference server took the weights of version {version}: "
                                 f"{self.router.failures()}")

    async def _sync_locked(self, server: Server, path: Any, version: int) -> None:
        async with self._synced[server]:
            await self._sync_server(server, path, version)

    async def _sync_server(self, server: Server, path: Any, version: int) -> None:
        await self._post(server, "/pause", params={"mode": self.in_flight})
        try:
            await self._post(server, "/collective_rpc", json={"method": "reload_weights",
                                                               "kwargs": {"weights_path": str(path)}})
            await self._post(server, "/update_weight_version", json={"new_version": str(version)})
        finally:
            await self._post(server, "/resume")
        server.version = version

    # --- metrics and closing --------------------------------------------------------------------------------

    def step_metrics(self) -> dict[str, float]:
        """``inference/...`` since the last call: requests, retries, re-sent requests, servers up, the mean weight
        sync's seconds and the share of the time the servers were paused."""
        now = self.clock()
        span = max(now - self._since, 1e-9)
        out = {f"inference/{k}": float(v) for k, v in self._counts.items()}
        out["inference/servers_up"] = float(sum(s.up(now, self.router.recheck_s) for s in self.servers))
        if self._sync_s:
            out["inference/weight_sync_s"] = sum(self._sync_s) / len(self._sync_s)
        out["inference/paused_share"] = min(1.0, self._paused_s / span)
        self._counts = dict.fromkeys(self._counts, 0)
        self._sync_s, self._paused_s, self._since = [], 0.0, now
        return out

    async def aclose(self) -> None:
        self._closed = True
        await asyncio.gather(*(s.client.aclose() for s in self.servers), return_exceptions=True)
