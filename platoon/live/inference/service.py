"""The model service: rollouts ask it for tokens; the built-in one batches their requests into one forward pass.

``ModelService`` is the narrow protocol a rollout sees: ``await sample(prompt, max_new_tokens=, temperature=)``
returns a ``Sample`` (tokens, their sampling log-probabilities, and the policy version that produced them), and
``await publish(state_dict, version)`` puts new weights live. ``BatchingModelService`` serves a ``PolicyModel`` in
process; ``FakeModelService`` answers from a script, for tests.

Rules ``BatchingModelService`` keeps:
- **dynamic batching**: requests queue as they come; whenever the model is free, one batch takes what is queued,
  oldest first, up to ``max_batch`` sequences (after an optional collection window of ``window_s`` seconds, 0 by
  default: "whatever is queued when the model is free"). Requests with different limits, temperatures and seeds
  share a batch;
- the model runs in **one worker thread** (a single-thread executor), never on the event loop; batches and weight
  loads run there one at a time, in the order they were submitted, so ``publish`` takes effect **between
  batches**: a batch runs wholly on the old weights or wholly on the new ones, and every ``Sample`` records the
  version of the weights its batch ran on;
- a request's tokens depend on its ``seed`` only, not on what it was batched with (see
  ``platoon.live.inference.model``); a request without a seed gets ``derive_seed(service seed, arrival number)``;
- a request is checked when it is made (``ValueError``), so that one bad request never fails a batch; a model error
  fails the requests of its batch only; a cancelled request is dropped, before or after its batch;
- ``aclose`` fails the requests still queued with ``RuntimeError`` and waits for the running batch;
- **observing** (``observe_batches``, the run's timeline): each batch that ran is reported on the event loop's
  thread as a ``BatchSpan``, its start and end read from the observer's clock in the worker, around the forward pass
  alone; every ``Sample`` carries the size of the batch it ran in (``batch_size``);
- **routing ids**: a ``Sample`` carries the routing id of its sequence when the model's generation has one
  (``routing_id``, as a mixture-of-experts model served with rollout routing replay would); the built-in models are
  dense and send none (``platoon.policy.routing_ids`` says what a run warns of).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

from platoon.live.inference.model import derive_seed

__all__ = ["BatchSpan", "BatchingModelService", "FakeModelService", "ModelService", "Sample", "cut_at_stop",
           "rollout_session"]

rollout_session: ContextVar[object | None] = ContextVar("platoon_rollout_session", default=None)
"""The rollout a ``sample`` call is made for (an object, weakly referable, that lives as long as the rollout; None:
not known). A
service with several servers keeps a rollout on one across its turns (its prefix cache)."""


@dataclass(frozen=True)
class Sample:
    """What one request got: the sampled tokens, their log-probabilities, the policy version that sampled them."""

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    version: int
    #: The sequences of the batch it ran in (0: not known, as from a service that does not batch).
    batch_size: int = field(default=0, compare=False)
    #: The routing id of the sampled sequence: what a server with rollout routing replay (R3) sends for a
    #: mixture-of-experts model, so that the trainer can replay its experts' choice; None from a dense model's.
    routing_id: str | None = field(default=None, compare=False)
    #: The policy versions its tokens came from, oldest first, when a weight update fell inside the request (an
    #: inference server that kept it through the update); empty: ``version`` alone. ``version`` is the oldest.
    versions: tuple[int, ...] = field(default=(), compare=False)
    #: The inference server that answered (its index among the engine's servers); None: the built-in service.
    server: int | None = field(default=None, compare=False)
    #: The requests in flight at that server on average while this one ran, itself included (0: not known).
    concurrency: float = field(default=0.0, compare=False)


class BatchSpan(NamedTuple):
    """One batched forward pass: its start and end on the observer's clock, its sequences, the prompts' tokens and
    the tokens it generated."""

    start_s: float
    end_s: float
    size: int
    prompt_tokens: int
    new_tokens: int


@runtime_checkable
class ModelService(Protocol):
    """What a rollout and a runtime need of a model service."""

    @property
    def version(self) -> int:
        """The policy version of the weights that the next batch will run on."""
        ...

    async def sample(self, prompt_tokens: Sequence[int], *, max_new_tokens: int, temperature: float,
                     seed: int | None = None, stop: Collection[Sequence[int]] = ()) -> Sample:
        ...

    async def publish(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Make ``state_dict`` the live weights, as policy ``version``; returns once they are live."""
        ...

    async def aclose(self) -> None:
        ...


@dataclass
class _Request:
    prompt: tuple[int, ...]
    max_new_tokens: int
    temperature: float
    seed: int
    stop: tuple[tuple[int, ...], ...]
    future: asyncio.Future = field(repr=False)


class BatchingModelService:
    """Serves a ``PolicyModel`` to many concurrent rollouts with dynamic batching (see the module's doc)."""

    def __init__(self, policy: Any, *, max_batch: int = 256, window_s: float = 0.0, seed: int = 0,
                 version: int = 0) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        if window_s < 0:
            raise ValueError(f"window_s must be at least 0, got {window_s}")
        self.policy = policy
        self.max_batch = int(max_batch)
        self.window_s = float(window_s)
        self.seed = seed
        self._version = int(version)
        self._queue: deque[_Request] = deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="platoon-model")
        self._arrivals = 0
        self._closed = False
        self.batches = 0
        self.requests = 0
        self.tokens = 0
        self.largest_batch = 0
        self.busy_s = 0.0
        self._on_batch: Callable[[BatchSpan], None] | None = None
        self._clock: Callable[[], float] = time.monotonic

    def observe_batches(self, on_batch: Callable[[BatchSpan], None] | None,
                        clock: Callable[[], float] | None = None) -> None:
        """Call ``on_batch(span)`` on the event loop's thread after each batch that ran (None: stop). ``clock`` is read
        in the worker thread, so it must be safe to call from any thread (default ``time.monotonic``)."""
        self._on_batch = on_batch
        self._clock = clock or time.monotonic

    @property
    def version(self) -> int:
        return self._version

    def stats(self) -> dict[str, float]:
        """Counters since the start: batches, requests, generated tokens, the mean and largest batch, and the
        seconds the worker spent in the model."""
        return {"batches": float(self.batches), "requests": float(self.requests), "tokens": float(self.tokens),
                "mean_batch": self.requests / self.batches if self.batches else 0.0,
                "largest_batch": float(self.largest_batch), "busy_s": self.busy_s}

    async def sample(self, prompt_tokens: Sequence[int], *, max_new_tokens: int, temperature: float,
                     seed: int | None = None, stop: Collection[Sequence[int]] = ()) -> Sample:
        """Queue one request and wait for its batch. The completion ends after ``max_new_tokens`` tokens or once it
        ends with one of the ``stop`` sequences (token ids, kept in the completion). Raises ``ValueError`` for a
        request the model cannot serve
        and ``RuntimeError`` once the service is closed."""
        if self._closed:
            raise RuntimeError("sample: the model service is closed")
        prompt = tuple(int(t) for t in prompt_tokens)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
            raise ValueError(f"sample: max_new_tokens must be an int, got {max_new_tokens!r}")
        if not temperature >= 0:
            raise ValueError(f"sample: temperature must be at least 0, got {temperature!r}")
        self.policy.check_prompts([prompt], [max_new_tokens])
        stop = tuple(tuple(int(t) for t in seq) for seq in stop)
        if any(not seq or min(seq) < 0 or max(seq) >= self.policy.vocab_size for seq in stop):
            raise ValueError(f"sample: a stop sequence must be non-empty ids in 0..{self.policy.vocab_size - 1}")
        if seed is None:
            seed = derive_seed(self.seed, "request", self._arrivals)
        self._arrivals += 1
        loop = asyncio.get_running_loop()
        self._start(loop)
        future = loop.create_future()
        self._queue.append(_Request(prompt, max_new_tokens, float(temperature), int(seed),
                                    stop, future))
        self._wake.set()
        return await future

    async def publish(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Load the weights in the worker, after the batches already submitted and before any later one."""
        if self._closed:
            raise RuntimeError("publish: the model service is closed")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._load, dict(state_dict), int(version))

    async def aclose(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        while self._queue:
            request = self._queue.popleft()
            if not request.future.done():
                request.future.set_exception(RuntimeError("the model service closed before this request ran"))
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)

    # --- the batcher (event loop) and the worker (its thread) ------------------------------------------------

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        # A batcher of an earlier event loop (a service reused across asyncio.run calls) never runs again.
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._batcher(), name="platoon-model-batcher")

    async def _batcher(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
            if self.window_s > 0:
                await asyncio.sleep(self.window_s)
            batch: list[_Request] = []
            while self._queue and len(batch) < self.max_batch:
                request = self._queue.popleft()
                if not request.future.done():
                    batch.append(request)
            if not batch:
                continue
            try:
                generations, version, span = await loop.run_in_executor(self._executor, self._generate, batch)
            except asyncio.CancelledError:
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(RuntimeError("the model service closed during this batch"))
                raise
            except Exception as exc:  # noqa: BLE001 - the batch's requests get the model's error
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(exc)
                continue
            if span is not None and self._on_batch is not None:
                self._on_batch(span)
            for request, gen in zip(batch, generations, strict=True):
                if not request.future.done():
                    request.future.set_result(Sample(gen.tokens, gen.logprobs, version, len(batch),
                                                     getattr(gen, "routing_id", None)))

    def _generate(self, batch: list[_Request]) -> tuple[list[Any], int, BatchSpan | None]:
        observed = self._on_batch is not None
        clock = self._clock
        began = clock() if observed else 0.0
        started = time.perf_counter()
        version = self._version
        generations = self.policy.sample(
            [r.prompt for r in batch],
            max_new_tokens=[r.max_new_tokens for r in batch],
            temperature=[r.temperature for r in batch],
            seeds=[r.seed for r in batch],
            stop=[r.stop for r in batch],
        )
        ended = clock() if observed else 0.0
        self.busy_s += time.perf_counter() - started
        self.batches += 1
        self.requests += len(batch)
        self.largest_batch = max(self.largest_batch, len(batch))
        new_tokens = sum(len(g.tokens) for g in generations)
        self.tokens += new_tokens
        if not observed:
            return generations, version, None
        span = BatchSpan(began, ended, len(batch), sum(len(r.prompt) for r in batch), new_tokens)
        return generations, version, span

    def _load(self, state_dict: dict[str, Any], version: int) -> None:
        self.policy.load_state_dict(state_dict)
        self._version = version


class FakeModelService:
    """A scripted service for tests: ``script(prompt, seed)`` gives the tokens of each request, or ``script`` is a
    sequence of token lists handed out in call order (cut at ``max_new_tokens`` and after a ``stop`` sequence). Each
    token's log-probability is ``logprob``; ``delay_s`` makes each request take that long (``asyncio.sleep``).
    ``routing_ids(prompt, seed)`` gives each request's routing id (None: none; default: none for any). ``calls``
    records every request; ``published`` every version published."""

    def __init__(self, script: Callable[[tuple[int, ...], int | None], Sequence[int]] | Sequence[Sequence[int]],
                 *, logprob: float = -1.0, version: int = 0, delay_s: float = 0.0,
                 routing_ids: Callable[[tuple[int, ...], int | None], str | None] | None = None) -> None:
        self._script = script
        self._routing_ids = routing_ids
        self._scripted = None if callable(script) else deque(tuple(s) for s in script)
        self.logprob = float(logprob)
        self._version = int(version)
        self.delay_s = float(delay_s)
        self.calls: list[dict[str, Any]] = []
        self.published: list[int] = []
        self.closed = False

    @property
    def version(self) -> int:
        return self._version

    async def sample(self, prompt_tokens: Sequence[int], *, max_new_tokens: int, temperature: float,
                     seed: int | None = None, stop: Collection[Sequence[int]] = ()) -> Sample:
        if self.closed:
            raise RuntimeError("sample: the model service is closed")
        prompt = tuple(prompt_tokens)
        self.calls.append({"prompt": prompt, "max_new_tokens": max_new_tokens, "temperature": temperature,
                           "seed": seed, "stop": tuple(tuple(s) for s in stop)})
        version = self._version
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self._scripted is not None:
            if not self._scripted:
                raise RuntimeError("FakeModelService: the script has no more outputs")
            tokens = self._scripted.popleft()
        else:
            tokens = tuple(self._script(prompt, seed))
        tokens = cut_at_stop(tuple(tokens)[:max_new_tokens], stop)
        routing_id = self._routing_ids(prompt, seed) if self._routing_ids is not None else None
        return Sample(tokens, (self.logprob,) * len(tokens), version, routing_id=routing_id)

    async def publish(self, state_dict: Mapping[str, Any], version: int) -> None:
        self._version = int(version)
        self.published.append(int(version))

    async def aclose(self) -> None:
        self.closed = True


def cut_at_stop(tokens: tuple[int, ...], stop: Collection[Sequence[int]]) -> tuple[int, ...]:
    """``tokens`` up to and including the first place where they end with a stop sequence."""
    for end in range(1, len(tokens) + 1):
        if any(len(s) and tuple(tokens[max(0, end - len(s)):end]) == tuple(s) for s in stop):
            return tokens[:end]
    return tokens
