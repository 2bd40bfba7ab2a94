"""A config as YAML: the text ``config show`` prints (with ``--defaults``, every field's description above it).

Rules it keeps: every field is written, in schema order, but the keys that would have no effect here (the ones
``config validate`` warns about: 0.4.0's keys of components this backend does not have, and the like), which
``--defaults`` writes commented out and a plain ``show`` leaves out, naming how many; the text loads back to a config
that runs the same (the lines ``config show`` adds are YAML comments), and passes ``config validate --strict``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel

from platoon import __version__
from platoon.config.config_warnings import inert_paths
from platoon.config.effective import entry_summary

if TYPE_CHECKING:
    from platoon.config.models import RunConfig


NO_EFFECT_MARK = "(no effect in this release; kept for platoon 0.4.0 configs)"
"""What ``--defaults`` writes above a key it comments out."""


def shown(cfg: RunConfig, *, defaults: bool = False) -> str:
    """What ``config show`` prints: ``cfg`` as YAML without the keys that have no effect here, then each entry's
    effective settings as comments; with ``defaults``, a heading and every field's description above it instead,
    the keys with no effect commented out."""
    inert = frozenset(inert_paths(type(cfg).model_validate(cfg.model_dump(mode="json"))))
    if defaults:
        return (f"# platoon {__version__} run config: every field, each with its description; the keys with no "
                "effect in this release are commented out\n" + to_yaml(cfg, comments=True, inert=inert))
    entries = "".join(f"#   {entry_summary(cfg, i)}\n" for i in range(len(cfg.environments)))
    left_out = (f"# {len(inert)} keys with no effect in this release left out (config show --defaults shows them)\n"
                if inert else "")
    return to_yaml(cfg, inert=inert) + left_out + "# each entry's effective settings:\n" + entries


def to_yaml(cfg: BaseModel, *, comments: bool = False, inert: frozenset[str] = frozenset()) -> str:
    """``cfg`` as YAML, every field in schema order but the dotted paths in ``inert`` (with ``comments``: each field's
    description above it, and the ``inert`` keys commented out).

    The text loads back to an equal config where the ``inert`` keys hold their defaults.
    """
    if not comments:
        data = cfg.model_dump(mode="json")
        for path in inert:
            _drop(data, path.split("."))
        return yaml.safe_dump(data, sort_keys=False, width=10**9, allow_unicode=True)
    lines: list[str] = []
    _emit(cfg, 0, lines, "", inert)
    return "\n".join(lines) + "\n"


def _emit(model: BaseModel, indent: int, lines: list[str], prefix: str, inert: frozenset[str]) -> None:
    pad = " " * indent
    dumped = model.model_dump(mode="json")
    for name, field in type(model).model_fields.items():
        value, path = getattr(model, name), f"{prefix}{name}"
        if field.description:
            lines.append(f"{pad}# {field.description}")
        own: list[str] = []
        if isinstance(value, BaseModel):
            own.append(f"{pad}{name}:")
            _emit(value, indent + 2, own, f"{path}.", inert)
        elif isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            own.append(f"{pad}{name}:")
            for i, item in enumerate(value):
                # "- # comment" then the item's keys, indented past the dash: YAML reads one mapping per item.
                item_lines: list[str] = []
                _emit(item, indent + 2, item_lines, f"{path}.{i}.", inert)
                item_lines[0] = f"{pad}- {item_lines[0][indent + 2 :]}"
                own += item_lines
        else:
            flow = dumped[name]
            for inner in inert:
                if inner.startswith(f"{path}."):
                    _drop(flow, inner[len(path) + 1 :].split("."))
            own.append(f"{pad}{name}: {_flow(flow)}")
        if path in inert:
            own = [f"{pad}# {NO_EFFECT_MARK}", *(f"{pad}# {line[indent:]}" for line in own)]
        lines += own


def _drop(data: Any, keys: list[str]) -> None:
    """Remove the value at ``keys`` (mapping keys, or list indices as digits) from ``data``, if it is there."""
    *parents, last = keys
    for key in parents:
        data = data[int(key)] if isinstance(data, list) and key.isdigit() and int(key) < len(data) else (
            data.get(key) if isinstance(data, dict) else None)
        if data is None:
            return
    if isinstance(data, dict):
        data.pop(last, None)


def _flow(value: Any) -> str:
    text = yaml.safe_dump([value], default_flow_style=True, width=10**9, allow_unicode=True).strip()
    return text[1:-1]
