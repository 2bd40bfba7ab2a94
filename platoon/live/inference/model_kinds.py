"""Which policy ``train.model_name`` names, built: ``tiny`` (``TinyPolicy``, shaped by ``model:``) or a local Hugging
Face checkpoint directory (``HFPolicy``).

It sits above both model modules (``platoon.live.inference.model``, and ``platoon.live.inference.hf`` built on it) so
that each imports only downward. Importing it imports torch but not ``transformers``, which ``hf`` imports when a
checkpoint is loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from platoon.live.inference.hf import HFPolicy
from platoon.live.inference.model import CausalPolicy, TinyConfig, TinyPolicy

__all__ = ["build_causal_policy"]


TINY_SHIFT = 8
"""The tiny model's causal-convolution taps (``TinyConfig.shift``): through ``role_colon`` a number_search decision
sits 3-6 tokens after what it depends on (the range's bounds, the instruction's N), and 8 taps cover it; without them
the tiny model stalled near held-out pass@1 0.22 where the token-level game it replaced reached 0.36
(docs/live-backend.md, "Does it learn?")."""


def build_causal_policy(model_name: str, model_config: Any, *, vocab_size: int, max_len: int, seed: int = 0,
                        logit_prior: Sequence[float] | None = None) -> CausalPolicy:
    """The policy ``model_name`` names: ``tiny`` with ``vocab_size`` tokens (its tokenizer's), ``max_len`` positions
    and the read-out bias ``logit_prior``, shaped by ``model_config``; or a local checkpoint directory."""
    if model_name != "tiny":
        return HFPolicy.from_pretrained(model_name, device=model_config.device)
    cfg = TinyConfig(vocab_size=vocab_size, max_len=max(int(max_len), 2), d_model=model_config.d_model,
                     n_layers=model_config.n_layers, n_heads=model_config.n_heads, shift=TINY_SHIFT,
                     copying=model_config.copying)
    return TinyPolicy(cfg, device=model_config.device, seed=seed, logit_prior=logit_prior)
