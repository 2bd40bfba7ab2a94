"""Training-inference mismatch in the GRPO trainer: its metrics, and truncated importance sampling (``tis_cap``)
against the sampler's log-probabilities, a separate engine's (docs/inference-engines.md)."""

from __future__ import annotations

import math

import pytest
import torch
from test_trainer import datum, policy, trainer, weights

from platoon.config.models import ModelConfig, TrainConfig
from platoon.live.training.trainer import GRPOTrainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TOKENS = [1, 2, 3, 4, 5, 6]


def test_an_engine_that_agrees_with_the_trainer_shows_no_mismatch():
    p = policy()
    metrics = trainer(p).train_step([datum(TOKENS, 2, 1.0, p)], version=0)
    assert metrics["mismatch/kl"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["mismatch/is_ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert "mismatch/truncated_share" not in metrics  # no correction, nothing cut


def test_a_sampler_off_by_a_known_log_ratio_is_measured_as_such():
    p = policy()
    metrics = trainer(p, tis_cap=2.0).train_step([datum(TOKENS, 2, 1.0, p, shift=-1.0)], version=0)
    w = math.e  # the trainer's probability over the sampler's, at every token
    assert metrics["mismatch/is_ratio_mean"] == pytest.approx(w, rel=1e-4)
    assert metrics["mismatch/kl"] == pytest.approx(w - 1 - 1.0, rel=1e-4)
    assert metrics["mismatch/truncated_share"] == 1.0


@pytest.mark.parametrize(("shift", "weighed"), [(math.log(2), 0.5), (-math.log(4), 2.0)])
def test_tis_weighs_each_token_by_the_ratio_truncated_at_the_cap(shift, weighed):
    """importance_sampling's loss is -r A: against the sampler (no correction) r = p/b; with tis, r = p/p_prox (1 at
    the first minibatch) times min(p_prox/b, cap). Below the cap the two agree; above it tis cuts the weight."""
    p = policy()
    plain = trainer(policy(), "importance_sampling").train_step([datum(TOKENS, 2, 1.0, p, shift=shift)], version=0)
    tis = trainer(policy(), "importance_sampling", tis_cap=2.0).train_step(
        [datum(TOKENS, 2, 1.0, p, shift=shift)], version=0)
    assert tis["pg_loss"] == pytest.approx(-weighed, rel=1e-4)
    assert plain["pg_loss"] == pytest.approx(-math.exp(-shift), rel=1e-4)


def test_with_no_mismatch_tis_changes_no_update():
    a, b = policy(), policy()
    d = datum(TOKENS, 2, 1.0, a)
    trainer(a, "ppo").train_step([dict(d)], version=0)
    trainer(b, "ppo", tis_cap=2.0).train_step([dict(d)], version=0)
    for x, y in zip(weights(a), weights(b), strict=True):
        assert torch.allclose(x, y, atol=1e-6)


def test_several_minibatches_weigh_against_the_weights_the_step_began_from():
    p = policy()
    data = [datum(TOKENS, 2, 1.0, p), datum([6, 5, 4, 3, 2, 1], 2, -1.0, p)]
    metrics = trainer(p, num_minibatches=2, tis_cap=2.0).train_step(data, version=0)
    assert metrics["optimizer_steps"] == 2.0
    # the second minibatch's proximal log-probabilities were taken before the first update: still no mismatch
    assert metrics["mismatch/is_ratio_mean"] == pytest.approx(1.0, abs=1e-5)


def test_the_config_turns_tis_on_for_vllm_and_off_for_builtin(tmp_path):
    builtin = TrainConfig(model_name="tiny", renderer_name="role_colon")
    assert GRPOTrainer.from_config(policy(), builtin, ModelConfig()).tis_cap is None
    on = TrainConfig(model_name="tiny", renderer_name="role_colon", inference={"correction": "tis", "tis_cap": 3.0})
    assert GRPOTrainer.from_config(policy(), on, ModelConfig()).tis_cap == 3.0
    vllm = TrainConfig(model_name=str(tmp_path), renderer_name="role_colon",
                       inference={"engine": "vllm", "servers": ["http://h:1"]})
    assert vllm.inference.corrects() and not vllm.model_copy(
        update={"inference": vllm.inference.model_copy(update={"correction": "off"})}).inference.corrects()
