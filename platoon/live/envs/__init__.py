"""Environments of the live backend: the protocol (``base``), the built-in ``number_search``, and
``resolve_environment`` (``resolve``), by name or ``module:Class``.

Importing this package registers the built-in; it imports no torch, so that a config can be checked without it.
"""

from platoon.live.envs.base import Environment, Episode, Outcome, Step, Task, astep
from platoon.live.envs.number_search import NumberSearch
from platoon.live.envs.resolve import resolve_environment

__all__ = ["Environment", "Episode", "NumberSearch", "Outcome", "Step", "Task", "astep", "resolve_environment"]
