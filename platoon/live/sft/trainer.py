"""The supervised fine-tuning step: the mean negative log-likelihood of the demonstrations' assistant tokens.

``SFTTrainer.step(batch)`` takes ``(ids, mask)`` pairs (``platoon.live.sft.demonstrations.conversation_tokens``) and
makes one AdamW update of the policy on ``-sum(mask * log p(token | tokens before)) / sum(mask)``: the tokens the
model writes, each weighed alike, nothing else (prompts, tool results and user messages are context only). The
gradient's global norm is clipped to ``grad_clip_norm`` when it is above 0.

``state_dict()`` holds ``model`` (the policy's weights, under the key the RL trainer's state uses, so that
``platoon eval`` and ``train.init_from`` read an SFT run's checkpoint as they read a training run's), the optimizer
and the step count. There is no other randomness: the demonstrations a step takes are a function of the run's seed
and the step (``batch_indices``), so a resumed run trains exactly as the run that never stopped.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from platoon.live.inference.model import pad_right

__all__ = ["SFTTrainer", "batch_indices"]

STATE_FORMAT = 1


def batch_indices(seed: int, step: int, batch_size: int, n: int) -> list[int]:
    """The demonstrations (indices into ``n``) step ``step`` (from 0) trains on: the steps walk through the
    demonstrations in a fresh seeded shuffle each pass, ``batch_size`` at a time."""
    out: list[int] = []
    first = step * batch_size
    for k in range(first, first + batch_size):
        epoch, at = divmod(k, n)
        out.append(_shuffle(seed, epoch, n)[at])
    return out


_SHUFFLES: dict[tuple[int, int, int], list[int]] = {}


def _shuffle(seed: int, epoch: int, n: int) -> list[int]:
    key = (seed, epoch, n)
    if key not in _SHUFFLES:
        if len(_SHUFFLES) > 8:
            _SHUFFLES.clear()
        order = list(range(n))
        random.Random(f"platoon-sft:{seed}:{epoch}").shuffle(order)
        _SHUFFLES[key] = order
    return _SHUFFLES[key]


class SFTTrainer:
    """One update a step (the module's doc) of ``policy`` (a ``PolicyModel``)."""

    def __init__(self, policy: Any, *, learning_rate: float, beta1: float = 0.9, beta2: float = 0.95,
                 eps: float = 1e-8, weight_decay: float = 0.0, grad_clip_norm: float = 0.0) -> None:
        self.policy = policy
        self.grad_clip_norm = float(grad_clip_norm)
        self.steps = 0
        self.optimizer = torch.optim.AdamW(policy.module.parameters(), lr=learning_rate, betas=(beta1, beta2),
                                           eps=eps, weight_decay=weight_decay)

    @classmethod
    def from_config(cls, policy: Any, cfg: Any) -> SFTTrainer:
        """Built from a run's config: ``sft.learning_rate`` (else ``train.optimizer.learning_rate``) and the rest of
        ``train.optimizer``."""
        opt = cfg.train.optimizer
        return cls(policy, learning_rate=cfg.sft.learning_rate or opt.learning_rate, beta1=opt.beta1,
                   beta2=opt.beta2, eps=opt.eps, weight_decay=opt.weight_decay, grad_clip_norm=opt.grad_clip_norm)

    def loss(self, batch: Sequence[tuple[Sequence[int], Sequence[int]]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's mean negative log-likelihood per assistant token (differentiable) and that token count."""
        device = self.policy.device
        sequences = pad_right([ids for ids, _ in batch]).to(device)
        masks = pad_right([mask for _, mask in batch]).to(device)
        logprobs = self.policy.masked_logprobs(sequences, masks)
        tokens = masks.sum()
        return -logprobs.sum() / tokens.clamp(min=1), tokens

    def step(self, batch: Sequence[tuple[Sequence[int], Sequence[int]]]) -> dict[str, float]:
        """One update on ``batch``; its metrics (``sft/loss`` before the update, ``sft/tokens``, ``sft/grad_norm``)."""
        self.policy.module.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss, tokens = self.loss(batch)
        loss.backward()
        params = [p for p in self.policy.module.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip_norm if self.grad_clip_norm > 0 else
                                              float("inf"))
        self.optimizer.step()
        self.steps += 1
        return {"sft/loss": float(loss.detach()), "sft/tokens": float(tokens), "sft/grad_norm": float(norm),
                "sft/demonstrations": float(len(batch))}

    def state_dict(self) -> dict[str, Any]:
        return {"format": STATE_FORMAT, "kind": "sft", "steps": self.steps, "model": self.policy.state_dict(),
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("kind") != "sft" or state.get("format") != STATE_FORMAT:
            raise ValueError(f"not an SFT trainer's state (kind {state.get('kind')!r}, format {state.get('format')!r})")
        self.policy.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])
