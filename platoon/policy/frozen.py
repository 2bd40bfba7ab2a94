"""Frozen dataclass instances built quickly, for the few records made once per rollout on a runtime's hot path.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: about a microsecond for a record
of a dozen fields, paid by the simulator for every rollout. ``build(cls, values)`` makes the same instance (equal,
same hash, same repr) by giving it its whole ``__dict__`` at once. It checks nothing: ``values`` must name every
field of ``cls`` and nothing else (``defaults(cls)`` gives those with a default). Only for dataclasses without
``__post_init__`` or slots.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any, TypeVar

T = TypeVar("T")

_new = object.__new__
_set = object.__setattr__


def build(cls: type[T], values: dict[str, Any]) -> T:
    """An instance of frozen dataclass ``cls`` whose fields are ``values`` (taken as its ``__dict__``)."""
    instance = _new(cls)
    _set(instance, "__dict__", values)
    return instance


def defaults(cls: type) -> dict[str, Any]:
    """The fields of dataclass ``cls`` that have a plain default, with it (a factory's default is left out)."""
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


__all__ = ["build", "defaults"]
