"""The one configuration error type: every problem of a config, gathered into one report (exit 78)."""

from __future__ import annotations

from collections.abc import Iterable

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 64
EXIT_CONFIG = 78
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report an interrupted command


class ConfigError(ValueError):
    """A config that cannot run. ``problems`` holds one line per problem, each starting with its key path."""

    def __init__(self, problems: Iterable[str], source: str = "<config>") -> None:
        self.problems = list(problems)
        self.source = source
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"invalid config {source}:\n{lines}")


class ExtensionError(ValueError):
    """An extension or component that cannot be loaded (unknown name, bad class, excluded platoon version)."""


class UsageError(ValueError):
    """A command's arguments that do not go together or name nothing it knows (exit 64): raised by the layer that
    carries the command out, before it reads or writes anything."""
