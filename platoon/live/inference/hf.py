"""A Hugging Face causal LM behind the same ``PolicyModel`` interface as the tiny model (the ``hf`` extra).

``train.model_name`` names a checkpoint (``resolve_model``): a local directory, or a model id already in the local
Hugging Face cache (its ``refs/main`` snapshot; ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
``~/.cache/huggingface/hub``). Nothing is ever downloaded: a name that is neither is a ``FileNotFoundError`` naming
the cache it looked in. ``HFPolicy.from_pretrained(name)`` loads the model from there and ``load_tokenizer(name)``
its tokenizer (both ``local_files_only``); ``transformers`` and ``huggingface_hub`` are imported when a model is
resolved, not when this module is, so the rest of the live backend runs without them. Sampling, scoring, seeds and
devices follow ``platoon.live.inference.model.CausalPolicy``: the model receives left-padded prompts as ``input_ids``
with a 2-D ``attention_mask`` over the keys and explicit ``position_ids``, and continues from its own
``past_key_values``.

The token ids are the checkpoint's: an environment meant for a Hugging Face model speaks in its tokenizer's ids.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import torch

from platoon.live.inference.model import CausalPolicy, resolve_device

__all__ = ["HFPolicy", "hub_cache_dir", "load_tokenizer", "model_name_problem", "require_transformers",
           "resolve_model"]


def require_transformers() -> Any:
    """The ``transformers`` module, or ``ImportError`` saying which extra installs it."""
    try:
        import transformers
    except ImportError as exc:
        raise ImportError(
            "a Hugging Face checkpoint (train.model_name) needs the transformers package: pip install 'platoon[hf]'") from exc
    return transformers


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache as ``huggingface_hub`` finds it, read now (the hub reads it once, at import):
    ``HF_HUB_CACHE`` (or the older ``HUGGINGFACE_HUB_CACHE``), else ``HF_HOME/hub``, else
    ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``."""
    env = os.environ
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if not cache:
        home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"),
                                                  "huggingface")
        cache = os.path.join(home, "hub")
    return Path(os.path.expandvars(cache)).expanduser()


def resolve_model(name: str | Path) -> Path:
    """The local directory ``train.model_name`` names: ``name`` itself when it is a directory, else the snapshot of
    the model id ``name`` in the Hugging Face cache (``hub_cache_dir``), found offline. ``FileNotFoundError``
    saying where it looked when it is neither."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    cache = hub_cache_dir()
    snapshot = _cached_snapshot(str(name), cache)
    if snapshot is None:
        raise FileNotFoundError(
            f"{str(name)!r} is neither a local directory holding a checkpoint nor a model id in the Hugging Face "
            f"cache {cache} (nothing is downloaded; HF_HUB_CACHE or HF_HOME choose the cache)")
    return snapshot


def model_name_problem(name: str) -> str | None:
    """What is wrong with ``train.model_name`` for training (a ``ConfigError`` line), or None: ``tiny``, a local
    directory and a cached model id are right, the last two with the ``hf`` extra installed."""
    if name == "tiny":
        return None
    try:
        resolve_model(name)
    except FileNotFoundError as exc:
        return (f"train.model_name: {exc}; nor is it tiny (the built-in model). The simulator takes any name; "
                "training needs the weights here (docs/live-backend.md)")
    try:
        require_transformers()
    except ImportError:
        return ("train.model_name: a Hugging Face checkpoint needs the transformers package, which is not installed "
                "here: pip install 'platoon[hf]'")
    return None


def _cached_snapshot(repo_id: str, cache: Path) -> Path | None:
    """``huggingface_hub``'s own offline lookup of ``repo_id``'s ``main`` snapshot in ``cache`` (None when the id is
    not well formed, not there, or the hub package is missing)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    try:
        return Path(snapshot_download(repo_id, cache_dir=cache, local_files_only=True))
    except (OSError, ValueError):  # LocalEntryNotFoundError (not cached), HFValidationError (not an id)
        return None


def load_tokenizer(name: str | Path) -> Any:
    """The tokenizer of the checkpoint ``name`` names (``resolve_model``), with ``AutoTokenizer``, offline."""
    transformers = require_transformers()
    return transformers.AutoTokenizer.from_pretrained(str(resolve_model(name)), local_files_only=True)


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
    def from_pretrained(cls, name: str | Path, *, device: str | torch.device = "auto",
                        dtype: torch.dtype | None = None) -> HFPolicy:
        """Load the checkpoint ``name`` names: a local directory or a cached model id (``resolve_model``;
        ``FileNotFoundError`` when it is neither)."""
        path = resolve_model(name)
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
