"""HFPolicy over a tiny randomly initialised Hugging Face causal LM built in a temp dir (no downloads); skipped
without transformers."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from live_harness import save_tiny_llama  # noqa: E402

from platoon.config.models import ModelConfig  # noqa: E402
from platoon.live.inference.hf import HFPolicy  # noqa: E402
from platoon.live.inference.model import PolicyModel  # noqa: E402
from platoon.live.inference.model_kinds import build_causal_policy  # noqa: E402
from platoon.live.training.trainer import GRPOTrainer  # noqa: E402

PROMPTS = [[1, 10, 12, 2], [1, 5, 2], [1, 30, 31, 2, 7, 3]]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), vocab_size=48, context=64)


def test_loads_from_a_local_directory_through_the_config(checkpoint):
    policy = build_causal_policy(str(checkpoint), ModelConfig(device="cpu"), vocab_size=10, max_len=10)
    assert isinstance(policy, HFPolicy) and isinstance(policy, PolicyModel)
    assert (policy.vocab_size, policy.max_len, policy.device) == (48, 64, torch.device("cpu"))
    with pytest.raises(FileNotFoundError, match="is neither a local directory"):
        HFPolicy.from_pretrained(checkpoint / "missing", device="cpu")


def test_sampling_is_batch_independent_and_matches_scoring(checkpoint):
    policy = HFPolicy.from_pretrained(checkpoint, device="cpu")
    together = policy.sample(PROMPTS, max_new_tokens=4, temperature=1.0, seeds=[1, 2, 3])
    alone = [policy.sample([p], max_new_tokens=4, temperature=1.0, seeds=[s])[0]
             for p, s in zip(PROMPTS, [1, 2, 3], strict=True)]
    assert [g.tokens for g in together] == [g.tokens for g in alone]
    assert all(len(g.tokens) == 4 for g in together)
    seqs = [p + list(g.tokens) for p, g in zip(PROMPTS, together, strict=True)]
    masks = [[0] * len(p) + [1] * len(g.tokens) for p, g in zip(PROMPTS, together, strict=True)]
    scored = policy.policy_logprobs(seqs, masks)
    for i, (p, g) in enumerate(zip(PROMPTS, together, strict=True)):
        assert scored[i, len(p):len(p) + 4].tolist() == pytest.approx(g.logprobs, abs=1e-4)


def test_the_trainer_trains_it_and_weights_round_trip(checkpoint, tmp_path):
    policy = HFPolicy.from_pretrained(checkpoint, device="cpu")
    gen = policy.sample(PROMPTS[:1], max_new_tokens=3, temperature=1.0, seeds=[7])[0]
    datum = {"tokens": PROMPTS[0] + list(gen.tokens), "mask": [0] * 4 + [1] * 3,
             "logprobs": [0.0] * 4 + list(gen.logprobs), "advantage": 1.0, "version": 0}
    before = policy.policy_logprobs([datum["tokens"]], [datum["mask"]]).sum().item()
    trainer = GRPOTrainer(policy, learning_rate=1e-2)
    for v in range(3):
        metrics = trainer.train_step([datum], version=v)
    after = policy.policy_logprobs([datum["tokens"]], [datum["mask"]]).sum().item()
    assert after > before and metrics["optimizer_steps"] == 1.0
    policy.save(tmp_path / "saved")
    again = HFPolicy.from_pretrained(tmp_path / "saved", device="cpu")
    assert again.sample(PROMPTS, max_new_tokens=2, temperature=1.0, seeds=[1, 2, 3]) == policy.sample(
        PROMPTS, max_new_tokens=2, temperature=1.0, seeds=[1, 2, 3])
