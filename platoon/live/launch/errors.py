"""The errors of starting or going on with a live run, as ``platoon train`` exits on them.

``TrainError``: a run that cannot start or go on (exit 1), with a message that names what (a run directory, an
environment whose constructor raised, the driver's reason to stop); ``TrainUsageError``: a ``--resume`` used as it
cannot be (exit 64).
"""

from __future__ import annotations

__all__ = ["TrainError", "TrainUsageError"]


class TrainError(RuntimeError):
    """A run that cannot start or go on (exit 1)."""


class TrainUsageError(TrainError):
    """A ``--resume`` or ``--out`` used as it cannot be (exit 64): the run directory was left as it was."""
