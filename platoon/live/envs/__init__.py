"""Environments of the live backend: the protocol (``base``) and the built-in ``number_search``.

Importing this package registers the built-in; it imports no torch, so that a config can be checked without it.
"""

from platoon.live.envs.base import Environment, Episode, Outcome, Step, Task, astep, resolve_environment
from platoon.live.envs.number_search import NumberSearch

__all__ = ["Environment", "Episode", "NumberSearch", "Outcome", "Step", "Task", "astep", "resolve_environment"]
