"""The upper bounds of a config's values: past them a run would exhaust memory, overflow a float, or never finish.

Each bound is far beyond any real run (docs/configuration.md, "Ranges", lists them with the reason for each); a value
past one is refused when the config loads, with the bound in the message, instead of crashing the run later. Every
float of a config must also be finite (the models refuse ``.inf`` and ``.nan``), and every integer fit in 64 bits.
"""

from __future__ import annotations

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

MAX_SECONDS = 10_000_000.0
"""Any duration, time limit or trainer time, in seconds (about 116 days): sums of them stay exact enough."""

MAX_STEPS = 1_000_000
"""``train.max_training_steps``, ``num_epochs`` and the ``every`` periods."""

MAX_BATCH = 65_536
"""Groups a step trains (``train.batch_size``)."""

MAX_GROUP = 4_096
"""Rollouts a group holds (``group_size``), and a straggler quorum."""

MAX_ROLLOUTS = 1_048_576
"""Rollouts at once: the permits (``train.max_concurrent_rollouts``, or by default batch_size x the largest group),
the start limit and a label's groups in flight."""

MAX_STALENESS = 64
"""A staleness bound: a step logs one ``train/staleness/<k>`` metric for each k up to it (null: no bound)."""

MAX_TASKS = 1_000_000
"""Training tasks of a run, over every entry (a simulated million takes about 1.2 GB); held-out tasks likewise."""

MAX_LOGIT = 50.0
"""A difficulty, an ability or a gain on the logit scale (sigmoid(50) is 1 to 22 digits)."""

MAX_SIGMA = 5.0
"""A lognormal's ``sigma`` and ``length_sigma``: exp(5 z) already spans 10 orders of magnitude."""

MAX_GROUPS_PER_STEP = 100.0
"""``train.refill.max_groups_per_step``, a multiple of batch_size."""

MIN_WEIGHT, MAX_WEIGHT = 1e-6, 1e6
"""An entry's weight (only ratios matter)."""

MIN_STARTUP_CAPACITY = 1e-3
"""``sim.rollout.startup_capacity``: below it a start-up alone would run a thousand times slower than its work."""

MAX_SLOWDOWN = 1_000.0
"""``sim.trainer.service_slowdown``: past it the trainer would barely move while the model service runs a batch."""

MAX_GPUS = 1_000_000.0
"""``sim.gpus``."""

MAX_MODEL = {"d_model": 1024, "n_layers": 24, "n_heads": 64, "max_new_tokens": 65_536, "max_batch": 65_536}
"""The tiny model's shape (at the bounds about 300M parameters, several GB with the optimizer's state) and the
service's limits."""

__all__ = [
    "INT64_MAX", "INT64_MIN", "MAX_BATCH", "MAX_GPUS", "MAX_GROUP", "MAX_GROUPS_PER_STEP", "MAX_LOGIT", "MAX_MODEL", "MAX_ROLLOUTS", "MAX_SECONDS", "MAX_SIGMA", "MAX_SLOWDOWN", "MAX_STALENESS", "MAX_STEPS", "MAX_TASKS",
    "MAX_WEIGHT", "MIN_STARTUP_CAPACITY", "MIN_WEIGHT",
]
