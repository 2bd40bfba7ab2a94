"""Training in the live backend: what a step trains (``datums``: a rollout's turns made into ``Datum`` sequences, the
group's advantages), the trainer that makes one optimizer update per minibatch of them (``trainer``: the narrow
protocol and the built-in GRPO-style trainer), and the run directory's full checkpoints, with what a resume starts
from (``checkpoint``).

Importing this package imports nothing of its modules (``trainer`` imports torch).
"""
