"""Evaluation's rollouts in rollout workers (``rollout_isolation: process``): each held-out episode plays in a worker,
with the outcomes, requests, start slots and routing ids it has in process, and a cancelled evaluation leaves no worker
and nothing in scratch."""

from __future__ import annotations

import asyncio
import os
import re
import time

import pytest
from config_kit import schema_config

from platoon.live.agent.harness import default_renderer
from platoon.live.envs import NumberSearch
from platoon.live.inference.service import FakeModelService
from platoon.live.rollouts.evaluate import evaluate_rollouts
from platoon.live.workers import EnvSpec, WorkerPool, preload_plan
from platoon.policy.routing_ids import RoutingIdWatch

pytestmark = pytest.mark.live

ENV = NumberSearch(ranges=[8, 16])
SPECS = {"e": EnvSpec("platoon-number-search", {"ranges": [8, 16]}, None, ("val",))}
TOK = default_renderer([ENV]).tokenizer


def binary_guess(text: str) -> int:
    """Binary search's next guess from a rendered number_search conversation."""
    lo, hi = 1, int(re.search(r"from 1 to (\d+)", text).group(1))
    for guess, answer in re.findall(r"guess (\d+) <eot> tool: (higher|lower)", text):
        lo, hi = (int(guess) + 1, hi) if answer == "higher" else (lo, int(guess) - 1)
    return (lo + hi) // 2


def scripted(**kwargs) -> FakeModelService:
    """Binary search, except a turn whose seed is a multiple of 4 guesses 1: some episodes pass, some fail."""
    return FakeModelService(
        lambda prompt, seed: TOK.encode(f"guess {binary_guess(TOK.decode(prompt)) if seed % 4 else 1} <eot>"),
        **kwargs)


class Slots:
    """``EvalSlots`` that record what is taken and given back, and what is warned about."""

    def __init__(self) -> None:
        self.taken, self.released, self.warnings = [], [], []

    async def take(self, index: int) -> float:
        self.taken.append(index)
        return 0.0

    def release(self, index: int, reason: str) -> None:
        self.released.append((index, reason))

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def inform(self, message: str) -> None:
        self.warnings.append(message)


def pool(tmp_path, **kwargs) -> WorkerPool:
    return WorkerPool(env_specs=SPECS, plan=preload_plan(SPECS, {"e": ENV}), scratch=tmp_path / "scratch", **kwargs)


def evaluation(workers, n=24, **service_kwargs):
    """One evaluation of ``n`` episodes (in ``workers``, or in process when None): its result, the requests the
    service got (by seed), the slots' record and the routing-id watch's metrics."""
    service, slots, routing = scripted(**service_kwargs), Slots(), RoutingIdWatch("eval")

    async def run():
        try:
            return await evaluate_rollouts(service, ENV, "val", n, seed=5, concurrency=7, slots=slots,
                                           routing=routing, workers=workers, entry="e")
        finally:
            if workers is not None:
                await workers.aclose()

    result = asyncio.run(run())
    return result, sorted((c["seed"], c["prompt"]) for c in service.calls), slots, routing.metrics()


def test_evaluation_in_workers_scores_and_samples_as_in_process(tmp_path):
    workers = pool(tmp_path)
    result, requests, slots, coverage = evaluation(None)
    w_result, w_requests, w_slots, w_coverage = evaluation(workers)
    assert 0.0 < result.pass_at_1 < 1.0  # a score that could differ
    assert w_result == result and w_requests == requests
    assert len(workers.startup_s) == 24  # every episode played in a worker
    assert sorted(w_slots.taken) == sorted(slots.taken) == list(range(24))
    assert sorted(w_slots.released) == sorted(slots.released) == [(j, r) for j in range(24)
                                                                   for r in ("end", "first_call")]
    assert w_coverage == coverage == {"eval/rollout_worker_routing_id_coverage": 0.0}
    assert len(w_slots.warnings) == len(slots.warnings) == 1 and "as expected for a dense model" in w_slots.warnings[0]
    assert list((tmp_path / "scratch").iterdir()) == []


async def left_alive_after_a_cancel(evaluation, moment, workers) -> set:
    """Run ``evaluation``, cancel it once ``moment`` is awaited, and return the workers the pool still counted alive
    before its shutdown (``aclose``)."""
    task = asyncio.ensure_future(evaluation)
    await moment
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    alive = set(workers._alive)
    await workers.aclose()
    return alive


def test_a_cancelled_evaluation_ends_its_workers_and_gives_back_their_slots(tmp_path):
    workers = pool(tmp_path, grace_s=5.0)
    service, slots = scripted(delay_s=120.0), Slots()

    async def three_called():
        while len(service.calls) < 3:  # each of the three running has made its first model call
            await asyncio.sleep(0.05)

    began = time.perf_counter()
    evaluation = evaluate_rollouts(service, ENV, "val", 6, seed=5, concurrency=3, slots=slots, workers=workers,
                                   entry="e")
    assert asyncio.run(left_alive_after_a_cancel(evaluation, three_called(), workers)) == set()  # none left to aclose
    assert time.perf_counter() - began < 60  # not the service's 120 s
    assert sorted(slots.taken) == [0, 1, 2]
    assert sorted(slots.released) == [(j, r) for j in range(3) for r in ("cancelled", "first_call")]
    assert list((tmp_path / "scratch").iterdir()) == []


def test_a_failing_episode_fails_the_evaluation_from_its_worker(tmp_path):
    class Failing(FakeModelService):
        async def sample(self, prompt_tokens, **kwargs):
            raise ValueError("the service refused")

    workers = pool(tmp_path)

    async def run():
        try:
            await evaluate_rollouts(Failing(lambda p, s: [5]), ENV, "val", 4, workers=workers, entry="e")
        finally:
            await workers.aclose()

    with pytest.raises(ValueError, match="the service refused"):
        asyncio.run(run())
    assert list((tmp_path / "scratch").iterdir()) == []


def test_training_evaluates_in_the_rollout_workers(tmp_path, monkeypatch):
    from platoon.live.launch.build import build_live

    monkeypatch.setenv("PLATOON_NODE_SCRATCH", str(tmp_path))
    small = ["environments.0.service_kwargs={ranges: [8, 16]}", "model.d_model=16", "model.n_layers=1"]

    def evaluated(overrides):
        live = build_live(schema_config([*small, *overrides]), eval_episodes=12)
        tok = live.renderer.tokenizer
        live.service = FakeModelService(
            lambda prompt, seed: tok.encode(f"guess {binary_guess(tok.decode(prompt)) if seed % 4 else 1} <eot>"))

        async def run():
            try:
                return await live.evaluate_in_training(Slots())
            finally:
                if live.workers is not None:
                    await live.workers.aclose()

        return asyncio.run(run()), live

    metrics, _ = evaluated([])
    w_metrics, live = evaluated(["train.workflow_config.rollout_isolation=process"])
    assert len(live.workers.startup_s) == 12
    assert w_metrics == metrics and 0.0 < metrics["eval/pass@1"] < 1.0
    assert list((tmp_path / f"platoon-workers-{os.getuid()}").iterdir()) == []


def test_a_cancel_while_a_worker_s_connection_opens_ends_that_worker_and_its_files(tmp_path, monkeypatch):
    # the window between a worker's start and its connection: a cancel there (a failing group's, a stop) used to
    # leave the worker untracked, running, its readiness and diagnostics files in scratch
    from platoon.live.workers import pool as pool_module

    workers, opening, started = pool(tmp_path), asyncio.Event(), []
    real_open, real_spawn = pool_module.Channel.open, workers._spawn

    def spawn(theirs, job):
        proc = real_spawn(theirs, job)
        started.append(proc)
        return proc

    async def slow_open(sock):
        started.append(sock)  # held: the worker sees no end of its connection from the socket's collection
        opening.set()
        await asyncio.sleep(600)
        return await real_open(sock)

    monkeypatch.setattr(pool_module.Channel, "open", slow_open)
    monkeypatch.setattr(workers, "_spawn", spawn)

    evaluation = evaluate_rollouts(scripted(), ENV, "val", 1, seed=5, workers=workers, entry="e")
    assert asyncio.run(left_alive_after_a_cancel(evaluation, opening.wait(), workers)) == set()
    proc, sock = started
    assert proc.exitcode is not None  # the worker was ended, not left running
    assert list((tmp_path / "scratch").iterdir()) == []
    sock.close()
