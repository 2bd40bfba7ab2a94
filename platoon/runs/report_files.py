"""The files a report writes into a run directory: ``platoon report``'s ``summary.md`` and plots, a sweep's
``sweep.md``.

Rules it keeps: each file replaces the old one whole, through :func:`platoon.runs.atomic.write_atomic`, so a reader
(a browser left open on the report, a second ``platoon report``) sees the old file or the new one, never half of
either; a figure is rendered to bytes in memory first, so a plot that fails to draw leaves the old one in place.
It takes a figure as anything with matplotlib's ``savefig``: this layer draws nothing and imports no plotting
library.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from platoon.runs.atomic import write_atomic


def write_text_file(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (its directory made if need be); returns ``path``."""
    write_atomic(path, text)
    return path


def write_figure(path: Path, figure: Any, *, dpi: int = 100) -> Path:
    """Render ``figure`` in the format its suffix names (``.png``) and write it to ``path`` atomically; returns
    ``path``."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format=path.suffix.removeprefix("."), dpi=dpi)
    write_atomic(path, buffer.getvalue())
    return path


__all__ = ["write_figure", "write_text_file"]
