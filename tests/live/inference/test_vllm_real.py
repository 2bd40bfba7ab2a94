"""``platoon train`` against a real vLLM server (vLLM's CPU build, in an environment of its own: ``make vllm-env``; ``make
test`` runs these beside the other tests). A tiny random Llama with its tokenizer is built here (head dimension 64:
the CPU attention refuses 16). Checked: the datums are exactly the ids vLLM sampled, the server's log-probabilities
follow the trainer's weights after each publish, a resume pushes its checkpoint's weights before any rollout, and a
SIGKILLed trainer leaves no server running."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.vllm, pytest.mark.live, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
PYTHON = os.environ.get("PLATOON_VLLM_PYTHON") or str(ROOT / ".vllm-env" / "bin" / "python")
SERVER_ARGS = ["--max-model-len", "2048", "--dtype", "float32"]
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
TOLERANCE = 1e-4  # |server - trainer| per token log-probability: float32 on both sides measured 5e-7

if not Path(PYTHON).is_file():
    pytest.skip(f"no vLLM environment at {PYTHON} (make vllm-env sets it up)", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from hf_kit import save_vllm_chat_model

    return save_vllm_chat_model(tmp_path_factory.mktemp("model"))


def launch_spec(port: int) -> dict:
    return {"python": PYTHON, "port": port, "args": SERVER_ARGS, "env": SERVER_ENV, "start_timeout_seconds": 1200}


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    """One server for the module's runs (``servers:`` mode), launched as ``launch:`` would."""
    from platoon.config.inference import LaunchConfig
    from platoon.live.inference.launch import Launched

    launched = Launched.start(LaunchConfig(**launch_spec(free_port())), model_dir, str(model_dir),
                              tmp_path_factory.mktemp("server"))
    try:
        asyncio.run(launched.wait_healthy(1200))
        yield launched.urls[0]
    finally:
        launched.stop()


def config(tmp_path: Path, model_dir: Path, steps: int, inference: dict) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "environments": [{"name": "ns", "env": "platoon-number-search", "workflow_config": {"group_size": 2}}],
        "train": {"model_name": str(model_dir), "renderer_name": "chat_template", "max_training_steps": steps,
                  "batch_size": 2, "seed": 3, "optimizer": {"learning_rate": 1e-3},
                  "max_staleness": 0,  # every datum sampled by the weights it trains: any mismatch is the engine's
                  # an untrained model scores 0 everywhere: the entropy bonus makes every step update the weights
                  "loss_fn_config": {"clip_low_threshold": 0.0, "clip_high_threshold": 5.0, "entropy_coef": 0.01},
                  "workflow_config": {"rollout_config": {"max_steps": 2,
                                                         "inference_params": {"max_completion_tokens": 12}}},
                  "inference": {"engine": "vllm", **inference}},
        "eval": {"every": 0},
        "trace": {"group_every": 1},
    }))
    return path


def rows(run: Path) -> list[dict]:
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "trainer/datums" in r]


def spied(monkeypatch) -> tuple[list, list]:
    """What the service sampled and what the trainer trained, recorded as they pass."""
    from platoon.live.inference.vllm import VLLMService
    from platoon.live.training.trainer import GRPOTrainer

    samples, datums = [], []
    sample, train_step = VLLMService.sample, GRPOTrainer.train_step

    async def recorded_sample(self, prompt_tokens, **kwargs):
        out = await sample(self, prompt_tokens, **kwargs)
        samples.append(out)
        return out

    def recorded_train_step(self, batch, *, version):
        datums.extend(dict(d) for d in batch)
        return train_step(self, batch, version=version)

    monkeypatch.setattr(VLLMService, "sample", recorded_sample)
    monkeypatch.setattr(GRPOTrainer, "train_step", recorded_train_step)
    return samples, datums


def runs_of(mask: list[int]) -> list[tuple[int, int]]:
    out, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    return out


def server_logprobs(url: str, served: str, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    import httpx

    body = {"model": served, "prompt": prompt, "max_tokens": n, "temperature": 1.0, "seed": 1, "logprobs": 0,
            "return_tokens_as_token_ids": True, "return_token_ids": True, "ignore_eos": True}
    choice = httpx.post(f"{url}/v1/completions", json=body, timeout=120).json()["choices"][0]
    return choice["token_ids"], choice["logprobs"]["token_logprobs"]


def trainer_logprobs(model, prompt: list[int], completion: list[int]) -> list[float]:
    import torch

    tokens = torch.tensor([prompt + completion])
    mask = torch.tensor([[0] * len(prompt) + [1] * len(completion)], dtype=torch.float32)
    with torch.no_grad():
        return model.policy_logprobs(tokens, mask, temperature=1.0)[0, len(prompt):].tolist()


def checkpoint_policy(run: Path, model_dir: Path):
    from platoon.live.inference.hf import HFPolicy
    from platoon.live.training.checkpoint import LiveRunDir
    from platoon.live.training.trainer import loads_state

    policy = HFPolicy.from_pretrained(model_dir, device="cpu")
    policy.load_state_dict(loads_state(LiveRunDir(run).resume_point().trainer_state)["model"])
    return policy


def test_training_on_vllm_trains_the_ids_it_sampled_and_its_weights_follow_the_trainer(
        tmp_path, model_dir, server, monkeypatch):
    from platoon.live.inference.hf import HFPolicy
    from platoon.live.launch import command
    from platoon.sim.calibrate import calibrate

    samples, datums = spied(monkeypatch)
    run = command.train(config(tmp_path, model_dir, 3, {"servers": [server]}), out=tmp_path / "run", progress=False)
    sampled = {s.tokens for s in samples}
    assert datums and samples
    for d in datums:  # every masked run of a datum is one completion vLLM sampled, with its log-probabilities
        for start, end in runs_of(d["mask"]):
            assert tuple(d["tokens"][start:end]) in sampled
    by_tokens = {s.tokens: s.logprobs for s in samples}
    for d in datums:
        for start, end in runs_of(d["mask"]):
            assert tuple(d["logprobs"][start:end]) == by_tokens[tuple(d["tokens"][start:end])]
    got = rows(run)
    assert [r["step"] for r in got] == [0, 1, 2]
    for r in got:  # the sampler's weights are the trainer's at every step: no mismatch beyond float error
        assert r["trainer/staleness_max"] == 0
        assert abs(r["trainer/mismatch/is_ratio_mean"] - 1.0) < 1e-3, r
        assert r["inference/weight_sync_s"] > 0 and r["inference/servers_up"] == 1
    prompt = [5, 6, 7, 8, 9]
    completion, served = server_logprobs(server, str(model_dir), prompt, 16)
    trained = trainer_logprobs(checkpoint_policy(run, model_dir), prompt, completion)
    initial = trainer_logprobs(HFPolicy.from_pretrained(model_dir, device="cpu"), prompt, completion)
    assert max(abs(a - b) for a, b in zip(served, trained, strict=True)) < TOLERANCE
    assert max(abs(a - b) for a, b in zip(served, initial, strict=True)) > 100 * TOLERANCE  # the weights moved
    fitted = calibrate(run)  # the simulator's servers, fitted from the client's spans of the real one
    service = fitted.sim["service"]  # a request alone takes base_s + per_sequence_s: some time, however split
    assert service["pause_s"] > 0 and service["base_s"] + service["per_sequence_s"] > 0, fitted.fits


def test_a_resume_pushes_its_checkpoints_weights_before_any_rollout(tmp_path, model_dir, server):
    import httpx

    from platoon.live.launch import command

    run = command.train(config(tmp_path, model_dir, 2, {"servers": [server]}), out=tmp_path / "run", progress=False)
    # the server forgets the run: it serves the initial weights again, as a restarted server would
    for path, body in (("/pause", None), ("/collective_rpc", {"method": "reload_weights",
                                                              "kwargs": {"weights_path": str(model_dir)}}),
                       ("/resume", None)):
        assert httpx.post(f"{server}{path}", json=body, timeout=120).status_code == 200
    command.train(resume=run, steps=3, progress=False)
    resumed = rows(run)[-1]
    assert resumed["step"] == 2 and abs(resumed["trainer/mismatch/is_ratio_mean"] - 1.0) < 1e-3, resumed
    prompt = [9, 8, 7]
    completion, served = server_logprobs(server, str(model_dir), prompt, 8)
    trained = trainer_logprobs(checkpoint_policy(run, model_dir), prompt, completion)
    assert max(abs(a - b) for a, b in zip(served, trained, strict=True)) < TOLERANCE


def test_sigkill_of_the_trainer_leaves_no_server_it_launched(tmp_path, model_dir):
    from process_tree import tree_of, wait_gone

    port = free_port()
    cfg = config(tmp_path, model_dir, 50, {"launch": launch_spec(port)})
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "platoon", "train", str(cfg), "--out", str(run)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "NO_COLOR": "1"})
    began, tree = time.monotonic(), {}
    try:
        while not (run / "metrics.jsonl").is_file() or not rows(run):  # a step trained: the server serves
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() - began < 1500, "no step within 25 minutes"
            tree.update(tree_of(proc.pid))
            time.sleep(1.0)
        tree.update(tree_of(proc.pid))
        servers = [pid for pid, cmd in tree.items() if "vllm.entrypoints.openai.api_server" in cmd]
        assert servers, tree
        log = (run / "inference" / "server-0.log").read_text()
        assert "Application startup complete" in log
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        left, took = wait_gone(tree, 30.0)
        assert left == [], {pid: tree[pid] for pid in left}
    finally:
        if proc.poll() is None:
            proc.kill()
