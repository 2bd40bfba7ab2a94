"""The GRPO trainer: the objectives' gradients, clipping, KL, entropy, minibatches and exact checkpoints."""

from __future__ import annotations

import math

import pytest
import torch

from platoon.config.models import LossConfig, ModelConfig, TrainConfig
from platoon.live.model import TinyConfig, TinyPolicy
from platoon.live.trainer import GRPOTrainer, Trainer, dumps_state, loads_state

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def policy(seed: int = 0) -> TinyPolicy:
    return TinyPolicy(TinyConfig(vocab_size=12, max_len=16, d_model=16, n_heads=2), device="cpu", seed=seed)


def datum(tokens, gen_from, advantage, p: TinyPolicy, *, shift: float = 0.0, version: int = 0) -> dict:
    """A datum whose sampled tokens are tokens[gen_from:], with sampling log-probabilities from ``p`` (+ shift)."""
    mask = [0] * gen_from + [1] * (len(tokens) - gen_from)
    with torch.no_grad():
        lp = p.policy_logprobs([tokens], [mask])[0].tolist()
    return {"tokens": list(tokens), "mask": mask, "logprobs": [x + shift if m else 0.0 for x, m in zip(lp, mask, strict=True)],
            "advantage": advantage, "version": version}


def target_logprob(p: TinyPolicy, d: dict) -> float:
    with torch.no_grad():
        return float(p.policy_logprobs([d["tokens"]], [d["mask"]]).sum())


def weights(p: TinyPolicy) -> list[torch.Tensor]:
    return [v.clone() for v in p.state_dict().values()]


def test_it_is_a_trainer_built_from_the_config():
    cfg = TrainConfig(model_name="tiny", renderer_name="role_colon", loss=LossConfig(objective="cispo", clip_low_threshold=0.1, clip_high_threshold=0.3,
                                      kl_coef=0.05, entropy_coef=0.01), num_minibatches=2, seed=4)
    t = GRPOTrainer.from_config(policy(), cfg, ModelConfig(lr=1e-3, weight_decay=0.1, grad_clip=None))
    assert isinstance(t, Trainer)
    assert (t.objective, t.clip_low, t.clip_high, t.kl_coef, t.entropy_coef) == ("cispo", 0.1, 0.3, 0.05, 0.01)
    assert (t.num_minibatches, t.grad_clip, t.reference is not None) == (2, None, True)
    assert t.optimizer.param_groups[0]["lr"] == 1e-3 and t.optimizer.param_groups[0]["weight_decay"] == 0.1


@pytest.mark.parametrize("objective", ["ppo", "importance_sampling", "cispo"])
def test_a_positive_advantage_raises_the_sampled_tokens_and_a_negative_one_lowers_them(objective):
    for sign in (1.0, -1.0):
        p = policy()
        d = datum([1, 2, 3, 4, 5], 2, sign, p)
        before = target_logprob(p, d)
        metrics = GRPOTrainer(p, objective=objective, lr=1e-2).train_step([d], version=0)
        assert (target_logprob(p, d) - before) * sign > 0
        assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and metrics["clip_fraction"] == 0.0
        assert metrics["optimizer_steps"] == 1.0 and metrics["tokens"] == 3.0


@pytest.mark.parametrize("objective", ["ppo", "importance_sampling", "cispo"])
def test_zero_advantages_without_kl_or_entropy_change_nothing(objective):
    p = policy()
    before = weights(p)
    ds = [datum([1, 2, 3, 4], 1, 0.0, p), datum([1, 5, 6], 1, 0.0, p, shift=-0.5)]
    metrics = GRPOTrainer(p, objective=objective).train_step(ds, version=0)
    assert all(torch.equal(a, b) for a, b in zip(before, weights(p), strict=True))
    assert metrics["zero_advantage_share"] == 1.0 and metrics["grad_norm"] == 0.0


def test_ppo_clips_what_has_moved_too_far_and_importance_sampling_does_not():
    # Sampling log-probabilities 1.0 below the current ones: r = e > 1 + clip_high on every token.
    for objective, moves in (("ppo", False), ("importance_sampling", True), ("cispo", True)):
        p = policy()
        d = datum([1, 2, 3, 4], 1, 1.0, p, shift=-1.0)
        before = weights(p)
        metrics = GRPOTrainer(p, objective=objective).train_step([d], version=0)
        changed = any(not torch.equal(a, b) for a, b in zip(before, weights(p), strict=True))
        assert changed == moves, objective
        assert metrics["clip_fraction"] == 1.0
        assert metrics["ratio_max"] == pytest.approx(math.e, rel=1e-4)
    # With a negative advantage the same ratio is not clipped by ppo: min(rA, c(r)A) takes the unclipped term.
    p = policy()
    d = datum([1, 2, 3, 4], 1, -1.0, p, shift=-1.0)
    before = target_logprob(p, d)
    GRPOTrainer(p, objective="ppo").train_step([d], version=0)
    assert target_logprob(p, d) < before


def test_the_kl_term_pulls_back_toward_the_initial_policy():
    p = policy()
    trainer = GRPOTrainer(p, kl_coef=1.0, lr=1e-2)
    d = datum([1, 2, 3, 4], 1, 1.0, p)
    for v in range(5):
        trainer.train_step([d], version=v)
    moved = target_logprob(p, d)
    zero = dict(d, advantage=0.0)
    metrics = {}
    for v in range(5, 25):
        metrics = trainer.train_step([zero], version=v)
    assert target_logprob(p, d) < moved and metrics["kl"] > 0
    assert metrics["loss"] == pytest.approx(metrics["pg_loss"] + 1.0 * metrics["kl"] * 3, rel=1e-3)


def test_the_entropy_bonus_flattens_the_policy():
    p = policy()
    with torch.no_grad():
        p.module.head.weight.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(1))
    d = datum([1, 2, 3, 4, 5], 1, 0.0, p)

    def entropy() -> float:
        with torch.no_grad():
            return float(p.policy_logprobs([d["tokens"]], [d["mask"]], with_entropy=True)[1].sum())

    before = entropy()
    # (Adam's first steps move every weight by about lr whatever its gradient: a small lr keeps them small.)
    trainer = GRPOTrainer(p, entropy_coef=0.1, lr=1e-3)
    for v in range(5):
        metrics = trainer.train_step([d], version=v)
    assert entropy() > 1.5 * before and metrics["entropy"] > 0


def test_gradient_clipping_reports_the_norm_before_clipping():
    p = policy()
    d = datum([1, 2, 3, 4, 5, 6], 1, 50.0, p)
    metrics = GRPOTrainer(p, grad_clip=0.1).train_step([d], version=0)
    assert metrics["grad_norm"] > 0.1
    with pytest.raises(ValueError, match="objective"):
        GRPOTrainer(p, objective="dpo")


def test_metrics_of_a_step_and_a_step_without_datums():
    p = policy()
    before = weights(p)
    trainer = GRPOTrainer(p)
    empty = trainer.train_step([], version=3)
    assert empty["optimizer_steps"] == 0.0 and empty["datums"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, weights(p), strict=True)) and trainer.steps == 0
    ds = [datum([1, 2, 3], 1, 1.0, p, version=1), datum([1, 4, 5, 6], 2, -1.0, p, version=3)]
    m = trainer.train_step(ds, version=3)
    assert (m["datums"], m["tokens"], m["staleness_mean"], m["staleness_max"]) == (2.0, 4.0, 1.0, 2.0)
    assert m["advantage_abs_mean"] == 1.0 and trainer.steps == 1
    assert {"loss", "pg_loss", "entropy", "kl", "clip_fraction", "ratio_mean", "grad_norm", "lr"} <= set(m)
    with pytest.raises(ValueError, match="mask must be 0"):
        trainer.train_step([dict(ds[0], mask=[1, 1, 1])], version=3)
    with pytest.raises(ValueError, match="one entry each"):
        trainer.train_step([dict(ds[0], logprobs=[0.0])], version=3)


def batch(p: TinyPolicy) -> list[dict]:
    return [datum([1, 2 + i % 5, 3, 4 + i % 3, 5], 2, (-1.0) ** i * (1 + i % 3), p, shift=0.1 * (i % 4))
            for i in range(8)]


def test_a_checkpoint_restores_model_optimizer_reference_and_shuffling_exactly(tmp_path):
    kw = {"num_minibatches": 3, "kl_coef": 0.1, "entropy_coef": 0.01, "seed": 7}
    a = GRPOTrainer(policy(), **kw)
    ds = batch(a.policy)
    a.train_step(ds, version=0)
    saved = dumps_state(a.state_dict())
    (tmp_path / "trainer.pt").write_bytes(saved)
    m_a = [a.train_step(ds, version=v) for v in (1, 2)]
    b = GRPOTrainer(policy(seed=99), **kw)           # other weights, until the checkpoint is loaded
    b.load_state_dict(loads_state((tmp_path / "trainer.pt").read_bytes()))
    assert b.steps == 1
    m_b = [b.train_step(ds, version=v) for v in (1, 2)]
    assert m_a == m_b
    assert all(torch.equal(x, y) for x, y in zip(weights(a.policy), weights(b.policy), strict=True))
    # The shuffle is the trainer's own generator's: another seed splits the minibatches otherwise.
    c = GRPOTrainer(policy(seed=99), **dict(kw, seed=8))
    c.load_state_dict(loads_state(saved) | {"rng": torch.Generator().manual_seed(8).get_state()})
    assert [c.train_step(ds, version=v) for v in (1, 2)] != m_a


def test_a_checkpoint_must_agree_on_the_kl_reference():
    with_kl = GRPOTrainer(policy(), kl_coef=0.1)
    without = GRPOTrainer(policy())
    with pytest.raises(ValueError, match="KL reference"):
        without.load_state_dict(with_kl.state_dict())
    with pytest.raises(ValueError, match="format"):
        without.load_state_dict(dict(without.state_dict(), format=0))


def test_published_weights_are_copies():
    p = policy()
    trainer = GRPOTrainer(p)
    published = trainer.policy_state_dict()
    trainer.train_step([datum([1, 2, 3, 4], 1, 1.0, p)], version=0)
    assert not torch.equal(published["head.weight"], p.state_dict()["head.weight"])
