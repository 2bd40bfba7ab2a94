"""The GRPO trainer: Tinker's losses (per token, absolute clip bounds, a token mean), the optimizer's settings, no
update for a zero objective, the zero-advantage filter, KL, entropy, minibatches and exact checkpoints."""

from __future__ import annotations

import math

import pytest
import torch

from platoon.config.models import ModelConfig, OptimizerConfig, TrainConfig, WorkflowConfig
from platoon.live.inference.model import TinyConfig, TinyPolicy
from platoon.live.training.trainer import GRPOTrainer, Trainer, dumps_state, loads_state

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


def trainer(p: TinyPolicy, loss_fn: str = "cispo", *, config: dict | None = None, **kw) -> GRPOTrainer:
    """A trainer with a learning rate that moves the tiny policy (0.4.0's default is for LoRA on large models)."""
    return GRPOTrainer(p, loss_fn=loss_fn, loss_fn_config=config, **{"learning_rate": 1e-2, **kw})


def test_it_is_a_trainer_built_from_the_config():
    cfg = TrainConfig(model_name="tiny", renderer_name="role_colon",
                      optimizer=OptimizerConfig(learning_rate=1e-3, beta1=0.8, beta2=0.9, eps=1e-6, weight_decay=0.1,
                                                grad_clip_norm=2.0),
                      loss_fn="ppo", loss_fn_config={"clip_high_threshold": 1.3, "kl_coef": 0.05, "entropy_coef": 0.01},
                      workflow_config=WorkflowConfig(filter_zero_advantage_datums=False,
                                                     rollout_config={"inference_params": {"temperature": 0.5}}),
                      num_minibatches=2, seed=4)
    t = GRPOTrainer.from_config(policy(), cfg, ModelConfig())
    assert isinstance(t, Trainer)
    # The threshold left out is the loss's own default: ppo's 0.8 (Tinker's epsilon of 0.2).
    assert t.loss == ("ppo", 0.8, 1.3, 0.05, 0.01) and (t.zero_at_zero, t.filter_zero_advantage) == (False, False)
    assert (t.num_minibatches, t.grad_clip_norm, t.temperature, t.reference is not None) == (2, 2.0, 0.5, True)
    group = t.optimizer.param_groups[0]
    assert isinstance(t.optimizer, torch.optim.AdamW)
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (1e-3, (0.8, 0.9), 1e-6, 0.1)


def test_the_defaults_are_0_4_0s():
    t = GRPOTrainer.from_config(policy(), TrainConfig(model_name="tiny", renderer_name="role_colon"), ModelConfig())
    assert t.loss == ("cispo", 0.0, 5.0, 0.0, 0.0) and (t.zero_at_zero, t.filter_zero_advantage) == (True, True)
    group = t.optimizer.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (3e-5, (0.9, 0.95), 1e-8, 0.0)
    assert t.grad_clip_norm == 0.0 and t.reference is None


@pytest.mark.parametrize("loss_fn", ["ppo", "importance_sampling", "cispo"])
def test_a_positive_advantage_raises_the_sampled_tokens_and_a_negative_one_lowers_them(loss_fn):
    for sign in (1.0, -1.0):
        p = policy()
        d = datum([1, 2, 3, 4, 5], 2, sign, p)
        before = target_logprob(p, d)
        metrics = trainer(p, loss_fn).train_step([d], version=0)
        assert (target_logprob(p, d) - before) * sign > 0
        assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and metrics["clip_fraction"] == 0.0
        assert metrics["optimizer_steps"] == 1.0 and metrics["tokens"] == 3.0


@pytest.mark.parametrize("loss_fn", ["ppo", "importance_sampling", "cispo"])
def test_each_loss_is_tinkers_per_token_formula_with_absolute_clip_bounds_over_the_tokens(loss_fn):
    # Sampling log-probabilities 0.5 below the current ones: r = e^0.5 = 1.65 on every sampled token.
    p = policy()
    ds = [datum([1, 2, 3, 4, 5], 2, 1.0, p, shift=-0.5), datum([1, 6, 7], 2, -2.0, p, shift=-0.5)]
    logp = [target_logprob(p, d) for d in ds]  # the sums of each datum's 3 and 1 sampled tokens' log-probabilities
    r = math.exp(0.5)
    config = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    metrics = trainer(p, loss_fn, config=config).train_step(ds, version=0)
    per_token = {  # -(sum over the sampled tokens) for A = 1 on 3 tokens and A = -2 on 1
        "importance_sampling": -(3 * r * 1.0 + r * -2.0),
        "ppo": -(3 * min(r, 1.2) * 1.0 + min(r * -2.0, 1.2 * -2.0)),  # r clipped to 1.2, not to 1 + 1.2
        "cispo": -(min(r, 1.2) * 1.0 * logp[0] + min(r, 1.2) * -2.0 * logp[1]),
    }[loss_fn]
    assert metrics["pg_loss"] == pytest.approx(per_token / 4, rel=1e-4)  # a mean over the batch's 4 tokens
    assert metrics["clip_fraction"] == (0.0 if loss_fn == "importance_sampling" else 1.0)


def test_cispos_default_bounds_leave_a_ratio_below_5_unclipped():
    p = policy()
    d = datum([1, 2, 3, 4], 1, 1.0, p, shift=-1.0)  # r = e
    metrics = trainer(p, "cispo").train_step([d], version=0)
    assert metrics["clip_fraction"] == 0.0 and metrics["ratio_max"] == pytest.approx(math.e, rel=1e-4)


@pytest.mark.parametrize("loss_fn", ["ppo", "importance_sampling", "cispo"])
@pytest.mark.parametrize("filtered", [True, False])
def test_a_zero_objective_makes_no_update_even_with_adams_momentum(loss_fn, filtered):
    p = policy()
    t = trainer(p, loss_fn, filter_zero_advantage=filtered)
    t.train_step([datum([1, 2, 3, 4], 1, 1.0, p)], version=0)  # Adam now has momentum that a step would apply
    before = weights(p)
    ds = [datum([1, 2, 3, 4], 1, 0.0, p), datum([1, 5, 6], 1, 0.0, p, shift=-0.5)]
    metrics = t.train_step(ds, version=1)
    assert all(torch.equal(a, b) for a, b in zip(before, weights(p), strict=True))
    assert (metrics["optimizer_steps"], metrics["zero_advantage_share"], t.steps) == (0.0, 1.0, 1)
    assert metrics["filtered_datums"] == (2.0 if filtered else 0.0)


def test_the_zero_advantage_filter_leaves_the_gradient_as_it_was():
    ds_of = lambda p: [datum([1, 2, 3, 4], 1, 1.0, p), datum([1, 5, 6, 7, 8], 1, 0.0, p),  # noqa: E731
                       datum([1, 6, 2], 1, -0.5, p, shift=0.2)]
    runs = {}
    for filtered in (True, False):
        p = policy()
        metrics = trainer(p, "ppo", filter_zero_advantage=filtered).train_step(ds_of(p), version=0)
        runs[filtered] = (weights(p), metrics)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(runs[True][0], runs[False][0], strict=True))
    assert (runs[True][1]["filtered_datums"], runs[False][1]["filtered_datums"]) == (1.0, 0.0)
    assert runs[True][1]["pg_loss"] == pytest.approx(runs[False][1]["pg_loss"], rel=1e-5)


def test_with_an_entropy_term_zero_advantages_still_train_and_nothing_is_filtered():
    p = policy()
    before = weights(p)
    metrics = trainer(p, config={"entropy_coef": 0.1}).train_step([datum([1, 2, 3, 4], 1, 0.0, p)], version=0)
    assert metrics["optimizer_steps"] == 1.0 and metrics["filtered_datums"] == 0.0
    assert any(not torch.equal(a, b) for a, b in zip(before, weights(p), strict=True))


def test_ppo_clips_what_has_moved_too_far_and_the_others_do_not():
    # Sampling log-probabilities 1.0 below the current ones: r = e, above ppo's default bound of 1.2.
    for loss_fn, moves in (("ppo", False), ("importance_sampling", True), ("cispo", True)):
        p = policy()
        d = datum([1, 2, 3, 4], 1, 1.0, p, shift=-1.0)
        before = weights(p)
        metrics = trainer(p, loss_fn, config={}).train_step([d], version=0)
        changed = any(not torch.equal(a, b) for a, b in zip(before, weights(p), strict=True))
        assert changed == moves, loss_fn
        assert metrics["clip_fraction"] == (1.0 if loss_fn == "ppo" else 0.0)
        assert metrics["ratio_max"] == pytest.approx(math.e, rel=1e-4)
    # With a negative advantage the same ratio is not clipped by ppo: min(rA, c(r)A) takes the unclipped term.
    p = policy()
    d = datum([1, 2, 3, 4], 1, -1.0, p, shift=-1.0)
    before = target_logprob(p, d)
    trainer(p, "ppo", config={}).train_step([d], version=0)
    assert target_logprob(p, d) < before


def test_the_kl_term_pulls_back_toward_the_initial_policy():
    p = policy()
    t = trainer(p, config={"kl_coef": 1.0})
    d = datum([1, 2, 3, 4], 1, 1.0, p)
    for v in range(5):
        t.train_step([d], version=v)
    moved = target_logprob(p, d)
    zero = dict(d, advantage=0.0)
    metrics = {}
    for v in range(5, 25):
        metrics = t.train_step([zero], version=v)
    assert target_logprob(p, d) < moved and metrics["kl"] > 0 and metrics["optimizer_steps"] == 1.0
    assert metrics["loss"] == pytest.approx(metrics["pg_loss"] + 1.0 * metrics["kl"], rel=1e-3)


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
    t = trainer(p, config={"entropy_coef": 0.1}, learning_rate=1e-3)
    for v in range(5):
        metrics = t.train_step([d], version=v)
    assert entropy() > 1.5 * before and metrics["entropy"] > 0


def test_gradient_clipping_reports_the_norm_before_clipping_and_0_does_not_clip():
    def step(clip: float) -> tuple[float, list[torch.Tensor]]:
        p = policy()
        d = datum([1, 2, 3, 4, 5, 6], 1, 50.0, p)
        metrics = trainer(p, grad_clip_norm=clip, learning_rate=0.1, beta1=0.0, beta2=0.0).train_step([d], version=0)
        return metrics["grad_norm"], weights(p)

    (norm, clipped), (norm_0, unclipped) = step(0.1), step(0.0)
    assert norm == pytest.approx(norm_0) and norm > 0.1
    assert any(not torch.allclose(a, b) for a, b in zip(clipped, unclipped, strict=True))
    p = policy()
    with pytest.raises(ValueError, match="one of cispo, importance_sampling, ppo"):
        GRPOTrainer(p, loss_fn="dro")
    with pytest.raises(ValueError, match="loss_fn_config.clip_ratio: unknown key"):
        GRPOTrainer(p, loss_fn_config={"clip_ratio": 0.2})


def test_metrics_of_a_step_and_a_step_without_datums():
    p = policy()
    before = weights(p)
    t = trainer(p)
    empty = t.train_step([], version=3)
    assert empty["optimizer_steps"] == 0.0 and empty["datums"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, weights(p), strict=True)) and t.steps == 0
    ds = [datum([1, 2, 3], 1, 1.0, p, version=1), datum([1, 4, 5, 6], 2, -1.0, p, version=3)]
    m = t.train_step(ds, version=3)
    assert (m["datums"], m["tokens"], m["staleness_mean"], m["staleness_max"]) == (2.0, 4.0, 1.0, 2.0)
    assert m["advantage_abs_mean"] == 1.0 and t.steps == 1
    assert {"loss", "pg_loss", "entropy", "kl", "clip_fraction", "ratio_mean", "grad_norm", "lr",
            "filtered_datums"} <= set(m)
    with pytest.raises(ValueError, match="mask must be 0"):
        t.train_step([dict(ds[0], mask=[1, 1, 1])], version=3)
    with pytest.raises(ValueError, match="one entry each"):
        t.train_step([dict(ds[0], logprobs=[0.0])], version=3)


def batch(p: TinyPolicy) -> list[dict]:
    return [datum([1, 2 + i % 5, 3, 4 + i % 3, 5], 2, (-1.0) ** i * (1 + i % 3), p, shift=0.1 * (i % 4))
            for i in range(8)]


def test_a_checkpoint_restores_model_optimizer_reference_and_shuffling_exactly(tmp_path):
    kw = {"num_minibatches": 3, "loss_fn_config": {"kl_coef": 0.1, "entropy_coef": 0.01}, "seed": 7,
          "learning_rate": 1e-2}
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
    with_kl = GRPOTrainer(policy(), loss_fn_config={"kl_coef": 0.1})
    without = GRPOTrainer(policy())
    with pytest.raises(ValueError, match="KL reference"):
        without.load_state_dict(with_kl.state_dict())
    with pytest.raises(ValueError, match="format"):
        without.load_state_dict(dict(without.state_dict(), format=0))


def test_published_weights_are_copies():
    p = policy()
    t = trainer(p)
    published = t.policy_state_dict()
    t.train_step([datum([1, 2, 3, 4], 1, 1.0, p)], version=0)
    assert not torch.equal(published["head.weight"], p.state_dict()["head.weight"])
