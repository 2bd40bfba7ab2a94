"""The base of every config model, and the mark of keys that have no effect here.

Every section model derives from ``ConfigModel``: frozen, strict (YAML's types are the config's types: ``"8"`` is not
an int, ``true`` is not a number), unknown keys refused (with the class's ``UNKNOWN_KEY_HINTS``), floats finite.

``NO_EFFECT`` names the fields of a class that platoon 0.4.0's configs may set for components this backend does not
have (the Tinker service, LoRA, Weights & Biases, the watchdog, harnesses, ...). They are typed as 0.4.0 types them,
so a wrong value gets the problem 0.4.0 reports, and a config that sets one loads with one warning naming every such
key it set (``platoon.config.no_effect``). ``NO_EFFECT_ALL`` marks a whole section so.
"""

from __future__ import annotations

from typing import Any, ClassVar, get_args

from pydantic import BaseModel, ConfigDict


class ConfigModel(BaseModel):
    """Base of every config model: frozen, strict, unknown keys refused (with the class's hints), floats finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    UNKNOWN_KEY_HINTS: ClassVar[dict[str, str]] = {}
    """Unknown key -> the whole message after ``<path>: `` (starting ``unknown key; ...``)."""

    NO_EFFECT: ClassVar[frozenset[str]] = frozenset()
    """Fields a 0.4.0 config may set that nothing here acts on (each one set is warned about)."""

    NO_EFFECT_ALL: ClassVar[bool] = False
    """True: the whole section has no effect here (a config that sets any of it is warned about once)."""


def no_effect_paths(model: ConfigModel, prefix: str = "") -> list[str]:
    """The dotted paths of every key ``model`` sets (explicitly, at any depth) that has no effect here: a field its
    class lists in ``NO_EFFECT``, or any key of a ``NO_EFFECT_ALL`` section (named once, by the section's path)."""
    out: list[str] = []
    for name in sorted(model.model_fields_set):
        path = f"{prefix}.{name}" if prefix else name
        value = getattr(model, name)
        if name in type(model).NO_EFFECT or (isinstance(value, ConfigModel) and type(value).NO_EFFECT_ALL
                                             and value.model_fields_set):
            out.append(path)
        elif isinstance(value, ConfigModel):
            out += no_effect_paths(value, path)
        elif isinstance(value, list | tuple):
            out += [p for i, v in enumerate(value) if isinstance(v, ConfigModel)
                    for p in no_effect_paths(v, f"{path}.{i}")]
        elif isinstance(value, dict):
            out += [p for k, v in value.items() if isinstance(v, ConfigModel)
                    for p in no_effect_paths(v, f"{path}.{k}")]
    return out


KEPT_WHEN_RECORDED = frozenset({"env"})
"""Keys a recorded config keeps at their defaults: whether a config set them is warned about (an entry's ``env``)."""


def drop_recorded_defaults(data: dict[str, Any], cls: type[BaseModel]) -> None:
    """Remove from ``data`` (to be validated as ``cls``) every key that holds its default, in place, at any depth: a
    run's recorded config (``lock.json``) names every key, and what depends on whether a config set a key (the
    no-effect warnings, the simulator's) should see only what the run's config set."""
    for name, field in cls.model_fields.items():
        if name not in data:
            continue
        if name in KEPT_WHEN_RECORDED:
            continue
        if not field.is_required():
            default = field.get_default(call_default_factory=True)
            if data[name] == (default.model_dump(mode="json") if isinstance(default, BaseModel) else default):
                del data[name]
                continue
        nested = _section_class(field.annotation)  # a section, or the item of a list of sections
        value = data[name]
        for part in value if isinstance(value, list) else [value]:
            if nested is not None and isinstance(part, dict):
                drop_recorded_defaults(part, nested)


def _section_class(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    found = [a for a in get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    return found[0] if len(found) == 1 else None


__all__ = ["ConfigModel", "drop_recorded_defaults", "no_effect_paths"]
