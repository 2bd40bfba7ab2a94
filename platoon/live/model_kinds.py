"""Which policy a ``ModelConfig`` names, built: ``tiny`` (``TinyPolicy``) or ``hf`` (``HFPolicy``).

It sits above both model modules (``platoon.live.model``, and ``platoon.live.hf`` built on it) so that each imports
only downward. Importing it imports torch but not ``transformers``, which ``hf`` imports when a checkpoint is loaded.
"""

from __future__ import annotations

import math
from typing import Any

from platoon.live.hf import HFPolicy
from platoon.live.model import CausalPolicy, TinyConfig, TinyPolicy

__all__ = ["build_causal_policy"]


def build_causal_policy(model_config: Any, *, vocab_size: int, max_len: int,
                        seed: int = 0) -> CausalPolicy:
    """The policy a ``ModelConfig`` names: ``tiny`` sized for the environment, or ``hf`` from ``path``."""
    if model_config.kind == "hf":
        if not model_config.path:
            raise ValueError("model.kind hf needs model.path, a local directory holding the checkpoint")
        return HFPolicy.from_pretrained(model_config.path, device=model_config.device)
    # Positions to spare beyond the environment's longest context cost nothing and let an action run long.
    length = max(max_len + int(model_config.max_new_tokens), 2)
    cfg = TinyConfig(vocab_size=vocab_size, max_len=1 << math.ceil(math.log2(length)),
                     d_model=model_config.d_model, n_layers=model_config.n_layers, n_heads=model_config.n_heads)
    return TinyPolicy(cfg, device=model_config.device, seed=seed)
