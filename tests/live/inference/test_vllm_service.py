"""``VLLMService`` against the in-process fake of vLLM's HTTP API (tests/live/fake_vllm.py): tokens in and out,
routing, retries, timeouts, weight sync with ``abort`` and ``keep``, a server that dies mid-request, a start."""

from __future__ import annotations

import asyncio

import pytest
import torch
from fake_vllm import FakeCluster, tokens

from platoon.live.inference.service import rollout_session
from platoon.live.inference.vllm import InferenceDown, InferenceError, InferenceRefused, VLLMService
from platoon.live.inference.weights import WeightStore

pytestmark = pytest.mark.live


class Rollout:
    """A rollout's session object, as ``_FirstCall`` is one (it lives as long as the rollout)."""


WEIGHTS = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}


def service(cluster: FakeCluster, tmp_path, **kwargs) -> VLLMService:
    kwargs.setdefault("recheck_s", 0.2)
    return VLLMService(cluster.urls, served_name="the-model", weights=WeightStore(tmp_path / "weights", tmp_path),
                       transport=cluster.transport, **kwargs)


def run(coro):
    return asyncio.run(coro)


def test_a_prompt_goes_as_token_ids_and_the_sample_is_the_ids_and_logprobs_the_server_sampled(tmp_path):
    cluster = FakeCluster(1)

    async def go():
        s = service(cluster, tmp_path)
        out = await s.sample([5, 6, 7], max_new_tokens=4, temperature=0.7, seed=11, stop=[[99]])
        await s.aclose()
        return out

    sample = run(go())
    sent = cluster.servers[0].requests[0]
    assert sent["prompt"] == [5, 6, 7] and sent["max_tokens"] == 4 and sent["temperature"] == 0.7
    assert sent["seed"] == 11 and sent["return_tokens_as_token_ids"] and sent["logprobs"] == 0
    assert sent["ignore_eos"] and sent["stop_token_ids"] == [99] and sent["model"] == "the-model"
    assert sample.tokens == tuple(tokens([5, 6, 7], 11, 0, 4)) and sample.logprobs == (-0.5,) * 4
    assert sample.version == 0 and sample.versions == () and sample.routing_id is None


def test_a_stop_of_several_tokens_ends_the_completion_where_it_occurs(tmp_path):
    cluster = FakeCluster(1)
    full = tokens([1], 3, 0, 6)

    async def go():
        s = service(cluster, tmp_path)
        return await s.sample([1], max_new_tokens=6, temperature=1.0, seed=3, stop=[full[2:4]])

    sample = run(go())
    assert sample.tokens == tuple(full[:4]) and len(sample.logprobs) == 4


def test_routed_experts_become_the_samples_routing_id(tmp_path):
    cluster = FakeCluster(1, routed=[[[1, 2]], [[0, 3]]])
    sample = run(service(cluster, tmp_path).sample([1], max_new_tokens=2, temperature=1.0, seed=0))
    assert isinstance(sample.routing_id, str) and len(sample.routing_id) == 32


def test_a_rollout_keeps_its_server_across_turns_and_a_new_one_goes_to_the_least_loaded(tmp_path):
    cluster = FakeCluster(2, delay_s=0.05)

    async def rollout(name: str, turns: int) -> None:
        rollout_session.set(Rollout())
        for t in range(turns):
            await s.sample([t], max_new_tokens=1, temperature=1.0, seed=t)

    async def go():
        await asyncio.gather(*(rollout(f"r{i}", 3) for i in range(6)))

    s = service(cluster, tmp_path)
    run(go())
    counts = [len(server.requests) for server in cluster.servers]
    assert counts == [9, 9]  # six rollouts spread three and three, each of its three turns on its own server


def test_each_sample_names_its_server_and_the_load_it_ran_beside(tmp_path):
    """Four requests at once over two servers: two at each, so each ran beside one other (the mean load its server
    had while it ran, itself included: the simulator's servers are fitted from it)."""
    cluster = FakeCluster(2, delay_s=0.2)

    async def go():
        s = service(cluster, tmp_path)
        return await asyncio.gather(*(s.sample([i], max_new_tokens=1, temperature=1.0, seed=i) for i in range(4)))

    samples = run(go())
    assert sorted(x.server for x in samples) == [0, 0, 1, 1]
    assert all(1.8 <= x.concurrency <= 2.0 for x in samples), [x.concurrency for x in samples]


def test_a_server_that_is_down_is_left_for_another_and_counted(tmp_path):
    cluster = FakeCluster(2)
    cluster.servers[0].down = True

    async def go():
        s = service(cluster, tmp_path)
        samples = [await s.sample([i], max_new_tokens=2, temperature=1.0, seed=i) for i in range(4)]
        return samples, s.step_metrics()

    samples, metrics = run(go())
    assert len(samples) == 4 and len(cluster.servers[1].requests) == 4
    assert metrics["inference/retries"] == 1 and metrics["inference/requests"] == 4
    assert metrics["inference/servers_up"] == 1


def test_when_no_server_answers_for_down_after_seconds_requests_fail_naming_each_server(tmp_path):
    cluster = FakeCluster(2)
    for server in cluster.servers:
        server.down = True

    async def go():
        s = service(cluster, tmp_path, down_after_s=0.5, retries=100)
        await s.sample([1], max_new_tokens=1, temperature=1.0, seed=0)

    with pytest.raises(InferenceDown) as down:
        run(go())
    said = str(down.value)
    assert "no inference server has answered for 0.5 s" in said
    assert "http://fake0:8000: ConnectError: connection refused" in said and "http://fake1:8000" in said


def test_a_request_that_hangs_times_out_and_is_answered_by_another_server(tmp_path):
    cluster = FakeCluster(2)
    cluster.servers[0].hang = True

    async def go():
        s = service(cluster, tmp_path, request_timeout_s=0.3)
        return await s.sample([1], max_new_tokens=2, temperature=1.0, seed=0)

    sample = run(go())
    assert len(sample.tokens) == 2 and len(cluster.servers[1].requests) == 1


def test_a_server_that_dies_mid_request_is_retried_elsewhere_and_the_request_counted_once(tmp_path):
    cluster = FakeCluster(2, delay_s=0.05)
    cluster.servers[0].die_after = 0

    async def go():
        s = service(cluster, tmp_path)
        rollout_session.set(Rollout())
        sample = await s.sample([4], max_new_tokens=3, temperature=1.0, seed=1)
        return sample, s.step_metrics()

    sample, metrics = run(go())
    assert sample.tokens == tuple(tokens([4], 1, 0, 3))
    assert metrics["inference/requests"] == 1 and metrics["inference/retries"] == 1
    assert [len(s.requests) for s in cluster.servers] == [1, 1]


def test_a_request_the_server_refuses_fails_at_once_without_retries(tmp_path):
    cluster = FakeCluster(2, status=400)
    with pytest.raises(InferenceError, match=r"refused /v1/completions \(HTTP 400\)"):
        run(service(cluster, tmp_path).sample([1], max_new_tokens=1, temperature=1.0, seed=0))
    assert sum(len(s.requests) for s in cluster.servers) == 1


def test_publish_writes_the_weights_and_syncs_every_server_pause_reload_version_resume(tmp_path):
    cluster = FakeCluster(2)

    async def go():
        s = service(cluster, tmp_path)
        await s.publish(WEIGHTS, 1)
        return s

    s = run(go())
    for server in cluster.servers:
        assert server.calls == ["/pause", "/collective_rpc", "/update_weight_version", "/resume"]
        assert server.loaded == [str(tmp_path / "weights" / "v000001")] and server.version == 1
    synced = s.step_metrics()["inference/weight_sync_s"]
    assert s.version == 1 and 0 < s.last_pause_s <= synced  # the pause is the sync's last part


def test_under_abort_a_request_in_flight_across_an_update_is_sent_again_on_the_new_weights(tmp_path):
    cluster = FakeCluster(1, delay_s=0.5)

    async def go():
        s = service(cluster, tmp_path, in_flight="abort")
        request = asyncio.ensure_future(s.sample([2], max_new_tokens=2, temperature=1.0, seed=5))
        await asyncio.sleep(0.1)
        await s.publish(WEIGHTS, 1)
        return await request, s.step_metrics()

    sample, metrics = run(go())
    assert sample.version == 1 and sample.tokens == tuple(tokens([2], 5, 1, 2)) and sample.versions == ()
    assert metrics["inference/resent"] == 1 and metrics["inference/requests"] == 1
    assert len(cluster.servers[0].requests) == 2


def test_under_keep_a_request_in_flight_across_an_update_records_both_versions(tmp_path):
    cluster = FakeCluster(1, delay_s=0.3)

    async def go():
        s = service(cluster, tmp_path, in_flight="keep")
        request = asyncio.ensure_future(s.sample([2], max_new_tokens=2, temperature=1.0, seed=5))
        await asyncio.sleep(0.1)
        await s.publish(WEIGHTS, 1)
        return await request

    sample = run(go())
    assert sample.version == 0 and sample.versions == (0, 1)  # staleness counts from the oldest
    assert cluster.servers[0].calls.count("/v1/completions") == 1


def test_a_server_down_during_an_update_is_brought_to_the_current_weights_before_it_serves_again(tmp_path):
    cluster = FakeCluster(2)

    async def go():
        s = service(cluster, tmp_path)
        cluster.servers[1].down = True
        await s.publish(WEIGHTS, 1)
        cluster.servers[1].down = False
        await asyncio.sleep(0.3)  # past recheck_s
        cluster.servers[0].down = True
        return await s.sample([1], max_new_tokens=1, temperature=1.0, seed=0)

    sample = run(go())
    assert cluster.servers[1].version == 1 and sample.version == 1
    assert cluster.servers[1].calls[-2:] == ["/resume", "/v1/completions"]


def test_start_refuses_a_server_that_serves_another_model_naming_its_url(tmp_path):
    cluster = FakeCluster(2)
    cluster.servers[1].served = "someone-else"
    with pytest.raises(InferenceRefused, match="inference server http://fake1:8000 serves 'someone-else', not "
                                               "train.model_name 'the-model'"):
        run(service(cluster, tmp_path).start())


def test_start_refuses_a_server_that_does_not_answer(tmp_path):
    cluster = FakeCluster(1)
    cluster.servers[0].down = True
    with pytest.raises(InferenceRefused, match="http://fake0:8000 does not answer /v1/models: ConnectError"):
        run(service(cluster, tmp_path).start())


def test_start_pushes_the_weights_it_was_built_with_as_its_version_a_resume_s_checkpoint(tmp_path):
    cluster = FakeCluster(1)

    async def go():
        s = service(cluster, tmp_path, initial_weights=lambda: WEIGHTS, version=7)
        await s.start()
        return await s.sample([1], max_new_tokens=1, temperature=1.0, seed=0)

    sample = run(go())
    assert cluster.servers[0].loaded == [str(tmp_path / "weights" / "v000007")] and sample.version == 7


def test_the_store_keeps_the_newest_versions_whole(tmp_path):
    from safetensors.torch import load_file

    store = WeightStore(tmp_path / "w", tmp_path, keep=2)
    (tmp_path / "config.json").write_text("{}")
    tied = torch.ones(2, 2)
    for v in range(4):
        store.write({"a": tied * v, "b": tied * v}, v)
    assert store.versions() == [2, 3]
    assert (store.path(3) / "config.json").is_file() and not list(store.root.glob(".*partial"))
    assert torch.equal(load_file(str(store.path(3) / "model.safetensors"))["a"], tied * 3)
    shared = torch.zeros(3)
    store.write({"embed": shared, "lm_head": shared}, 4)  # tied: one storage, two names
    assert set(load_file(str(store.path(4) / "model.safetensors"))) == {"embed", "lm_head"}
