"""The one rich Console factory: tables and progress read the same on a terminal and in a log file.

rich sizes a console to the terminal, and to 80 columns when the output is a pipe or a file, which folds wide
summary tables (a sweep's) into unreadable stubs; off a terminal, platoon prints at a width that fits them.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console

LOG_WIDTH = 160


def make_console(*, stderr: bool = False, **kwargs: Any) -> Console:
    """A Console on stdout (or stderr): the terminal's width on a terminal, else ``COLUMNS`` or 160 columns."""
    stream = sys.stderr if stderr else sys.stdout
    if "width" not in kwargs and not stream.isatty() and "COLUMNS" not in os.environ:
        kwargs["width"] = LOG_WIDTH
    return Console(stderr=stderr, **kwargs)


def say(console: Console, level: str, message: str) -> None:
    """A message line as every command prints one: ``level: message``, a warning in yellow, the rest dim."""
    style = "yellow" if level == "warning" else "dim"
    console.print(f"[{style}]{level}: {message}[/{style}]", markup=True, highlight=False)
