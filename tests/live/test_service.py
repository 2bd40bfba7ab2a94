"""The batching model service: dynamic batches, a loop that never blocks, versions across publishes, failures."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
from live_harness import run_virtual

from platoon.live.inference.model import TinyConfig, TinyPolicy
from platoon.live.inference.service import BatchingModelService, FakeModelService, ModelService, Sample

PROMPT = [1, 5, 2]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny(seed: int = 0) -> TinyPolicy:
    p = TinyPolicy(TinyConfig(vocab_size=20, max_len=16), device="cpu", seed=seed)
    with torch.no_grad():
        p.module.head.weight.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(seed))
    return p


class Gated:
    """A policy whose batches wait for the test to open a gate; it records each batch and each weight load."""

    def __init__(self, policy: TinyPolicy, *, gated: bool = True) -> None:
        self.policy = policy
        self.max_len, self.vocab_size = policy.max_len, policy.vocab_size
        self.gate = threading.Semaphore(0) if gated else None
        self.entered = threading.Semaphore(0)
        self.log: list[tuple] = []
        self.fail_next = False

    def check_prompts(self, prompts, limits):
        self.policy.check_prompts(prompts, limits)

    def sample(self, prompts, **kw):
        self.entered.release()
        if self.gate is not None:
            self.gate.acquire()
        self.log.append(("batch", len(prompts)))
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("model fell over")
        return self.policy.sample(prompts, **kw)

    def load_state_dict(self, state):
        self.log.append(("load",))
        self.policy.load_state_dict(state)


async def wait_entered(model: Gated) -> None:
    """Until the worker has entered a batch (without blocking the loop)."""
    await asyncio.to_thread(model.entered.acquire)


def test_it_is_a_model_service():
    assert isinstance(BatchingModelService(tiny()), ModelService)
    assert isinstance(FakeModelService([[1]]), ModelService)


def test_concurrent_requests_share_batches_and_sample_as_they_would_alone():
    policy = tiny()

    async def main():
        service = BatchingModelService(policy, max_batch=256)
        prompts = [[1, 3 + i % 7, 2] for i in range(64)]
        samples = await asyncio.gather(*(service.sample(p, max_new_tokens=3, temperature=1.0, seed=i)
                                         for i, p in enumerate(prompts)))
        stats = service.stats()
        await service.aclose()
        return prompts, samples, stats

    prompts, samples, stats = asyncio.run(main())
    assert stats["requests"] == 64 and stats["batches"] < 64 and stats["largest_batch"] > 1
    assert stats["tokens"] == 64 * 3
    for i, (p, s) in enumerate(zip(prompts, samples, strict=True)):
        alone = policy.sample([p], max_new_tokens=3, temperature=1.0, seeds=[i])[0]
        assert s.tokens == alone.tokens and s.version == 0
        assert s.logprobs == pytest.approx(alone.logprobs, abs=1e-5)


def test_whatever_is_queued_when_the_model_is_free_is_one_batch_up_to_max_batch():
    model = Gated(tiny())

    async def main():
        service = BatchingModelService(model, max_batch=4)
        first = asyncio.ensure_future(service.sample(PROMPT, max_new_tokens=1, temperature=1.0, seed=0))
        await wait_entered(model)                      # batch 1 holds the first request alone
        rest = [asyncio.ensure_future(service.sample(PROMPT, max_new_tokens=1, temperature=1.0, seed=i))
                for i in range(1, 11)]
        await asyncio.sleep(0)
        for _ in range(4):
            model.gate.release()
        await asyncio.gather(first, *rest)
        await service.aclose()

    asyncio.run(main())
    assert model.log == [("batch", 1), ("batch", 4), ("batch", 4), ("batch", 2)]


def test_the_event_loop_keeps_running_while_a_batch_computes():
    model = Gated(tiny())
    ticks = []

    async def ticker(stop: asyncio.Event):
        while not stop.is_set():
            ticks.append(1)
            await asyncio.sleep(0.001)

    async def main():
        service = BatchingModelService(model)
        stop = asyncio.Event()
        tick = asyncio.ensure_future(ticker(stop))
        request = asyncio.ensure_future(service.sample(PROMPT, max_new_tokens=2, temperature=1.0, seed=0))
        await wait_entered(model)
        before = len(ticks)
        await asyncio.sleep(0.05)                      # the batch is still blocked in the worker thread
        during = len(ticks) - before
        assert not request.done()
        model.gate.release()
        await request
        stop.set()
        await tick
        await service.aclose()
        return during

    assert asyncio.run(main()) >= 2   # a blocked loop ticks not at all


def test_publish_lands_between_batches_and_samples_carry_their_version():
    model = Gated(tiny(0))
    new = tiny(1)

    async def main():
        service = BatchingModelService(model)
        old_batch = asyncio.ensure_future(service.sample(PROMPT, max_new_tokens=2, temperature=1.0, seed=5))
        await wait_entered(model)
        publish = asyncio.ensure_future(service.publish(new.state_dict(), 7))
        await asyncio.sleep(0.01)
        assert not publish.done() and service.version == 0   # the running batch finishes on the old weights
        model.gate.release()
        old = await old_batch
        await publish
        assert service.version == 7
        model.gate.release()
        fresh = await service.sample(PROMPT, max_new_tokens=2, temperature=1.0, seed=5)
        await service.aclose()
        return old, fresh

    old, fresh = asyncio.run(main())
    assert model.log == [("batch", 1), ("load",), ("batch", 1)]
    assert old.version == 0 and fresh.version == 7
    assert fresh.tokens == new.sample([PROMPT], max_new_tokens=2, temperature=1.0, seeds=[5])[0].tokens


def test_a_model_error_fails_its_batch_only_and_cancelled_requests_are_dropped():
    model = Gated(tiny())

    async def main():
        service = BatchingModelService(model)
        blocker = asyncio.ensure_future(service.sample(PROMPT, max_new_tokens=1, temperature=1.0, seed=0))
        await wait_entered(model)
        doomed = [asyncio.ensure_future(service.sample(PROMPT, max_new_tokens=1, temperature=1.0, seed=i))
                  for i in range(3)]
        cancelled = asyncio.ensure_future(service.sample(PROMPT, max_new_tokens=1, temperature=1.0, seed=9))
        await asyncio.sleep(0)
        cancelled.cancel()
        model.fail_next = False
        model.gate.release()
        await blocker
        model.fail_next = True
        model.gate.release()
        results = await asyncio.gather(*doomed, return_exceptions=True)
        model.gate.release()
        after = await service.sample(PROMPT, max_new_tokens=1, temperature=1.0, seed=0)
        await service.aclose()
        return results, after

    results, after = asyncio.run(main())
    assert all(isinstance(r, RuntimeError) and "fell over" in str(r) for r in results)
    assert model.log == [("batch", 1), ("batch", 3), ("batch", 1)]   # the cancelled request never ran
    assert isinstance(after, Sample) and len(after.tokens) == 1


def test_bad_requests_are_refused_up_front_and_a_closed_service_refuses_all():
    model = Gated(tiny())

    async def main():
        service = BatchingModelService(model)
        with pytest.raises(ValueError, match="exceeds"):
            await service.sample([1] * 15, max_new_tokens=5, temperature=1.0)
        with pytest.raises(ValueError, match="temperature"):
            await service.sample(PROMPT, max_new_tokens=1, temperature=-1.0)
        with pytest.raises(ValueError, match="max_new_tokens"):
            await service.sample(PROMPT, max_new_tokens=1.5, temperature=1.0)
        with pytest.raises(ValueError, match="stop sequence"):
            await service.sample(PROMPT, max_new_tokens=1, temperature=1.0, stop=[(3,), (20,)])
        running = asyncio.ensure_future(service.sample(PROMPT, max_new_tokens=1, temperature=1.0))
        await wait_entered(model)
        queued = asyncio.ensure_future(service.sample(PROMPT, max_new_tokens=1, temperature=1.0))
        await asyncio.sleep(0)
        closing = asyncio.ensure_future(service.aclose())
        await asyncio.sleep(0.01)
        model.gate.release()
        await closing
        with pytest.raises(RuntimeError, match="closed"):
            await service.sample(PROMPT, max_new_tokens=1, temperature=1.0)
        with pytest.raises(RuntimeError, match="closed"):
            await service.publish({}, 1)
        return await asyncio.gather(running, queued, return_exceptions=True)

    running, queued = asyncio.run(main())
    assert isinstance(running, RuntimeError) and isinstance(queued, RuntimeError)
    assert model.log == [("batch", 1)]


def test_requests_without_a_seed_get_one_from_their_arrival_number():
    async def run():
        service = BatchingModelService(tiny(), seed=3)
        out = await asyncio.gather(*(service.sample(PROMPT, max_new_tokens=4, temperature=1.0) for _ in range(8)))
        await service.aclose()
        return [s.tokens for s in out]

    a, b = asyncio.run(run()), asyncio.run(run())
    assert a == b and len(set(a)) > 1


def test_a_collection_window_gathers_requests_that_arrive_apart():
    async def run(window_s: float):
        service = BatchingModelService(tiny(), window_s=window_s)
        first = asyncio.ensure_future(service.sample(PROMPT, max_new_tokens=1, temperature=1.0, seed=0))
        await asyncio.sleep(0.002)
        second = await service.sample(PROMPT, max_new_tokens=1, temperature=1.0, seed=1)
        await first
        batches = service.stats()["batches"]
        await service.aclose()
        return batches, second

    # virtual time: the second request comes 2 ms after the first (the clock stands still while a batch computes)
    assert run_virtual(run(0.0))[0] == 2
    assert run_virtual(run(0.5))[0] == 1


def test_a_completion_stops_after_a_stop_sequence_which_it_keeps():
    policy = tiny()

    async def main():
        service = BatchingModelService(policy)
        free = await service.sample(PROMPT, max_new_tokens=6, temperature=1.0, seed=5)
        pair = free.tokens[1:3]
        cut = await service.sample(PROMPT, max_new_tokens=6, temperature=1.0, seed=5, stop=[pair])
        await service.aclose()
        fake = FakeModelService([[4, 5, 6, 5, 6]])
        scripted = await fake.sample([1], max_new_tokens=9, temperature=1.0, stop=[(5, 6), (9,)])
        return free, pair, cut, scripted

    free, pair, cut, scripted = asyncio.run(main())
    end = next(i + 2 for i in range(len(free.tokens) - 1) if free.tokens[i:i + 2] == pair)
    assert cut.tokens == free.tokens[:end] and cut.tokens[-2:] == pair
    assert scripted.tokens == (4, 5, 6)


def test_the_fake_service_follows_its_script():
    async def main():
        fake = FakeModelService(lambda prompt, seed: [len(prompt), seed % 7], logprob=-0.5, version=2)
        s = await fake.sample([1, 2, 3], max_new_tokens=1, temperature=1.0, seed=10)
        assert s == Sample((3,), (-0.5,), 2)
        await fake.publish({}, 3)
        listed = FakeModelService([[4, 5], [6]])
        got = [await listed.sample([1], max_new_tokens=5, temperature=1.0) for _ in range(2)]
        with pytest.raises(RuntimeError, match="no more outputs"):
            await listed.sample([1], max_new_tokens=5, temperature=1.0)
        await fake.aclose()
        with pytest.raises(RuntimeError, match="closed"):
            await fake.sample([1], max_new_tokens=1, temperature=1.0)
        return fake, got

    fake, got = asyncio.run(main())
    assert fake.published == [3] and fake.version == 3
    assert fake.calls == [{"prompt": (1, 2, 3), "max_new_tokens": 1, "temperature": 1.0, "seed": 10, "stop": ()}]
    assert [g.tokens for g in got] == [(4, 5), (6,)] and got[0].logprobs == (-1.0, -1.0)


def test_a_service_serves_one_event_loop_after_another():
    service = BatchingModelService(tiny())

    async def one(seed):
        return await service.sample(PROMPT, max_new_tokens=2, temperature=1.0, seed=seed)

    first, second = asyncio.run(one(1)), asyncio.run(one(1))
    assert first == second and service.stats()["batches"] == 2


def test_an_observer_sees_each_batch_on_the_loops_thread_timed_in_the_worker():
    # the gated model holds batch 1 (one request) while four more queue: they are batch 2. The observer's clock
    # counts its readings, so each span's start and end are the worker's readings around the forward pass alone.
    model = Gated(tiny())
    readings: list[str] = []
    seen: list[tuple] = []

    def clock() -> float:
        readings.append(threading.current_thread().name)
        return float(len(readings))

    async def main():
        service = BatchingModelService(model, max_batch=8)
        loop_thread = threading.current_thread().name
        service.observe_batches(lambda span: seen.append((span, threading.current_thread().name == loop_thread)),
                                clock)
        first = asyncio.ensure_future(service.sample([1, 2], max_new_tokens=2, temperature=1.0, seed=0))
        await wait_entered(model)
        rest = [asyncio.ensure_future(service.sample([1, 2, 3], max_new_tokens=1, temperature=1.0, seed=i))
                for i in range(1, 5)]
        await asyncio.sleep(0)
        model.gate.release()
        model.gate.release()
        samples = await asyncio.gather(first, *rest)
        service.observe_batches(None)
        await asyncio.gather(service.sample([1], max_new_tokens=1, temperature=1.0, seed=9), _release(model))
        await service.aclose()
        return samples

    samples = asyncio.run(main())
    assert [s.batch_size for s in samples] == [1, 4, 4, 4, 4]
    assert [(span.size, span.prompt_tokens, span.new_tokens) for span, _ in seen] == [(1, 2, 2), (4, 12, 4)]
    assert [(span.start_s, span.end_s) for span, _ in seen] == [(1.0, 2.0), (3.0, 4.0)]
    assert all(on_loop for _, on_loop in seen) and all(name.startswith("platoon-model") for name in readings)
    assert len(readings) == 4  # nothing read once the observer was gone


async def _release(model: Gated) -> None:
    await wait_entered(model)
    model.gate.release()
