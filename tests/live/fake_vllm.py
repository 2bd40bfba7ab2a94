"""An in-process fake of vLLM's HTTP API, the endpoints and payloads ``platoon.live.inference`` uses, for unit tests.

``FakeCluster(n)`` is ``n`` servers behind one ``httpx.MockTransport`` (``cluster.transport``), at
``http://fake<i>:8000``. Each ``FakeVLLM`` answers ``/v1/models`` (``served``), ``/health``, ``/v1/completions``
(token ids in; ``tokens(prompt, seed, version)`` out, one log-probability ``-0.5 - version`` each, ``token_ids`` and
``logprobs.token_logprobs`` as vLLM has them, after ``delay_s``), ``/pause`` (``abort``: the requests in flight end
with ``finish_reason: abort``; ``keep``: they wait for ``/resume``), ``/resume``, ``/collective_rpc``
(``reload_weights`` with ``weights_path``: the version read from the path's name), ``/update_weight_version``.
Faults: ``down`` (every request is refused a connection), ``hang`` (a completion never answers), ``die_after``
(the n-th completion from now ends the connection mid-request), ``status`` (completions answer that HTTP code).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

import httpx

VOCAB = 50


def tokens(prompt: list[int], seed: int, version: int, n: int) -> list[int]:
    """The fake model's completion: a function of the prompt, the seed and the weights' version."""
    base = sum(prompt) * 31 + seed * 7 + version * 13
    return [(base + i * 17) % VOCAB for i in range(n)]


@dataclass
class FakeVLLM:
    url: str
    served: str = "the-model"
    version: int = 0
    loaded: list[str] = field(default_factory=list)  # the weights_path of each reload
    requests: list[dict] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # every endpoint called, in order
    delay_s: float = 0.0
    down: bool = False
    hang: bool = False
    die_after: int | None = None
    status: int | None = None
    routed: object = None
    paused: str | None = None
    _resumed: asyncio.Event | None = None
    _aborted: asyncio.Event | None = None

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        self.calls.append(path)
        if path == "/health":
            return httpx.Response(200)
        if path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": self.served, "object": "model"}]})
        if path == "/v1/completions":
            return await self._complete(request, json.loads(request.content))
        if path == "/pause":
            self.paused = request.url.params.get("mode", "abort")
            self._resumed = asyncio.Event()
            if self.paused == "abort" and self._aborted is not None:
                self._aborted.set()
            return httpx.Response(200, json={"status": "paused"})
        if path == "/resume":
            self.paused = None
            self._aborted = asyncio.Event()  # the next pause aborts the requests in flight then
            if self._resumed is not None:
                self._resumed.set()
            return httpx.Response(200, json={"status": "resumed"})
        if path == "/collective_rpc":
            body = json.loads(request.content)
            assert body["method"] == "reload_weights", body
            weights = body["kwargs"]["weights_path"]
            assert (Path(weights) / "model.safetensors").is_file(), weights
            self.loaded.append(weights)
            self.version = int(Path(weights).name[1:])
            return httpx.Response(200, json={"results": [None]})
        if path == "/update_weight_version":
            assert json.loads(request.content)["new_version"] == str(self.version)
            return httpx.Response(200, json={"success": True})
        return httpx.Response(404, json={"detail": "Not Found"})

    async def _complete(self, request: httpx.Request, body: dict) -> httpx.Response:
        self.requests.append(body)
        if self.status is not None:
            return httpx.Response(self.status, json={"error": {"message": "fake failure"}})
        if self.die_after is not None:
            self.die_after -= 1
            if self.die_after < 0:
                self.die_after = None
                await asyncio.sleep(self.delay_s / 2)
                raise httpx.ReadError("server closed the connection mid-request", request=request)
        if self.hang:
            await asyncio.sleep(3600)
        version = self.version
        self._aborted = self._aborted or asyncio.Event()
        if self.delay_s:
            aborted = asyncio.ensure_future(self._aborted.wait())
            done, _ = await asyncio.wait({aborted}, timeout=self.delay_s)
            aborted.cancel()
            if done:
                return httpx.Response(200, json=_answer([], [], "abort", None))
        if self.paused == "keep" and self._resumed is not None:
            await self._resumed.wait()
        n = body["max_tokens"]
        out = tokens(body["prompt"], body["seed"], version, n)
        stops = set(body.get("stop_token_ids") or ())
        for i, t in enumerate(out):
            if t in stops:
                out = out[:i + 1]
                break
        return httpx.Response(200, json=_answer(out, [-0.5 - self.version] * len(out), "length", self.routed))


def _answer(token_ids: list[int], logprobs: list[float], finish: str, routed: object) -> dict:
    return {"id": "cmpl-1", "object": "text_completion", "model": "the-model", "choices": [{
        "index": 0, "text": "", "finish_reason": finish, "token_ids": token_ids, "routed_experts": routed,
        "logprobs": {"tokens": [f"token_id:{t}" for t in token_ids], "token_logprobs": logprobs},
    }]}


class FakeCluster:
    """``n`` fake servers behind one transport (see the module's doc)."""

    def __init__(self, n: int = 1, **kwargs) -> None:
        self.servers = [FakeVLLM(f"http://fake{i}:8000", **kwargs) for i in range(n)]
        by_host = {f"fake{i}": s for i, s in enumerate(self.servers)}
        self.transport = httpx.MockTransport(lambda request: by_host[request.url.host].handle(request))

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]
