"""Rollouts in Ray actors (``rollout_isolation: ray``): on a local instance a run draws, fates and trains as in
process; on a two-node cluster (Ray's own ``ray.cluster_utils.Cluster``: two raylets on this machine, on 127.0.0.1)
rollouts land on both nodes, an actor SIGKILLed mid-rollout fails that rollout naming its node, and a node removed
mid-group fails the rollouts it held while the pool goes on, on the node that remains."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from live_harness import FakeService  # noqa: E402
from workers_harness import PidWorkflow, SleepyWorkflow, group, train  # noqa: E402

from platoon.config.ray import RayConfig  # noqa: E402
from platoon.live.launch.errors import TrainError  # noqa: E402
from platoon.live.workers import EnvSpec, WorkerDied  # noqa: E402
from platoon.live.workers.ray_pool import RayPool, platoon_version  # noqa: E402

pytestmark = [pytest.mark.live, pytest.mark.slow]

TESTS = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def harness_path():
    """Ray's workers import the test harness modules by name, as worker processes do: on PYTHONPATH, which the
    raylets this module starts (and their workers) inherit."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(TESTS / "live"), str(TESTS / "policy"), str(TESTS), *sys.path])
    yield
    if before is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = before


@pytest.fixture(scope="module")
def in_process():
    """The built-in environment's run in process (seeded tokens: the scripted outcomes), to compare with."""
    events, steps, _, _ = train([])
    return events, steps


def same_run(ray_run, in_process) -> None:
    """Draws and fates, and every step's datums, as in process."""
    (events, steps), (r_events, r_steps, _, live) = in_process, ray_run
    assert r_events == events and len(events) > 0
    assert [v for v, _ in r_steps] == [v for v, _ in steps] and len(steps) == 2
    for (_, a), (_, b) in zip(r_steps, steps, strict=True):
        assert len(a) == len(b) > 0
        for x, y in zip(a, b, strict=True):
            assert {k: x[k] for k in ("tokens", "mask", "advantage", "version", "logprobs")} == \
                   {k: y[k] for k in ("tokens", "mask", "advantage", "version", "logprobs")}
    assert sum(live.workers.rollouts_by_node.values()) >= 2 * 4 * 4  # every training rollout ran on an actor


def test_ray_isolation_on_a_local_instance_draws_fates_and_trains_as_in_process(tmp_path, monkeypatch, harness_path,
                                                                                in_process):
    monkeypatch.setenv("PLATOON_NODE_SCRATCH", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    ray_run = train(["train.workflow_config.rollout_isolation=ray", "train.ray.actor_cpus=0.25"])
    assert any(level == "info" and m.startswith("rollouts run on Ray actors (a local instance: 1 node(s)")
               for level, m in ray_run[2])
    same_run(ray_run, in_process)
    assert not ray.is_initialized()  # the local instance stopped with the run


def test_platoon_train_on_ray_says_where_each_rollout_ran(tmp_path, monkeypatch, capfd):
    """A run's trace names each rollout's node and actor, and its metrics count rollouts and actors per node."""
    from platoon.live.launch import command
    from platoon.runs import read_jsonl

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    run = command.train(None, ["train.max_training_steps=1", "train.batch_size=2",
                               "train.workflow_config.group_size=2", "train.workflow_config.rollout_isolation=ray",
                               "train.ray.actor_cpus=0.25", "eval.every=1000", "model.d_model=16", "model.n_layers=1"],
                        out=tmp_path / "run", progress=False)
    said = capfd.readouterr()
    assert "rollouts run on Ray actors (a local instance: 1 node(s), " in said.out + said.err
    text = (run / "trace.json").read_text()
    spans = [json.loads(line.lstrip("[,")) for line in text.splitlines() if '"name":"rollout"' in line]
    assert spans and all(s["args"]["node"] and s["args"]["actor"].startswith("actor-") for s in spans)
    events = json.loads(text + "]")
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    on_actor = [e for e in events if e["name"] == "on_actor"]
    assert {(s["args"]["task_id"], s["args"]["member"]) for s in spans} == {
        (e["args"]["task_id"], e["args"]["member"]) for e in on_actor}  # each traced rollout on its actor's track
    for span in spans:
        (track,) = {tracks[e["tid"]] for e in on_actor if e["args"]["member"] == span["args"]["member"]
                    and e["args"]["task_id"] == span["args"]["task_id"]}
        assert track == f"{span['args']['actor']} on node {span['args']['node'][:12]}"
    for tid in {e["tid"] for e in on_actor}:  # an actor serves one rollout at a time: its spans never overlap
        mine = sorted((e["ts"], e["ts"] + e["dur"]) for e in on_actor if e["tid"] == tid)
        assert all(a[1] <= b[0] for a, b in zip(mine, mine[1:], strict=False))
    (row,) = [r for r in read_jsonl(run / "metrics.jsonl") if "train/rollouts" in r]
    per_node = {k: v for k, v in row.items() if k.startswith("rollout_client/ray/node/")}
    assert sum(v for k, v in per_node.items() if k.endswith("/rollouts")) >= 4
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def cluster(harness_path):
    """Two nodes of one CPU each, every address on the loopback: Ray's "not a real cluster" switch (as on macOS)
    makes each raylet, its GCS and this driver take 127.0.0.1 rather than this machine's network address."""
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    os.environ.pop("RAY_ADDRESS", None)
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    real_cluster, ray_constants.ENABLE_RAY_CLUSTER = ray_constants.ENABLE_RAY_CLUSTER, False
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    second = c.add_node(num_cpus=1)
    c.wait_for_nodes()
    c.connect()
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
    yield c, second
    ray.shutdown()
    c.shutdown()
    ray_constants.ENABLE_RAY_CLUSTER = real_cluster
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def pool(tmp_path, cluster, **cfg) -> RayPool:
    specs = {"e": EnvSpec("platoon-number-search", {"ranges": [4, 8]}, None, ("train", "val"))}
    said = []
    p = RayPool(RayConfig(address=cluster[0].address, actor_cpus=1, **cfg), env_specs=specs, grace_s=1.0,
                permits=2, scratch=tmp_path / "scratch")
    p.open()
    p.attach_log(lambda level, message: said.append((level, message)))
    p.said = said
    return p


def test_on_two_nodes_a_run_draws_fates_and_trains_as_in_process(tmp_path, monkeypatch, cluster, in_process):
    monkeypatch.setenv("PLATOON_NODE_SCRATCH", str(tmp_path))
    ray_run = train(["train.workflow_config.rollout_isolation=ray", "train.ray.actor_cpus=0.25",
                     f"train.ray.address={cluster[0].address}"])
    same_run(ray_run, in_process)
    assert len(ray_run[3].workers.rollouts_by_node) == 2  # both nodes ran rollouts


def test_a_run_no_node_can_host_stops_naming_why(tmp_path, cluster):
    """Every rollout fails once no actor can be had for start_timeout_seconds; groups failing in a row stop the run
    (here before its first step, which leaves no run directory: a later run starts afresh)."""
    from platoon.live.launch import command

    settings = ["train.max_training_steps=2", "train.batch_size=2", "train.workflow_config.group_size=2",
                "eval.every=0", "model.d_model=16", "model.n_layers=1", "train.workflow_config.rollout_isolation=ray",
                f"train.ray.address={cluster[0].address}", "train.ray.actor_resources={no_such_resource: 1}",
                "train.ray.start_timeout_seconds=0.5"]
    with pytest.raises(TrainError, match=r"no node could host one.* 1 CPU, 1 no_such_resource"):
        command.train(None, settings, out=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_rollouts_land_on_both_nodes_and_actors_are_reused(tmp_path, cluster):
    workers = pool(tmp_path, cluster)
    workflow = SleepyWorkflow([0.3, 0.3, 0.3, 0.3], envs={}, service=FakeService())
    output, _ = group(workflow, workers, 4)
    assert [m.disposition for m in output.members] == ["completed"] * 4
    assert len(workers.rollouts_by_node) == 2 and sum(workers.rollouts_by_node.values()) == 4
    assert sum(workers.actor_starts_by_node.values()) == 2  # two actors (one a node, a CPU each), each used twice
    metrics = workers.metrics()
    assert sorted(k.rsplit("/", 1)[1] for k in metrics) == ["actor_starts", "actor_starts", "actors_alive",
                                                            "actors_alive", "rollouts", "rollouts"]
    workers.close()


def test_a_straggler_cut_cancels_its_actor_s_rollout_within_the_grace_and_the_actor_serves_again(tmp_path, cluster):
    workers = pool(tmp_path, cluster)
    workflow = SleepyWorkflow([0.0, 120.0], envs={}, service=FakeService(), straggler_timeout_s=0.5)
    output, seconds = group(workflow, workers, 2)
    assert [m.disposition for m in output.members] == ["completed", "straggler_killed"]
    assert seconds < 30  # not the straggler's 120 s: its rollout was cancelled in its actor, or the actor killed
    assert list((tmp_path / "scratch").iterdir()) == []
    workers.close()


def test_an_actor_killed_mid_rollout_fails_it_naming_its_node(tmp_path, cluster):
    workers = pool(tmp_path, cluster)
    pids = []

    def warn(message):
        pid = json.loads(message)["pid"]
        pids.append(pid)
        os.kill(pid, signal.SIGKILL)

    workflow = PidWorkflow([30.0], envs={}, service=FakeService())
    workflow.warn = warn
    with pytest.raises(WorkerDied, match=r"rollout actor on node \w+ ended without returning its rollout"):
        group(workflow, workers, 1)
    assert pids and not workers._members  # the dead actor left the pool
    output, _ = group(SleepyWorkflow([0.0], envs={}, service=FakeService()), workers, 1)  # a new actor serves
    assert output.members[0].disposition == "completed"
    workers.close()


def test_a_node_removed_mid_group_fails_its_rollouts_and_the_pool_goes_on_on_the_other(tmp_path, cluster):
    c, second = cluster
    workers = pool(tmp_path, cluster)
    workflow = SleepyWorkflow([20.0, 20.0], envs={}, service=FakeService())

    async def run_and_remove():
        workflow.rollout_workers = workers
        task = asyncio.ensure_future(workflow.arun_episode(_row(2)))
        while len(workers.rollouts_by_node) < 2:
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        await asyncio.get_running_loop().run_in_executor(None, c.remove_node, second)
        try:
            return await task
        finally:
            await workers.aclose()

    with pytest.raises(WorkerDied, match="on node"):
        asyncio.run(run_and_remove())
    (lost,) = [m for level, m in workers.said if level == "warning" and "is lost" in m]
    assert second.node_id in lost and "on the 1 node(s) that remain" in lost
    before = dict(workers.rollouts_by_node)
    output, _ = group(SleepyWorkflow([0.0, 0.0], envs={}, service=FakeService()), workers, 2)
    assert [m.disposition for m in output.members] == ["completed", "completed"]
    grew = {node for node, n in workers.rollouts_by_node.items() if n > before.get(node, 0)}
    assert grew and second.node_id not in grew  # the rollouts went on on the node that remains
    workers.close()


def test_a_node_whose_platoon_differs_from_the_trainer_s_is_refused_naming_it(tmp_path, cluster, monkeypatch):
    import platoon

    real = platoon.__version__
    monkeypatch.setattr(platoon, "__version__", "0.0.0-trainer")  # the nodes' own processes keep theirs
    with pytest.raises(TrainError, match=rf"Ray node 127\.0\.0\.1 \(\w+\) runs platoon {re.escape(real)}, the "
                                         r"trainer 0\.0\.0-trainer: install the same platoon on every node"):
        pool(tmp_path, cluster)


def test_a_node_without_an_environment_s_distribution_is_refused_naming_it(tmp_path, cluster):
    specs = {"e": EnvSpec("platoon-number-search", {}, None, ("train",))}
    workers = RayPool(RayConfig(address=cluster[0].address), env_specs=specs,
                      distributions={"platoon-no-such-distribution": "1.0"})
    with pytest.raises(TrainError, match=r"Ray node 127\.0\.0\.1 \(\w+\) lacks platoon-no-such-distribution, the "
                                         r"trainer 1\.0: install the same platoon-no-such-distribution on every node"):
        workers.open()


def test_the_environments_distributions_are_found_by_their_classes():
    from platoon.live.envs import NumberSearch
    from platoon.live.workers.ray_pool import distributions_of, installed

    assert distributions_of({"e": NumberSearch()}) == {}  # platoon's own: checked as platoon
    assert installed(["pytest", "platoon-no-such-distribution"]) == {
        "platoon": platoon_version(), "pytest": pytest.__version__, "platoon-no-such-distribution": None}


def _row(size):
    from platoon.live.rollouts.workflow import GroupRow

    return GroupRow((1, 0), "n4-g3-t1", "e", size)


def test_a_node_lost_mid_run_then_a_sigkill_and_a_resume_lose_nothing(tmp_path, cluster):
    """``platoon train`` on the cluster: a node removed mid-run fails only its rollouts and the run goes on; killed
    later and resumed, every step is trained once and every draw has exactly one fate."""
    import subprocess
    import threading
    import time

    from live_harness import check_event_log, train_then_sigkill

    from platoon.runs import read_jsonl

    c, _ = cluster
    extra = c.add_node(num_cpus=1)  # the fixture's second node may be gone already
    c.wait_for_nodes()
    run = tmp_path / "run"
    env = {**os.environ, "RAY_ADDRESS": c.address, "PYTHONUNBUFFERED": "1",
           "PLATOON_NODE_SCRATCH": str(tmp_path / "scratch")}
    settings = ["train.batch_size=2", "environments.0.workflow_config.group_size=2", "eval.every=0",
                "model.d_model=16", "model.n_layers=1", "checkpoint.recovery_every=1",
                "train.workflow_config.rollout_isolation=ray", "train.ray.actor_cpus=1"]
    removed = threading.Event()

    def remove_after_a_step() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            metrics = run / "metrics.jsonl"
            if metrics.exists() and read_jsonl(metrics):
                c.remove_node(extra)
                removed.set()
                return
            time.sleep(0.05)

    remover = threading.Thread(target=remove_after_a_step)
    remover.start()
    train_then_sigkill(run, ["--steps", "6", *[a for s in settings for a in ("--set", s)]], env, after_rows=3,
                       within_s=240)
    remover.join()
    assert removed.is_set()
    resumed = subprocess.run([sys.executable, "-m", "platoon", "train", "--resume", str(run)],
                             capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == list(range(6))
    check_event_log(read_jsonl(run / "tasks" / "events.jsonl"), steps=6, batch_size=2)


def test_actors_post_their_model_calls_to_the_inference_servers_themselves(tmp_path, cluster):
    """With vLLM servers (fakes on real ports), an actor's prompts and completions go between it and the server;
    the trainer places each call (a rollout on one server, a new one on the least loaded) and posts none."""
    import torch
    from fake_vllm_http import ServedCluster, TrainerSpy, expected, play, service
    from workers_harness import SamplingEpisode

    spy = TrainerSpy()
    with ServedCluster(2, delay_s=0.05) as servers:
        svc = service(servers, tmp_path, spy)

        async def update_after_the_first_calls():
            while sum(len(s.requests) for s in servers.servers) < 2:
                await asyncio.sleep(0.02)
            await svc.publish({"w": torch.ones(2)}, 1)

        first, second, _ = asyncio.run(play(pool(tmp_path, cluster), svc, [SamplingEpisode(3, first=1),
                                                                            SamplingEpisode(3, first=2)],
                                            during=update_after_the_first_calls))
    assert spy.completions == 0 and sum(len(s.requests) for s in servers.servers) >= 6
    for start, calls in ((1, first), (2, second)):
        assert len({c[2] for c in calls}) == 1 and [c[1] for c in calls][-1] == 1  # one server; the last on v1
        assert calls[-1][3] == (-1.5,) * 3  # sampled on the new weights
        assert calls[0][0] in (tuple(expected(start, 0, 1)[0]), tuple(expected(start, 1, 1)[0]))
    assert {first[0][2], second[0][2]} == {0, 1}
