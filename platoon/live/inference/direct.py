"""A rollout worker's model calls made straight to the vLLM servers, the trainer deciding where and accounting.

Under ``rollout_isolation: process`` or ``ray`` with ``train.inference.engine: vllm``, a worker's prompts and
completions need not cross the trainer: the worker sends a ``sample`` to the server itself, while the trainer's
``VLLMService`` still decides everything else, as for its own requests (``VLLMService.sample_placed``): the
server (a rollout keeps its own; a new one goes to the least loaded), the wait through a weight sync, the retries
on another server, the seed, the policy version the tokens came from, the accounting and the trace. One call runs:

1. the worker builds the request's body (``completion_payload``; a bad argument fails here) and keeps it;
2. it sends the trainer ``("call", i, "sample_placed", (), {"seed": seed})`` over its connection;
3. for each try, the trainer sends ``("post", i, url, seed)``; the worker posts the body to that server and answers
   ``("posted", i, "ok", {"finish_reason", "routing_id"})``, or ``("posted", i, "failed", text)`` (the server did
   not answer: the trainer retries elsewhere), ``("posted", i, "refused", text)`` (4xx) or ``("posted", i, "error",
   exception)``;
4. the trainer's reply is the ``Placement``; the worker turns its kept answer into the ``Sample``.

So the bytes of a prompt and its completion go between the worker and the server once, and the trainer handles a
few small messages per call. A worker calls directly only where it reaches the servers: ``DirectTarget.reachable``
is false for a server on loopback (``127.0.0.1``, ``localhost``) from a worker outside the trainer's network
namespace (a Ray actor on another machine); such a worker's calls go through the trainer as before.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from platoon.live.inference.completions import (
    InferenceError,
    Placement,
    ServerFailed,
    Stops,
    completion_payload,
    first_choice,
    post_json,
    routing_id,
    sample_of,
)

__all__ = ["DirectCalls", "DirectTarget", "Posts", "network_home"]

_LOOPBACK = ("localhost", "0.0.0.0", "::1", "::")


@dataclass(frozen=True)
class DirectTarget:
    """What a worker needs to call the servers itself: the servers, the served model's name, the timeouts, and
    the trainer's network home (``network_home``)."""

    urls: tuple[str, ...]
    served_name: str
    request_timeout_s: float
    connect_timeout_s: float
    home: str | None

    def reachable(self) -> bool:
        """Whether this process reaches every server as the trainer does (a loopback server: only from the
        trainer's network namespace)."""
        if not any(_loopback(url) for url in self.urls):
            return True
        return self.home is not None and network_home() == self.home


def _loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host in _LOOPBACK or host.startswith("127.")


def network_home() -> str | None:
    """This machine's boot and this process's network namespace (two processes that share it share their loopback
    interface); None where it cannot be read (not Linux)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}/{os.stat('/proc/self/ns/net').st_ino}"
    except OSError:
        return None


@dataclass
class _Request:
    payload: dict[str, Any]
    stops: Stops
    answer: Mapping[str, Any] | None = None
    try_: asyncio.Task | None = field(default=None, repr=False)


class DirectCalls:
    """The worker's end (see the module's doc): each call's body kept until the trainer says where to post it."""

    def __init__(self, target: DirectTarget) -> None:
        self.target = target
        self._requests: dict[int, _Request] = {}
        self._clients: dict[str, Any] = {}

    def prepare(self, i: int, prompt_tokens: Sequence[int], *, max_new_tokens: int, temperature: float,
                seed: int | None = None, stop: Collection[Sequence[int]] = ()) -> None:
        """Keep call ``i``'s body; ``ValueError`` for arguments no server could serve."""
        payload, stops = completion_payload(self.target.served_name, prompt_tokens, max_new_tokens=max_new_tokens,
                                            temperature=temperature, seed=seed, stop=stop)
        self._requests[i] = _Request(payload, stops)

    def post(self, i: int, url: str, seed: int, send: Callable[..., None]) -> None:
        """Post call ``i``'s body to ``url`` with ``seed`` and ``send`` the outcome (a task of its own)."""
        request = self._requests.get(i)
        if request is None:  # the call ended meanwhile (cancelled)
            return
        request.try_ = asyncio.ensure_future(self._try(i, request, url, seed, send))

    async def _try(self, i: int, request: _Request, url: str, seed: int, send: Callable[..., None]) -> None:
        try:
            body = await post_json(self._client(url), url, "/v1/completions", self.target.request_timeout_s,
                                   json={**request.payload, "seed": seed})
            request.answer = first_choice(body)
        except ServerFailed as exc:
            send("posted", i, "failed", str(exc))
        except InferenceError as exc:
            send("posted", i, "refused", str(exc))
        except Exception as exc:  # noqa: BLE001 - the trainer's call raises it
            from platoon.live.workers.channel import portable

            send("posted", i, "error", portable(exc))
        else:
            send("posted", i, "ok", {"finish_reason": request.answer.get("finish_reason"),
                                     "routing_id": routing_id(request.answer)})

    def sample(self, i: int, placement: Placement) -> Any:
        """Call ``i``'s ``Sample``: the answer its last try got, where the trainer placed it."""
        request = self._requests[i]
        if request.answer is None:
            raise InferenceError("the trainer placed a request its worker holds no answer to")
        return placement.sample(*sample_of(request.answer, request.payload["max_tokens"], request.stops))

    def forget(self, i: int) -> None:
        request = self._requests.pop(i, None)
        if request is not None and request.try_ is not None and not request.try_.done():
            request.try_.cancel()

    def _client(self, url: str) -> Any:
        client = self._clients.get(url)
        if client is None:
            import httpx

            client = self._clients[url] = httpx.AsyncClient(
                base_url=url, timeout=httpx.Timeout(self.target.request_timeout_s, connect=self.target.connect_timeout_s))
        return client

    async def aclose(self) -> None:
        for i in list(self._requests):
            self.forget(i)
        await asyncio.gather(*(c.aclose() for c in self._clients.values()), return_exceptions=True)
        self._clients.clear()


class Posts:
    """The trainer's end for one worker: ``poster(i)`` is the ``post`` that ``VLLMService.sample_placed`` tries a
    server with, carried out by the worker; ``answered`` takes the worker's ``("posted", ...)`` messages."""

    def __init__(self, send: Callable[..., None]) -> None:
        self._send = send
        self._waiting: dict[int, asyncio.Future] = {}

    def poster(self, i: int) -> Callable[[str, int], Any]:
        async def post(url: str, seed: int) -> Mapping[str, Any]:
            future = asyncio.get_running_loop().create_future()
            self._waiting[i] = future
            self._send("post", i, url, seed)
            try:
                kind, value = await future
            finally:
                self._waiting.pop(i, None)
            if kind == "ok":
                return value
            if kind == "failed":
                raise ServerFailed(value)
            if kind == "refused":
                raise InferenceError(value)
            raise value

        return post

    def answered(self, i: int, kind: str, value: Any) -> None:
        future = self._waiting.get(i)
        if future is not None and not future.done():
            future.set_result((kind, value))
