"""The fake vLLM servers of ``fake_vllm`` on real TCP ports, for tests whose requests come from other processes
(rollout workers, Ray actors) that an in-process transport cannot reach.

``ServedCluster(n, **kwargs)`` (a context manager) serves ``n`` ``FakeVLLM`` on ``127.0.0.1`` from an event loop in
a thread of its own, speaking HTTP/1.1 with ``h11`` (httpx's own parser). A server whose ``down`` is set, or whose
handler raises a transport error (``die_after``), drops the connection without an answer, as a dead server does.

For the tests of rollout workers' direct calls: ``TrainerSpy`` (the trainer's transport, its completions counted),
``service`` (a ``VLLMService`` over a cluster), ``play`` (episodes in a pool's workers, at once) and ``expected``
(the ids a ``workers_harness.SamplingEpisode`` gets).
"""

from __future__ import annotations

import asyncio
import threading

import h11
import httpx
from fake_vllm import FakeVLLM, tokens

from platoon.live.inference.vllm import VLLMService
from platoon.live.inference.weights import WeightStore
from platoon.live.rollouts.workflow import _FirstCall


class ServedCluster:
    def __init__(self, n: int = 1, **kwargs) -> None:
        self.servers = [FakeVLLM("", **kwargs) for _ in range(n)]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="fake-vllm-http")

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def __enter__(self) -> ServedCluster:
        self._thread.start()
        self._listeners = [asyncio.run_coroutine_threadsafe(self._listen(s), self._loop).result(10)
                           for s in self.servers]
        return self

    def __exit__(self, *exc) -> None:
        async def stop():
            for listener in self._listeners:
                listener.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _listen(self, fake: FakeVLLM) -> asyncio.Server:
        listener = await asyncio.start_server(lambda r, w: _serve(fake, r, w), "127.0.0.1", 0)
        fake.url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
        return listener


async def _serve(fake: FakeVLLM, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            request, body = await _request(conn, reader)
            if request is None:
                return
            if fake.down:
                return
            url = f"{fake.url}{request.target.decode()}"
            try:
                answer = await fake.handle(httpx.Request(request.method.decode(), url, headers=request.headers,
                                                         content=body))
            except httpx.TransportError:
                return
            headers = [(k, v) for k, v in answer.headers.items() if k.lower() != "content-length"]
            content = answer.content
            writer.write(conn.send(h11.Response(status_code=answer.status_code,
                                                headers=[*headers, ("content-length", str(len(content)))])))
            writer.write(conn.send(h11.Data(data=content)) + conn.send(h11.EndOfMessage()))
            await writer.drain()
            conn.start_next_cycle()
    except (ConnectionError, h11.ProtocolError, asyncio.CancelledError):
        return
    finally:
        writer.close()


async def _request(conn: h11.Connection, reader: asyncio.StreamReader) -> tuple[h11.Request | None, bytes]:
    request, body = None, b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(65536)
            conn.receive_data(data)
            if not data and conn.their_state is not h11.DONE:
                return None, b""
            continue
        if isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return request, body
        elif isinstance(event, h11.ConnectionClosed):
            return None, b""


class TrainerSpy(httpx.AsyncBaseTransport):
    """The trainer's transport to the servers: real HTTP, each completion it posts counted."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.completions = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.completions += request.url.path == "/v1/completions"
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def service(cluster: ServedCluster, tmp_path, spy: TrainerSpy, **kwargs) -> VLLMService:
    kwargs.setdefault("recheck_s", 0.2)
    return VLLMService(cluster.urls, served_name="the-model", weights=WeightStore(tmp_path / "weights", tmp_path),
                       transport=spy, **kwargs)


async def play(pool, svc, episodes, *, during=None):
    """Each episode in a worker, at once, each its own rollout (its own ``_FirstCall``); their values."""
    warnings = []
    runs = [pool.run_job(e, {}, _FirstCall(svc, on_first_call=lambda: None), warn=warnings.append,
                         first_call=lambda: None) for e in episodes]
    try:
        if during is not None:
            runs.append(during())
        return await asyncio.gather(*runs)
    finally:
        await pool.aclose()
        await svc.aclose()


def expected(first: int, version: int, turns: int) -> list[tuple[int, ...]]:
    out, prompt = [], [first]
    for turn in range(turns):
        t = tuple(tokens(prompt, 10 + turn, version, 3))
        out.append(t)
        prompt += list(t)
    return out
