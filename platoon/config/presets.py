"""The simulator's presets, as data: named workloads whose ``sim:`` block a config may take as its base.

What this module owns: finding a preset by name (``preset_names``, ``preset_path``) and reading its data
(``preset_data``). The files ship with the simulator, under ``platoon/sim/presets/`` (docs/simulator.md); they are
YAML data, so the config layer reads them without importing the simulator, and ``sim.preset`` is checked and merged
when a config loads: ``config validate`` and every command see the same merged block.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from platoon.config.yaml_loader import load_yaml

PRESETS_DIR = Path(__file__).resolve().parents[1] / "sim" / "presets"
DEFAULT_PRESET = "long-agentic"


def preset_names() -> list[str]:
    """The presets shipped with platoon, by name."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def unknown_preset(name: object) -> str | None:
    """Why ``name`` names no preset (with a did-you-mean and the list), or None when it names one."""
    if isinstance(name, str) and "/" not in name and (PRESETS_DIR / f"{name}.yaml").is_file():
        return None
    names = preset_names()
    close = difflib.get_close_matches(name, names, n=1) if isinstance(name, str) else []
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown preset {name!r}{hint} (presets: {', '.join(names)})"


def preset_path(name: str) -> Path:
    """The file of preset ``name``; ValueError with ``unknown_preset``'s message when there is none."""
    why = unknown_preset(name)
    if why:
        raise ValueError(why)
    return PRESETS_DIR / f"{name}.yaml"


def preset_data(name: str) -> dict[str, Any]:
    """The whole run of preset ``name`` (its train, environments and sim sections)."""
    data = load_yaml(preset_path(name).read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


__all__ = ["DEFAULT_PRESET", "PRESETS_DIR", "preset_data", "preset_names", "preset_path", "unknown_preset"]
