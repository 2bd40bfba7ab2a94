"""The trainer of the live backend: a narrow protocol and the built-in GRPO-style trainer.

``GRPOTrainer.train_step(datums, version=v)`` takes one step's datums (``platoon.live.datums``: token ids, mask,
sampling log-probabilities, group-normalised advantage, sampling version) and makes one optimizer update per
minibatch, producing the weights of version ``v + 1``. For a datum with advantage A, tokens t where the mask is 1,
``r_t = exp(logp_t - logp_t^sampled)`` and ``c(r) = clip(r, 1 - clip_low, 1 + clip_high)``, the per-token policy
loss is

- ``ppo``:                 ``-min(r_t A, c(r_t) A)``
- ``importance_sampling``: ``-r_t A``
- ``cispo``:               ``-sg(c(r_t)) A logp_t``   (sg: no gradient through the weight)

plus ``kl_coef * (exp(q_t - logp_t) - (q_t - logp_t) - 1)`` (the k3 estimator of KL to the initial policy q)
and ``- entropy_coef * H_t`` (the entropy of the policy's distribution at t). A datum's loss is the **sum** over
its masked tokens (a multi-turn rollout's policy gradient sums over its actions), and a minibatch's loss is the
mean over its datums. With ``kl_coef = entropy_coef = 0`` a datum whose advantage is 0 contributes nothing.

Rules it keeps:
- AdamW over all parameters; the gradient's global norm is clipped to ``grad_clip`` (None: not clipped) and the
  norm before clipping is reported;
- ``num_minibatches > 1`` splits the datums, shuffled by the trainer's own seeded generator, into that many
  updates; its state is part of ``state_dict`` so that a resumed run shuffles as the uninterrupted one;
- a step without datums makes no update (and says so: ``optimizer_steps`` 0);
- ``state_dict()`` holds the model, the optimizer, the reference policy (when ``kl_coef > 0``), the generator and
  the step count; ``load_state_dict`` restores all of them; ``dumps_state``/``loads_state`` turn it into bytes and
  back (``torch.save``; loading reads tensors and plain data only).
"""

from __future__ import annotations

import copy
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import torch

from platoon.live.datums import check_datum
from platoon.live.model import pad_right

__all__ = ["GRPOTrainer", "Trainer", "dumps_state", "loads_state"]

STATE_FORMAT = 1
Objective = Literal["ppo", "importance_sampling", "cispo"]


@runtime_checkable
class Trainer(Protocol):
    """What a runtime asks of a trainer: steps, the weights to publish, and checkpoints."""

    def train_step(self, datums: Sequence[Mapping[str, Any]], *, version: int) -> dict[str, float]:
        """Train on one step's datums (policy ``version`` -> ``version + 1``); returns the step's metrics."""
        ...

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        """The current weights, as CPU copies, for ``ModelService.publish``."""
        ...

    def state_dict(self) -> dict[str, Any]:
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        ...


class GRPOTrainer:
    """The built-in trainer (see the module's doc for the objective)."""

    def __init__(
        self,
        policy: Any,
        *,
        objective: Objective = "ppo",
        clip_low: float = 0.2,
        clip_high: float = 0.28,
        kl_coef: float = 0.0,
        entropy_coef: float = 0.0,
        lr: float = 3e-3,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.99),
        grad_clip: float | None = 1.0,
        temperature: float = 1.0,
        num_minibatches: int = 1,
        seed: int = 0,
    ) -> None:
        if objective not in ("ppo", "importance_sampling", "cispo"):
            raise ValueError(f"unknown objective {objective!r}; one of ppo, importance_sampling, cispo")
        if num_minibatches < 1:
            raise ValueError(f"num_minibatches must be at least 1, got {num_minibatches}")
        if temperature <= 0:
            raise ValueError(f"the trainer scores at a temperature above 0, got {temperature}")
        self.policy = policy
        self.objective = objective
        self.clip_low, self.clip_high = float(clip_low), float(clip_high)
        self.kl_coef, self.entropy_coef = float(kl_coef), float(entropy_coef)
        self.grad_clip = grad_clip
        self.temperature = float(temperature)
        self.num_minibatches = int(num_minibatches)
        self.steps = 0
        self.optimizer = torch.optim.AdamW(policy.module.parameters(), lr=lr, betas=betas,
                                           weight_decay=weight_decay)
        self.reference = None
        if self.kl_coef > 0:
            self.reference = copy.deepcopy(policy)
            self.reference.module.requires_grad_(False)
        self._gen = torch.Generator().manual_seed(seed)

    @classmethod
    def from_config(cls, policy: Any, train: Any, model: Any) -> GRPOTrainer:
        """Built from a run's ``TrainConfig`` (its ``loss``, ``num_minibatches``, ``seed``) and ``ModelConfig``."""
        loss = train.loss
        return cls(policy, objective=loss.objective, clip_low=loss.clip_low_threshold,
                   clip_high=loss.clip_high_threshold, kl_coef=loss.kl_coef, entropy_coef=loss.entropy_coef,
                   lr=model.lr, weight_decay=model.weight_decay, grad_clip=model.grad_clip,
                   temperature=train.workflow_config.rollout_config.inference_params.temperature or 1.0,
                   num_minibatches=train.num_minibatches, seed=train.seed)

    # --- training ----------------------------------------------------------------------------------------------

    def train_step(self, datums: Sequence[Mapping[str, Any]], *, version: int) -> dict[str, float]:
        for d in datums:
            check_datum(d)
        n = len(datums)
        stale = [version - int(d["version"]) for d in datums]
        metrics: dict[str, float] = {
            "datums": float(n),
            "tokens": float(sum(sum(d["mask"]) for d in datums)),
            "advantage_abs_mean": sum(abs(float(d["advantage"])) for d in datums) / n if n else 0.0,
            "zero_advantage_share": sum(float(d["advantage"]) == 0.0 for d in datums) / n if n else 0.0,
            "staleness_mean": sum(stale) / n if n else 0.0,
            "staleness_max": float(max(stale, default=0)),
            "optimizer_steps": 0.0,
        }
        if n == 0:
            return metrics
        order = list(range(n))
        if self.num_minibatches > 1:
            order = torch.randperm(n, generator=self._gen).tolist()
        chunks = [order[i:: self.num_minibatches] for i in range(min(self.num_minibatches, n))]
        parts = [self._update([datums[i] for i in chunk]) for chunk in chunks]
        # Means over the minibatches, except the largest ratio, which is the largest of any.
        metrics.update({k: sum(p[k] for p in parts) / len(parts) for k in parts[0]})
        metrics["ratio_max"] = max(p["ratio_max"] for p in parts)
        metrics["optimizer_steps"] = float(len(chunks))
        metrics["lr"] = float(self.optimizer.param_groups[0]["lr"])
        self.steps += 1
        return metrics

    def _update(self, datums: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        device = self.policy.device
        tokens = pad_right([d["tokens"] for d in datums], device=device)
        mask = pad_right([d["mask"] for d in datums], dtype=torch.float32, device=device)
        old = pad_right([d["logprobs"] for d in datums], dtype=torch.float32, device=device)
        adv = torch.tensor([float(d["advantage"]) for d in datums], dtype=torch.float32, device=device)[:, None]
        self.policy.module.train()
        logp, entropy = self.policy.policy_logprobs(tokens, mask, temperature=self.temperature, with_entropy=True)
        ratio = torch.exp((logp - old) * mask)
        clipped = ratio.clamp(1.0 - self.clip_low, 1.0 + self.clip_high)
        if self.objective == "ppo":
            per_token = -torch.minimum(ratio * adv, clipped * adv)
        elif self.objective == "importance_sampling":
            per_token = -ratio * adv
        else:
            per_token = -clipped.detach() * adv * logp
        n = len(datums)
        pg = (per_token * mask).sum() / n
        loss = pg
        ent = (entropy * mask).sum() / n
        if self.entropy_coef:
            loss = loss - self.entropy_coef * ent
        kl_value = 0.0
        if self.reference is not None:
            with torch.no_grad():
                ref = self.reference.policy_logprobs(tokens, mask, temperature=self.temperature)
            delta = (ref - logp) * mask
            kl = ((torch.exp(delta) - delta - 1.0) * mask).sum() / n
            loss = loss + self.kl_coef * kl
            kl_value = float(kl.detach())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for p in self.policy.module.parameters() if p.grad is not None]
        max_norm = self.grad_clip if self.grad_clip is not None else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        self.optimizer.step()
        tokens_n = float(mask.sum().clamp(min=1.0))
        with torch.no_grad():
            outside = ((ratio < 1.0 - self.clip_low) | (ratio > 1.0 + self.clip_high)).float() * mask
            ratio_max = float((ratio * mask).max())
        return {
            "loss": float(loss.detach()),
            "pg_loss": float(pg.detach()),
            "entropy": float(ent.detach()) * n / tokens_n,
            "kl": kl_value * n / tokens_n,
            "clip_fraction": float(outside.sum()) / tokens_n,
            "ratio_mean": float((ratio.detach() * mask).sum()) / tokens_n,
            "ratio_max": ratio_max,
            "grad_norm": grad_norm,
        }

    # --- weights and checkpoints -------------------------------------------------------------------------------

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        return self.policy.state_dict()

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "steps": self.steps,
            "model": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "reference": None if self.reference is None else self.reference.state_dict(),
            "rng": self._gen.get_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"trainer state format {state.get('format')!r} is not {STATE_FORMAT}")
        if (state["reference"] is None) != (self.reference is None):
            raise ValueError("the checkpoint's trainer and this one disagree on a KL reference (kl_coef > 0)")
        self.policy.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.reference is not None:
            self.reference.load_state_dict(state["reference"])
        self._gen.set_state(state["rng"])
        self.steps = int(state["steps"])


def dumps_state(state: Mapping[str, Any]) -> bytes:
    """A trainer's ``state_dict`` as bytes (for the run directory's atomic writer)."""
    buffer = io.BytesIO()
    torch.save(dict(state), buffer)
    return buffer.getvalue()


def loads_state(data: bytes) -> dict[str, Any]:
    """The inverse of ``dumps_state``; reads tensors and plain data only (no pickled code)."""
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
