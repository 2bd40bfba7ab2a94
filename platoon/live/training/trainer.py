"""The trainer of the live backend: a narrow protocol and the built-in GRPO-style trainer.

``GRPOTrainer.train_step(datums, version=v)`` takes one step's datums (``platoon.live.training.datums``: token ids,
mask, sampling log-probabilities, advantage, sampling version) and makes one optimizer update per minibatch, producing
the weights of version ``v + 1``. The losses are Tinker's, as platoon 0.4.0 asks the Tinker service for them
(``platoon.config.losses``): for a datum with advantage A and a token t where the mask is 1, with
``r_t = exp(logp_t - logp_t^sampled)`` and ``c(r) = clamp(r, clip_low, clip_high)`` (absolute bounds on the ratio),
the per-token policy loss is

- ``importance_sampling``: ``-r_t A``
- ``ppo``:                 ``-min(r_t A, c(r_t) A)``
- ``cispo``:               ``-sg(c(r_t)) A logp_t``   (sg: no gradient through the weight)

plus this project's own ``kl_coef * (exp(q_t - logp_t) - (q_t - logp_t) - 1)`` (the k3 estimator of KL to the
initial policy q) and ``- entropy_coef * H_t`` (the entropy of the policy's distribution at t). A minibatch's loss is
the **sum over its datums' masked tokens divided by their number** (Tinker sums; 0.4.0 scales the advantages by one
over the microbatch's action tokens, so the objective is a token mean and the gradient's norm does not grow with the
batch).

**Training-inference mismatch** (``mismatch/...``): with ``p_t`` the trainer's log-probability of token t under the
weights the minibatch began from (the proximal policy) and ``b_t`` the sampler's, ``w_t = exp(p_t - b_t)``;
``mismatch/kl`` is the k3 estimate of KL(sampler || trainer), ``mean(w_t - 1 - log w_t)``, and
``mismatch/is_ratio_mean`` the mean of ``w_t``, over the masked tokens. With ``tis_cap`` (``train.inference``'s
``tis`` correction) the ratio is taken against the proximal policy, ``r_t = exp(logp_t - p_t)``, and each token's loss
is weighed by ``min(w_t, tis_cap)`` (truncated importance sampling: the sampler's drift, a separate engine's or
staleness, corrected; ``mismatch/truncated_share`` the tokens whose weight was cut). A step of several minibatches
computes ``p_t`` for all of them before the first update.

Rules it keeps:
- AdamW (decoupled weight decay, as Tinker's ``AdamParams``) over all parameters; the gradient's global norm is
  clipped to ``grad_clip_norm`` when it is above 0, and the norm before clipping is reported either way;
- **zero objective, no update** (0.4.0's rule): when the loss is zero at zero advantages (no KL or entropy term), a
  minibatch whose every advantage is 0 has a zero objective and makes no optimizer update (Adam's momentum would
  still move the weights); a step none of whose minibatches updates says so (``optimizer_steps`` 0), and the
  dispatcher's policy version stays (``platoon.policy.dispatcher``);
- ``filter_zero_advantage`` (``train.workflow_config.filter_zero_advantage_datums``): under such a loss, datums whose
  advantage is 0 are left out of the forward and backward passes; their masked tokens stay in the denominator, so
  the gradient is the one without the filter (only the compute and the ``entropy`` metric, over the datums that ran,
  differ). The step's other metrics are read before the filter;
- ``num_minibatches > 1`` splits the datums, shuffled by the trainer's own seeded generator, into that many
  updates; its state is part of ``state_dict`` so that a resumed run shuffles as the uninterrupted one;
- ``state_dict()`` holds the model, the optimizer, the reference policy (when ``kl_coef > 0``), the generator and
  the step count; ``load_state_dict`` restores all of them; ``dumps_state``/``loads_state`` turn it into bytes and
  back (``torch.save``; loading reads tensors and plain data only).
"""

from __future__ import annotations

import copy
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from platoon.config.losses import (
    DEFAULT_LOSS_FN,
    DEFAULT_LOSS_FN_CONFIG,
    LOSS_FNS,
    loss_fn_config_problems,
    loss_settings,
    zero_at_zero_advantages,
)
from platoon.live.inference.model import pad_right
from platoon.live.training.datums import check_datum

__all__ = ["GRPOTrainer", "Trainer", "dumps_state", "loads_state"]

STATE_FORMAT = 1


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
        loss_fn: str = DEFAULT_LOSS_FN,
        loss_fn_config: Mapping[str, float] | None = None,
        learning_rate: float = 3e-5,
        beta1: float = 0.9,
        beta2: float = 0.95,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        grad_clip_norm: float = 0.0,
        filter_zero_advantage: bool = True,
        temperature: float = 1.0,
        num_minibatches: int = 1,
        seed: int = 0,
        tis_cap: float | None = None,
    ) -> None:
        """``loss_fn_config`` None: 0.4.0's default (``platoon.config.losses.DEFAULT_LOSS_FN_CONFIG``); ``tis_cap``:
        truncated importance sampling against the sampler's log-probabilities, its weights capped there (None:
        off)."""
        if loss_fn not in LOSS_FNS:
            raise ValueError(f"unknown loss_fn {loss_fn!r}; one of {', '.join(sorted(LOSS_FNS))}")
        config = dict(DEFAULT_LOSS_FN_CONFIG if loss_fn_config is None else loss_fn_config)
        problems = loss_fn_config_problems(loss_fn, config)
        if problems:
            raise ValueError("; ".join(f"loss_fn_config{'.' + k if k else ''}: {m}" for k, m in problems))
        if num_minibatches < 1:
            raise ValueError(f"num_minibatches must be at least 1, got {num_minibatches}")
        if temperature <= 0:
            raise ValueError(f"the trainer scores at a temperature above 0, got {temperature}")
        if grad_clip_norm < 0:
            raise ValueError(f"grad_clip_norm must be at least 0 (0: no clipping), got {grad_clip_norm}")
        self.policy = policy
        self.loss = loss_settings(loss_fn, config)
        self.zero_at_zero = zero_at_zero_advantages(config)
        self.filter_zero_advantage = bool(filter_zero_advantage)
        self.grad_clip_norm = float(grad_clip_norm)
        self.temperature = float(temperature)
        self.num_minibatches = int(num_minibatches)
        if tis_cap is not None and not tis_cap >= 1.0:
            raise ValueError(f"tis_cap must be at least 1 (None: off), got {tis_cap}")
        self.tis_cap = None if tis_cap is None else float(tis_cap)
        self.steps = 0
        self.optimizer = torch.optim.AdamW(policy.module.parameters(), lr=learning_rate, betas=(beta1, beta2),
                                           eps=eps, weight_decay=weight_decay)
        self.reference = None
        if self.loss.kl_coef > 0:
            self.reference = copy.deepcopy(policy)
            self.reference.module.requires_grad_(False)
        self._gen = torch.Generator().manual_seed(seed)

    @classmethod
    def from_config(cls, policy: Any, train: Any, model: Any) -> GRPOTrainer:
        """Built from a run's ``TrainConfig`` (``optimizer``, ``loss_fn``, ``loss_fn_config``,
        ``workflow_config.filter_zero_advantage_datums``, the rollouts' ``inference_params.temperature``,
        ``num_minibatches``, ``seed``); ``model`` (the ``ModelConfig``) sets nothing here."""
        opt = train.optimizer
        return cls(policy, loss_fn=train.loss_fn, loss_fn_config=train.loss_fn_config,
                   learning_rate=opt.learning_rate, beta1=opt.beta1, beta2=opt.beta2, eps=opt.eps,
                   weight_decay=opt.weight_decay, grad_clip_norm=opt.grad_clip_norm,
                   filter_zero_advantage=train.workflow_config.filter_zero_advantage_datums,
                   temperature=train.workflow_config.rollout_config.inference_params.temperature or 1.0,
                   num_minibatches=train.num_minibatches, seed=train.seed,
                   tis_cap=train.inference.tis_cap if train.inference.corrects() else None)

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
            "filtered_datums": 0.0,
            "optimizer_steps": 0.0,
        }
        if n == 0:
            return metrics
        order = list(range(n))
        if self.num_minibatches > 1:
            order = torch.randperm(n, generator=self._gen).tolist()
        chunks = [order[i:: self.num_minibatches] for i in range(min(self.num_minibatches, n))]
        if self.tis_cap is not None and len(chunks) > 1:  # every minibatch weighs against the weights it began from
            datums = self._with_proximal(datums, chunks)
        parts = []
        for chunk in chunks:
            part, filtered = self._minibatch([datums[i] for i in chunk])
            metrics["filtered_datums"] += filtered
            if part is not None:
                parts.append(part)
        if not parts:
            return metrics
        # Means over the minibatches that updated, except the largest ratio, which is the largest of any.
        metrics.update({k: sum(p[k] for p in parts) / len(parts) for k in parts[0]})
        metrics["ratio_max"] = max(p["ratio_max"] for p in parts)
        metrics["optimizer_steps"] = float(len(parts))
        metrics["lr"] = float(self.optimizer.param_groups[0]["lr"])
        self.steps += 1
        return metrics

    def _with_proximal(self, datums: Sequence[Mapping[str, Any]], chunks: Sequence[Sequence[int]]) -> list[dict]:
        """``datums``, each with the trainer's log-probabilities of its tokens before this step's first update
        (``proximal``), one forward pass per minibatch."""
        out: list[dict] = [dict(d) for d in datums]
        device = self.policy.device
        self.policy.module.eval()
        with torch.no_grad():
            for chunk in chunks:
                tokens = pad_right([datums[i]["tokens"] for i in chunk], device=device)
                mask = pad_right([datums[i]["mask"] for i in chunk], dtype=torch.float32, device=device)
                logp = self.policy.policy_logprobs(tokens, mask, temperature=self.temperature).cpu()
                for row, i in enumerate(chunk):
                    out[i]["proximal"] = logp[row, :len(datums[i]["tokens"])].tolist()
        return out

    def _minibatch(self, datums: Sequence[Mapping[str, Any]]) -> tuple[dict[str, float] | None, int]:
        """One minibatch's update and how many datums the filter left out; None: its objective is zero (every
        advantage 0 under a loss that is zero there), so no update."""
        denominator = sum(sum(d["mask"]) for d in datums)
        if not self.zero_at_zero:
            return self._update(datums, denominator), 0
        live = [d for d in datums if float(d["advantage"]) != 0.0]
        if not live:
            return None, len(datums) if self.filter_zero_advantage else 0
        if not self.filter_zero_advantage:
            return self._update(datums, denominator), 0
        return self._update(live, denominator), len(datums) - len(live)

    def _update(self, datums: Sequence[Mapping[str, Any]], denominator: int) -> dict[str, float]:
        """One optimizer update on ``datums``; the loss is their masked tokens' sum over ``denominator`` tokens."""
        device = self.policy.device
        tokens = pad_right([d["tokens"] for d in datums], device=device)
        mask = pad_right([d["mask"] for d in datums], dtype=torch.float32, device=device)
        old = pad_right([d["logprobs"] for d in datums], dtype=torch.float32, device=device)
        adv = torch.tensor([float(d["advantage"]) for d in datums], dtype=torch.float32, device=device)[:, None]
        self.policy.module.train()
        logp, entropy = self.policy.policy_logprobs(tokens, mask, temperature=self.temperature, with_entropy=True)
        if "proximal" in datums[0]:
            proximal = pad_right([d["proximal"] for d in datums], dtype=torch.float32, device=device)
        else:
            proximal = logp.detach()  # this minibatch is the step's first: the weights it began from
        # the sampler's probability against the trainer's, token by token (1 when the two engines agree)
        sampler_ratio = torch.exp((proximal - old) * mask)
        ratio = torch.exp((logp - (old if self.tis_cap is None else proximal)) * mask)
        clipped = ratio.clamp(self.loss.clip_low, self.loss.clip_high)
        if self.loss.loss_fn == "ppo":
            per_token = -torch.minimum(ratio * adv, clipped * adv)
        elif self.loss.loss_fn == "importance_sampling":
            per_token = -ratio * adv
        else:
            per_token = -clipped.detach() * adv * logp
        if self.tis_cap is not None:
            per_token = per_token * sampler_ratio.clamp(max=self.tis_cap)
        scale = 1.0 / max(denominator, 1)
        pg = (per_token * mask).sum() * scale
        loss = pg
        ent = (entropy * mask).sum() * scale
        if self.loss.entropy_coef:
            loss = loss - self.loss.entropy_coef * ent
        kl_value = 0.0
        if self.reference is not None:
            with torch.no_grad():
                ref = self.reference.policy_logprobs(tokens, mask, temperature=self.temperature)
            delta = (ref - logp) * mask
            kl = ((torch.exp(delta) - delta - 1.0) * mask).sum() * scale
            loss = loss + self.loss.kl_coef * kl
            kl_value = float(kl.detach())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for p in self.policy.module.parameters() if p.grad is not None]
        max_norm = self.grad_clip_norm if self.grad_clip_norm > 0 else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        self.optimizer.step()
        ran = float(mask.sum().clamp(min=1.0))  # the tokens that ran: the per-token means below are over them
        with torch.no_grad():
            outside = torch.zeros_like(mask)
            if self.loss.loss_fn != "importance_sampling":  # it does not clip
                outside = ((ratio < self.loss.clip_low) | (ratio > self.loss.clip_high)).float() * mask
            ratio_max = float((ratio * mask).max())
            log_ratio = (proximal - old) * mask
            mismatch = {
                "mismatch/kl": float(((torch.exp(log_ratio) - log_ratio - 1.0) * mask).sum()) / ran,
                "mismatch/is_ratio_mean": float((sampler_ratio * mask).sum()) / ran,
            }
            if self.tis_cap is not None:
                mismatch["mismatch/truncated_share"] = float(((sampler_ratio > self.tis_cap).float() * mask).sum()) / ran
        return {
            **mismatch,
            "loss": float(loss.detach()),
            "pg_loss": float(pg.detach()),
            "entropy": float(ent.detach()) / scale / ran,
            "kl": kl_value / scale / ran,
            "clip_fraction": float(outside.sum()) / ran,
            "ratio_mean": float((ratio.detach() * mask).sum()) / ran,
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
            raise ValueError("the checkpoint's trainer and this one disagree on a KL reference (loss_fn_config's "
                             "kl_coef > 0)")
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
