"""A config as YAML: the text ``config show`` prints (with ``--defaults``, every field's description above it).

Rules it keeps: every field is written, in schema order; the text loads back to an equal config (the lines
``config show`` adds are YAML comments).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel

from platoon import __version__
from platoon.config.effective import entry_summary

if TYPE_CHECKING:
    from platoon.config.models import RunConfig


def shown(cfg: RunConfig, *, defaults: bool = False) -> str:
    """What ``config show`` prints: ``cfg`` as YAML, then each entry's effective settings as comments; with
    ``defaults``, a heading and every field's description above it instead."""
    if defaults:
        return f"# platoon {__version__} run config: every field, each with its description\n" + to_yaml(
            cfg, comments=True)
    entries = "".join(f"#   {entry_summary(cfg, i)}\n" for i in range(len(cfg.environments)))
    return to_yaml(cfg) + "# each entry's effective settings:\n" + entries


def to_yaml(cfg: BaseModel, *, comments: bool = False) -> str:
    """``cfg`` as YAML, every field in schema order; with ``comments`` each field's description above it.

    The text loads back to an equal config (``config show --defaults`` round-trips).
    """
    if not comments:
        return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, width=10**9, allow_unicode=True)
    lines: list[str] = []
    _emit(cfg, 0, lines)
    return "\n".join(lines) + "\n"


def _emit(model: BaseModel, indent: int, lines: list[str]) -> None:
    pad = " " * indent
    dumped = model.model_dump(mode="json")
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if field.description:
            lines.append(f"{pad}# {field.description}")
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{name}:")
            _emit(value, indent + 2, lines)
        elif isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            lines.append(f"{pad}{name}:")
            for item in value:
                # "- # comment" then the item's keys, indented past the dash: YAML reads one mapping per item.
                item_lines: list[str] = []
                _emit(item, indent + 2, item_lines)
                item_lines[0] = f"{pad}- {item_lines[0][indent + 2 :]}"
                lines += item_lines
        else:
            lines.append(f"{pad}{name}: {_flow(dumped[name])}")


def _flow(value: Any) -> str:
    text = yaml.safe_dump([value], default_flow_style=True, width=10**9, allow_unicode=True).strip()
    return text[1:-1]
