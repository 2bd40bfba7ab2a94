"""The policy-gradient losses ``train.loss_fn`` names, and the ``train.loss_fn_config`` keys each one takes.

One table for the config's checks (``platoon.config.rules``), its warnings (``platoon.config.config_warnings``)
and the trainer (``platoon.live.training.trainer``), which imports no config model. The losses are Tinker's (platoon
0.4.0 hands ``loss_fn`` and ``loss_fn_config`` to the Tinker service as they are); per masked token, with ``r = p / q``
the learner's over the sampler's probability and ``clip(r) = clamp(r, clip_low_threshold, clip_high_threshold)``
(**absolute bounds on the ratio**, not offsets from 1):

- ``importance_sampling``: ``-r A``;
- ``ppo``: ``-min(r A, clip(r) A)``;
- ``cispo``: ``-sg(clip(r)) A log p`` (``sg``: no gradient through the weight).

Keys: ``clip_low_threshold`` and ``clip_high_threshold`` (every loss takes them, since 0.4.0's default
``loss_fn_config`` goes with whichever loss a config names; ``importance_sampling`` does not clip, so they do nothing
there), and two keys of this project's own that 0.4.0 does not have: ``kl_coef`` (a k3 penalty towards the initial
policy) and ``entropy_coef`` (an entropy bonus). A threshold the mapping leaves out takes the loss's own default:
Tinker's 0.8 and 1.2 for ``ppo`` (its epsilon of 0.2), 0.4.0's 0.0 and 5.0 for ``cispo``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

__all__ = [
    "CLIP_KEYS",
    "DEFAULT_LOSS_FN",
    "DEFAULT_LOSS_FN_CONFIG",
    "EXTRA_KEYS",
    "LOSS_FNS",
    "TINKER_ONLY_LOSS_FNS",
    "LossSettings",
    "loss_fn_config_problems",
    "loss_settings",
    "zero_at_zero_advantages",
]

DEFAULT_LOSS_FN = "cispo"
DEFAULT_LOSS_FN_CONFIG: dict[str, float] = {"clip_low_threshold": 0.0, "clip_high_threshold": 5.0}
"""0.4.0's default ``loss_fn_config``; a config's own mapping replaces it whole."""

CLIP_KEYS = ("clip_low_threshold", "clip_high_threshold")
EXTRA_KEYS = ("kl_coef", "entropy_coef")
"""This project's own keys, taken by every loss; 0.4.0 (and Tinker) have no such keys."""

LOSS_FNS: dict[str, tuple[float, float]] = {
    "cispo": (0.0, 5.0),
    "importance_sampling": (0.0, math.inf),
    "ppo": (0.8, 1.2),
}
"""Each loss the trainer implements -> the clip thresholds it uses where ``loss_fn_config`` leaves one out."""

TINKER_ONLY_LOSS_FNS = ("cross_entropy", "dro", "gspo", "stable_reinforce", "custom")
"""Tinker's other loss names: valid in 0.4.0, not implemented by this trainer."""

MAX_COEF = 1e6


class LossSettings(NamedTuple):
    """A loss with every key of its config filled in."""

    loss_fn: str
    clip_low: float
    clip_high: float
    kl_coef: float
    entropy_coef: float


def loss_settings(loss_fn: str, config: Mapping[str, float]) -> LossSettings:
    """``loss_fn`` with ``config``'s values, and the loss's defaults for the keys it leaves out."""
    low, high = LOSS_FNS[loss_fn]
    return LossSettings(loss_fn, float(config.get("clip_low_threshold", low)),
                        float(config.get("clip_high_threshold", high)), float(config.get("kl_coef", 0.0)),
                        float(config.get("entropy_coef", 0.0)))


def zero_at_zero_advantages(config: Mapping[str, float]) -> bool:
    """True when a datum whose advantage is 0 adds nothing to the objective: no KL and no entropy term.

    Then a step whose every advantage is 0 has a zero objective and takes no optimizer update (0.4.0's rule), and
    dropping zero-advantage datums (``filter_zero_advantage_datums``) changes no gradient."""
    return not config.get("kl_coef") and not config.get("entropy_coef")


def loss_fn_config_problems(loss_fn: str, config: Mapping[str, float]) -> list[tuple[str, str]]:
    """``(key, message)`` for each problem of ``config`` under ``loss_fn`` (a loss of ``LOSS_FNS``); the key is
    the one under ``train.loss_fn_config`` (empty: the mapping as a whole)."""
    takes = (*CLIP_KEYS, *EXTRA_KEYS)
    out: list[tuple[str, str]] = []
    for key, value in config.items():
        if key not in takes:
            out.append((key, f"unknown key; {loss_fn} takes {', '.join(takes)}"))
        elif value < 0:
            out.append((key, f"must be at least 0, got {value!r}"))
        elif key in EXTRA_KEYS and value > MAX_COEF:
            out.append((key, f"must be at most {MAX_COEF:g}, got {value!r}"))
    if not out:
        s = loss_settings(loss_fn, config)
        if s.clip_low > s.clip_high:
            out.append(("", f"clip_low_threshold ({s.clip_low:g}) must not exceed clip_high_threshold "
                            f"({s.clip_high:g}): both bound the probability ratio itself"))
    return out
