"""A Hugging Face causal LM behind the same ``Policy`` interface as the tiny model (the ``hf`` extra).

``HFPolicy.from_pretrained(path)`` loads a checkpoint from a local directory only (``local_files_only``: nothing is
downloaded); ``transformers`` is imported when a policy is built, not when this module is, so the rest of the live
backend runs without it. Sampling, scoring, seeds and devices follow ``platoon.live.model.CausalPolicy``: the
model receives left-padded prompts as ``input_ids`` with a 2-D ``attention_mask`` over the keys and explicit
``position_ids``, and continues from its own ``past_key_values``.

The token ids are the checkpoint's: an environment meant for a Hugging Face model speaks in its tokenizer's ids.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch

from platoon.live.model import CausalPolicy, resolve_device

__all__ = ["HFPolicy", "require_transformers"]


def require_transformers() -> Any:
    """The ``transformers`` module, or ``ImportError`` saying which extra installs it."""
    try:
        import transformers
    except ImportError as exc:
        raise ImportError(
            "a Hugging Face checkpoint (train.model_name) needs the transformers package: pip install 'platoon[hf]'") from exc
    return transformers


class HFPolicy(CausalPolicy):
    """A ``transformers`` causal LM (``AutoModelForCausalLM``) on ``device``."""

    def __init__(self, model: Any, *, device: str | torch.device = "auto") -> None:
        self.device = resolve_device(device)
        self.module = model.to(self.device)
        config = model.config
        self.vocab_size = int(config.vocab_size)
        self.max_len = getattr(config, "max_position_embeddings", None)
        # transformers 5.x renamed past_key_values to cache (the old name warns); 4.x knows only the old one.
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    @classmethod
    def from_pretrained(cls, path: str | Path, *, device: str | torch.device = "auto",
                        dtype: torch.dtype | None = None) -> HFPolicy:
        """Load the checkpoint in the local directory ``path`` (``FileNotFoundError`` when it is not one)."""
        if not Path(path).is_dir():
            raise FileNotFoundError(f"train.model_name {str(path)!r} is not a local directory holding a checkpoint")
        transformers = require_transformers()
        kwargs: dict[str, Any] = {"local_files_only": True}
        if dtype is not None:
            kwargs["dtype"] = dtype
        model = transformers.AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
        return cls(model, device=device)

    def _step(self, tokens, positions, attn_mask, cache):
        # The shared loop's mask is [B, 1, T, K]; the last query of a left-padded batch is real, so its row is the
        # keys' padding mask, which is what the model takes (it applies causality itself).
        key_valid = attn_mask[:, 0, -1, :].long()
        out = self.module(input_ids=tokens, attention_mask=key_valid, position_ids=positions,
                          use_cache=True, **{self._cache_arg: cache})
        return out.logits, getattr(out, self._cache_arg)

    def _logits(self, tokens):
        return self.module(input_ids=tokens, use_cache=False).logits

    def save(self, path: str | Path) -> None:
        """Write the weights and config with ``save_pretrained`` (``from_pretrained`` reads them back)."""
        self.module.save_pretrained(str(path))
