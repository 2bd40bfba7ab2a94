"""Environments of the live backend: the text protocol (``text``), what every environment shares (``base``: ``Task``,
``Outcome``), the built-in ``number_search``, and ``resolve_environment`` (``resolve``), by name or ``module:Class``.

Importing this package registers the built-in; it imports no torch, so that a config can be checked without it.
"""

from platoon.live.envs.base import Outcome, Task
from platoon.live.envs.number_search import NumberSearch
from platoon.live.envs.resolve import resolve_environment
from platoon.live.envs.text import (
           TextEnvironment,
           TextEpisode,
           Tool,
           ToolCall,
           ToolResult,
           acall,
           is_text_environment,
)

__all__ = ["NumberSearch", "Outcome", "Task", "TextEnvironment", "TextEpisode", "Tool", "ToolCall", "ToolResult",
           "acall", "is_text_environment", "resolve_environment"]
