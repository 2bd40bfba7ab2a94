"""A rollout worker's model calls posted straight to the vLLM servers (``platoon.live.inference.direct``), the
trainer's ``VLLMService`` placing each: fake servers on real ports (``fake_vllm_http``), rollouts in worker
processes. The trainer's own client is watched: it posts no completion while the workers reach the servers."""

from __future__ import annotations

import asyncio

import pytest
import torch
from fake_vllm_http import ServedCluster, TrainerSpy, expected, play, service
from workers_harness import SamplingEpisode

from platoon.live.inference import vllm
from platoon.live.inference.direct import DirectTarget, network_home
from platoon.live.inference.vllm import InferenceError
from platoon.live.workers import EnvSpec, WorkerPool

pytestmark = pytest.mark.live


def workers(tmp_path) -> WorkerPool:
    specs = {"e": EnvSpec("platoon-number-search", {"ranges": [4, 8]}, None, ("train",))}
    return WorkerPool(method="exec", env_specs=specs, scratch=tmp_path / "scratch", grace_s=2.0)


def test_workers_post_their_calls_to_the_servers_and_the_trainer_only_places_them(tmp_path):
    spy = TrainerSpy()
    with ServedCluster(2, delay_s=0.05) as cluster:
        svc = service(cluster, tmp_path, spy)
        results = asyncio.run(play(workers(tmp_path), svc, [SamplingEpisode(3, first=1), SamplingEpisode(3, first=2)]))
        metrics = svc.step_metrics()
    assert spy.completions == 0 and sum(len(s.requests) for s in cluster.servers) == 6
    assert metrics["inference/requests"] == 6 and metrics["inference/retries"] == 0
    for first, calls in zip((1, 2), results, strict=True):
        assert [c[0] for c in calls] == expected(first, 0, 3)  # the ids the server sampled, the prompt grown by them
        assert {c[1] for c in calls} == {0} and all(c[3] == (-0.5,) * 3 for c in calls)
        assert len({c[2] for c in calls}) == 1  # a rollout keeps its server across its turns
    assert {calls[0][2] for calls in results} == {0, 1}  # the second rollout went to the server the first left idle


def test_a_server_failing_a_worker_s_post_is_left_for_another_and_counted(tmp_path):
    spy = TrainerSpy()
    with ServedCluster(2) as cluster:
        cluster.servers[0].die_after = 0  # its first completion ends the connection without an answer
        svc = service(cluster, tmp_path, spy)
        (calls,) = asyncio.run(play(workers(tmp_path), svc, [SamplingEpisode(2)]))
        metrics = svc.step_metrics()
    assert [c[0] for c in calls] == expected(1, 0, 2)
    assert [c[2] for c in calls] == [1, 1]  # tried again on the other server, where the rollout then stays
    assert metrics["inference/retries"] == 1 and len(cluster.servers[0].requests) == 1 and spy.completions == 0


def test_a_request_a_server_refuses_fails_the_worker_s_call_at_once(tmp_path):
    spy = TrainerSpy()
    with ServedCluster(1, status=400) as cluster:
        svc = service(cluster, tmp_path, spy)
        with pytest.raises(InferenceError, match=r"refused /v1/completions \(HTTP 400\)"):
            asyncio.run(play(workers(tmp_path), svc, [SamplingEpisode(1)]))
        assert len(cluster.servers[0].requests) == 1 and svc.step_metrics()["inference/retries"] == 0


def test_under_abort_a_worker_s_call_in_flight_across_an_update_is_posted_again_on_the_new_weights(tmp_path):
    spy = TrainerSpy()
    with ServedCluster(1, delay_s=1.0) as cluster:
        svc = service(cluster, tmp_path, spy)

        async def update():
            while not cluster.servers[0].requests:
                await asyncio.sleep(0.02)
            await svc.publish({"w": torch.ones(2)}, 1)

        calls, _ = asyncio.run(play(workers(tmp_path), svc, [SamplingEpisode(1)], during=update))
        metrics = svc.step_metrics()
    assert calls == [(expected(1, 1, 1)[0], 1, 0, (-1.5,) * 3)]  # sampled again, on version 1
    assert metrics["inference/resent"] == 1 and len(cluster.servers[0].requests) == 2 and spy.completions == 0


def test_a_worker_that_cannot_reach_a_loopback_server_has_the_trainer_post_its_calls(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm, "network_home", lambda: "another-machine/1")
    spy = TrainerSpy()
    with ServedCluster(1) as cluster:
        svc = service(cluster, tmp_path, spy)
        (calls,) = asyncio.run(play(workers(tmp_path), svc, [SamplingEpisode(2)]))
    assert [c[0] for c in calls] == expected(1, 0, 2) and spy.completions == 2


@pytest.mark.parametrize(("urls", "home", "reachable"), [
    (("http://10.0.0.5:8000",), "another-machine/1", True),
    (("http://127.0.0.1:8000",), "same", True),
    (("http://localhost:8000", "http://10.0.0.5:8000"), "another-machine/1", False),
    (("http://127.0.0.2:8000",), None, False),
])
def test_a_worker_calls_directly_only_servers_it_reaches_as_the_trainer_does(urls, home, reachable):
    target = DirectTarget(urls, "m", 1.0, 1.0, network_home() if home == "same" else home)
    assert target.reachable() is reachable
