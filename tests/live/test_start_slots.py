"""Start slots in live training: training's and evaluation's rollouts share one start limit (docs/start-limit.md),
on the runtime's virtual clock: first come first served, timers, cancellations, and evaluation's own metrics."""

from __future__ import annotations

import asyncio

import pytest
from config_kit import schema_config
from live_harness import (
    FakeService,
    FakeTrainer,
    Outcome,
    ScriptedWorkflow,
    dispatch_harness,
    live_runtime,
    run_virtual,
)

from platoon.live.agent.harness import tiny_tokenizer
from platoon.live.envs.number_search import NumberSearch
from platoon.live.inference.model import TinyConfig, TinyPolicy
from platoon.live.inference.service import BatchingModelService
from platoon.live.rollouts.evaluate import evaluate, evaluate_rollouts
from platoon.policy.driver import Schedule
from platoon.policy.start_limit import StartLimit

EVAL = "eval/rollout_client/start_limit/"
TRAIN = "rollout_client/start_limit/"


def run(limit, evaluate_fn, *, script=None, steps=1, logged=None):
    d = dispatch_harness.build(tasks=4, group_size=2, batch_size=1, steps=steps, permits=2)
    wf = ScriptedWorkflow(script or (lambda row: Outcome(5.0, reward=float(row.member % 2), first_call_s=2.0)))
    runtime = live_runtime(d, wf, FakeTrainer(), FakeService(), start_limit=limit, schedule=Schedule(eval_every=1),
                           evaluate=evaluate_fn, log=lambda lv, m: (logged if logged is not None else []).append((lv, m)))
    run_virtual(runtime.run())
    return runtime, wf


def test_training_and_evaluation_rollouts_take_turns_at_one_slot():
    held = []  # (taken, released, who)

    async def ev(slots):
        loop = asyncio.get_running_loop()

        async def one(j):
            await slots.take(j)
            taken = loop.time()
            await asyncio.sleep(3.0)  # its start-up, then its first model call
            slots.release(j, "first_call")
            held.append((taken, loop.time(), f"eval {j}"))
            await asyncio.sleep(1.0)
            slots.release(j, "end")

        await asyncio.gather(one(0), one(1))
        return {"eval/pass@1": 0.5}

    runtime, wf = run(StartLimit(1, timer_s=600.0), ev, steps=2)
    starts = {(k, m): t for t, what, k, m in wf.log if what == "start"}
    calls = {(k, m): t for t, what, k, m in wf.log if what == "first_call"}
    held += [(starts[k], calls[k], f"train {k}") for k in calls]
    held.sort()
    assert any(w.startswith("eval") for _, _, w in held) and any(w.startswith("train") for _, _, w in held)
    for (_, end, _), (begin, _, _) in zip(held, held[1:], strict=False):
        assert begin >= end  # one slot: never two start-ups at once, whoever asked
    eval_rows = [r for r in runtime.rows if EVAL + "releases/first_call" in r]
    assert [r[EVAL + "releases/first_call"] for r in eval_rows] == [2.0, 2.0]  # step 1's and the final one
    assert all(r[EVAL + "releases/timer"] == 0.0 and EVAL + "wait_seconds_max" in r for r in eval_rows)
    assert runtime.rows[0][TRAIN + "releases/first_call"] >= 2.0


def test_an_evaluation_rollout_without_a_model_call_gives_its_slot_back_on_the_timer():
    starts = []
    logged = []

    async def ev(slots):
        loop = asyncio.get_running_loop()

        async def one(j):
            await slots.take(j)
            starts.append((j, loop.time()))
            await asyncio.sleep(30.0)  # no model call at all
            slots.release(j, "end")

        await asyncio.gather(one(0), one(1))
        return {}

    runtime, _ = run(StartLimit(1, timer_s=10.0), ev, script=lambda row: Outcome(1.0), logged=logged)
    (j0, t0), (j1, t1) = starts[:2]
    assert t1 - t0 == pytest.approx(10.0)  # the second waited for the first's timer
    timer_rows = [r[EVAL + "releases/timer"] for r in runtime.rows if EVAL + "releases/timer" in r]
    assert sum(timer_rows) >= 2.0
    assert sum("came back on its 10 s timer" in m for lv, m in logged if lv == "warning") == 1


def test_an_evaluation_rollout_cancelled_while_it_waits_takes_nothing():
    order = []

    async def ev(slots):
        loop = asyncio.get_running_loop()

        async def one(j, hold_s):
            await slots.take(j)
            order.append((j, loop.time()))
            await asyncio.sleep(hold_s)
            slots.release(j, "first_call")
            slots.release(j, "end")

        first = asyncio.ensure_future(one(0, 4.0))
        await asyncio.sleep(0)
        waiting = asyncio.ensure_future(one(1, 1.0))
        last = asyncio.ensure_future(one(2, 1.0))
        await asyncio.sleep(1.0)
        waiting.cancel()  # cancelled while it waits for the slot rollout 0 holds
        await asyncio.gather(first, last, waiting, return_exceptions=True)
        return {}

    runtime, _ = run(StartLimit(1, timer_s=600.0), ev, script=lambda row: Outcome(1.0))
    eval_order = [j for j, _ in order]
    assert 1 not in eval_order[:3] and eval_order[:2] == [0, 2]
    row = next(r for r in runtime.rows if EVAL + "releases/cancelled" in r)
    assert row[EVAL + "releases/cancelled"] == 0.0  # a wait that is cancelled gives nothing back: it took nothing


def test_evaluation_as_rollouts_scores_as_evaluation_in_batches(one_torch_thread):
    env = NumberSearch()
    tokenizer = tiny_tokenizer([env])
    policy = TinyPolicy(TinyConfig(vocab_size=tokenizer.vocab_size, max_len=256), device="cpu", seed=3)

    async def as_rollouts():
        service = BatchingModelService(policy, max_batch=16)
        try:
            return await evaluate_rollouts(service, env, "val", 60, seed=5, concurrency=7)
        finally:
            await service.aclose()

    assert asyncio.run(as_rollouts()) == evaluate(policy, env, "val", 60, seed=5, batch_size=32)


@pytest.mark.parametrize(("limit", "never_binds"), [(40, False), (48, True)])
def test_the_announcement_counts_evaluations_rollouts_among_those_that_can_run_at_once(limit, never_binds):
    from platoon.components import build_policy
    from platoon.live.launch.build import build_environments, build_pool

    cfg = schema_config(["train.batch_size=4", "environments.0.workflow_config.group_size=8",
                             "train.max_concurrent_rollouts=32", "eval.every=5", "eval.max_concurrent_rollouts=16",
                             f"train.max_starting_rollouts={limit}", "train.max_training_steps=2"])
    policy = build_policy(cfg, build_pool(cfg, build_environments(cfg)), runtime="live")
    policy.driver.start(now=0.0)  # the launch save, then the start itself
    policy.driver.poll(now=0.0)
    infos = policy.driver.take_outbox().infos
    assert f"At most {limit} rollouts start at once" in infos[0]
    assert any("can never bind" in m and "the 48 rollouts" in m for m in infos) is never_binds


def test_slots_that_mostly_come_back_only_at_their_rollouts_end_are_warned_about_once():
    # rollouts that never call the model: every slot comes back at its end; from the 32nd release on the run warns
    logged = []
    d = dispatch_harness.build(tasks=8, group_size=4, batch_size=2, steps=5, permits=8)
    wf = ScriptedWorkflow(lambda row: Outcome(1.0, reward=float(row.member % 2)))
    runtime = live_runtime(d, wf, FakeTrainer(), FakeService(), start_limit=StartLimit(2, timer_s=600.0),
                           log=lambda lv, m: logged.append((lv, m)))
    run_virtual(runtime.run())
    whole = [m for lv, m in logged if lv == "warning" and "bounds whole rollouts" in m]
    assert len(whole) == 1 and whole[0].startswith("32 of 32 start slots")
    assert sum(r[TRAIN + "releases/end"] for r in runtime.rows) >= 32
