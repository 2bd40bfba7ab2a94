"""Which policy ``train.model_name`` names, built: ``tiny`` (``TinyPolicy``, shaped by ``model:``) or a local Hugging
Face checkpoint directory (``HFPolicy``).

It sits above both model modules (``platoon.live.model``, and ``platoon.live.hf`` built on it) so that each imports
only downward. Importing it imports torch but not ``transformers``, which ``hf`` imports when a checkpoint is loaded.
"""

from __future__ import annotations

import math
from typing import Any

from platoon.live.hf import HFPolicy
from platoon.live.model import CausalPolicy, TinyConfig, TinyPolicy

__all__ = ["build_causal_policy"]


SPARE_POSITIONS = 8
"""Positions the tiny model keeps beyond the environment's longest context when no token cap is set."""


def build_causal_policy(model_name: str, model_config: Any, *, vocab_size: int, max_len: int,
                        seed: int = 0, max_new_tokens: int | None = None) -> CausalPolicy:
    """The policy ``model_name`` names: ``tiny`` sized for the environment (``model_config``: its shape), or a
    local checkpoint directory."""
    if model_name != "tiny":
        return HFPolicy.from_pretrained(model_name, device=model_config.device)
    # Positions to spare beyond the environment's longest context cost nothing and let an action run long.
    length = max(max_len + (max_new_tokens or SPARE_POSITIONS), 2)
    cfg = TinyConfig(vocab_size=vocab_size, max_len=1 << math.ceil(math.log2(length)),
                     d_model=model_config.d_model, n_layers=model_config.n_layers, n_heads=model_config.n_heads)
    return TinyPolicy(cfg, device=model_config.device, seed=seed)
