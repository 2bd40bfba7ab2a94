"""Rollout workers (``rollout_isolation: process``): a rollout in a worker trains what it trains in process, and a
cancelled, failing or dying worker behaves as an in-process rollout would, leaving nothing in scratch."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest
from live_harness import FakeService
from workers_harness import ProbeWorkflow, SleepyWorkflow, group, train

from platoon.live.workers import EnvSpec, WorkerDied, WorkerPool, preload_plan

pytestmark = pytest.mark.live

@pytest.mark.slow
def test_process_isolation_draws_fates_and_trains_as_in_process(tmp_path, monkeypatch):
    monkeypatch.setenv("PLATOON_NODE_SCRATCH", str(tmp_path))
    events, steps, _, _ = train([])
    w_events, w_steps, said, live = train(["train.workflow_config.rollout_isolation=process"])
    assert live.workers is not None and live.workers.method == "forkserver"
    assert len(live.workers.startup_s) == 2 * 4 * 4  # every rollout ran in a worker
    assert any(level == "info" and m.startswith("rollout worker fork server ") and "imported the worker's stack"
               in m for level, m in said)
    assert w_events == events and len(events) > 0
    assert [v for v, _ in w_steps] == [v for v, _ in steps] and len(steps) == 2  # a step of zero advantages: no update
    for (_, a), (_, b) in zip(w_steps, steps, strict=True):
        assert len(a) == len(b) > 0
        for x, y in zip(a, b, strict=True):
            assert {k: x[k] for k in ("tokens", "mask", "advantage", "version", "logprobs")} == \
                   {k: y[k] for k in ("tokens", "mask", "advantage", "version", "logprobs")}
    assert list((tmp_path / f"platoon-workers-{os.getuid()}").iterdir()) == []


def pool(tmp_path, **kwargs) -> WorkerPool:
    from platoon.live.envs import NumberSearch

    specs = {"e": EnvSpec("platoon-number-search", {"ranges": [4, 8]}, None, ("train", "val"))}
    kwargs.setdefault("plan", preload_plan(specs, {"e": NumberSearch(ranges=[4, 8])}))
    return WorkerPool(env_specs=specs, scratch=tmp_path / "scratch", **kwargs)


def test_a_straggler_cut_kills_its_worker_and_leaves_no_file(tmp_path):
    workers = pool(tmp_path, grace_s=1.0)
    workflow = SleepyWorkflow([0.0, 0.0, 0.0, 120.0], envs={}, service=FakeService(), straggler_timeout_s=0.5)
    output, seconds = group(workflow, workers, 4)
    assert [m.disposition for m in output.members] == ["completed"] * 3 + ["straggler_killed"]
    assert seconds < 30  # not the straggler's 120 s
    assert list((tmp_path / "scratch").iterdir()) == []
    assert not workers._alive


def test_a_failing_member_fails_its_group_and_cancels_the_others(tmp_path):
    workers = pool(tmp_path, grace_s=1.0)
    workflow = SleepyWorkflow([0.2, 120.0, 120.0], raises={0}, envs={}, service=FakeService())
    began = time.perf_counter()
    with pytest.raises(ValueError, match="member 0 failed"):
        group(workflow, workers, 3)
    assert time.perf_counter() - began < 30
    assert list((tmp_path / "scratch").iterdir()) == []


def test_a_worker_that_dies_raises_worker_died(tmp_path):
    workers = pool(tmp_path)
    killed = []

    class Killing(FakeService):
        async def sample(self, *args, **kwargs):  # the worker's first model call: it dies meanwhile
            (pid,) = [w.proc.pid for w in workers._alive]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            await asyncio.sleep(60)

    workflow = SleepyWorkflow([0.0], envs={}, service=Killing())
    with pytest.raises(WorkerDied, match=r"ended \(exit code -9\) after it was ready"):
        group(workflow, workers, 1)
    assert killed and list((tmp_path / "scratch").iterdir()) == []


def test_a_worker_with_teardowns_ends_once_they_have(tmp_path):
    workers = pool(tmp_path)
    workflow = SleepyWorkflow([0.0, 0.0], teardown_s=0.3, envs={}, service=FakeService())
    output, _ = group(workflow, workers, 2)
    assert [m.disposition for m in output.members] == ["completed", "completed"]
    assert list((tmp_path / "scratch").iterdir()) == []


@pytest.mark.slow
def test_exec_workers_run_a_rollout_too(tmp_path):
    workers = pool(tmp_path, method="exec")
    said = []
    workflow = ProbeWorkflow(envs={}, service=FakeService(), warn=said.append)
    output, _ = group(workflow, workers, 1)
    assert [m.disposition for m in output.members] == ["completed"]
    assert json.loads(said[0])["pid"] != os.getpid()


@pytest.mark.parametrize("sends", [False, True])
def test_routing_ids_are_counted_by_the_trainer_once_for_all_workers(tmp_path, sends):
    from platoon.live.envs import NumberSearch
    from platoon.live.inference.service import FakeModelService
    from platoon.live.rollouts.workflow import GroupRolloutWorkflow

    warnings = []
    service = FakeModelService(lambda p, s: [5], routing_ids=(lambda p, s: "rid") if sends else None)
    workflow = GroupRolloutWorkflow({"e": NumberSearch(ranges=[4, 8])}, service, warn=warnings.append)
    workflow.inform = warnings.append
    group(workflow, pool(tmp_path), 3)
    said = [w for w in warnings if "routing id" in w]
    assert said == [] if sends else (len(said) == 1 and "sends no routing ids, as expected for a dense model" in said[0])
    assert workflow.step_metrics() == {"train/rollout_worker_routing_id_coverage": 1.0 if sends else 0.0}
