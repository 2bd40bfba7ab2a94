"""A plug-in component by name, and its options by its schema: the one implementation stage 2 and the policy layer
share.

What this module owns: ``find_class(kind, ref)`` (a registered name, else ``module:Class`` imported) and
``parse_options(schema, options)`` (a component's ``options_schema`` applied to the config's mapping), with the
did-you-mean both word their refusals with.

Rules it keeps:
- ``find_class`` knows no core names: each caller maps its own (stage 2 to none, the policy layer to its classes)
  before it asks; an unknown name raises the registry's message (did-you-mean, core's names), an import failure
  the registry's ``ExtensionError``;
- ``options_schema`` is a pydantic model, a dataclass (unknown keys refused before it is built), a function that
  parses the mapping itself, or None (no options: ``{}``); anything else is refused;
- a refusal is an ``OptionsRefused`` that says why in parts (``reason``, the schema's ``form``, the unknown and
  known keys, the exception it caught), not in words: stage 2 reports config problems at key paths, the sampler
  and rule runtimes raise ``ValueError`` in their own words, and each caller's messages stay as its tests state them.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from platoon.config import registry
from platoon.config.errors import ExtensionError

NO_OPTIONS = "no_options"
"""The schema is None and options were given."""
UNKNOWN_KEYS = "unknown_keys"
"""A dataclass schema met keys it has no field for (``unknown``, ``known``)."""
INVALID = "invalid"
"""Pydantic refused the options (``error`` is its ValidationError)."""
RAISED = "raised"
"""The dataclass's constructor or the parsing function raised ValueError or TypeError (``error``)."""
BAD_SCHEMA = "bad_schema"
"""The schema is none of the four forms."""

MODEL, DATACLASS, FUNCTION = "model", "dataclass", "function"
"""The forms of a schema (``OptionsRefused.form``)."""


class OptionsRefused(Exception):
    """Options a component's schema refuses, and why (see the module doc); every caller words it its own way."""

    def __init__(
        self,
        reason: str,
        *,
        form: str | None = None,
        unknown: Sequence[str] = (),
        known: Sequence[str] = (),
        error: Exception | None = None,
    ) -> None:
        super().__init__(reason if error is None else f"{reason}: {error}")
        self.reason, self.form, self.error = reason, form, error
        self.unknown, self.known = list(unknown), list(known)


def find_class(kind: str, ref: str) -> Any:
    """What ``ref`` names: ``module:Class`` imported, else the class registered under ``kind``; ``ExtensionError``
    for an import failure or an unknown name (the registry's did-you-mean message)."""
    if ":" in ref:
        return registry.import_ref(ref)
    found = registry.lookup(kind, ref)
    if found is None:
        raise ExtensionError(registry.unknown_name_message(kind, ref))
    return found


def options_schema(cls: type) -> Any:
    """``cls.options_schema``, None when the class declares none (it takes no options)."""
    return getattr(cls, "options_schema", None)


def parse_options(schema: Any, options: Mapping[str, Any] | None, *, validate_dataclass: bool = False) -> Any:
    """``options`` parsed by ``schema``; ``OptionsRefused`` saying why not.

    A dataclass schema is built by calling it, or with ``validate_dataclass`` through pydantic (stage 2 checks the
    fields' types; a runtime builds what stage 2 passed). Exceptions other than ValueError and TypeError propagate.
    """
    data = dict(options or {})
    if schema is None:
        if data:
            raise OptionsRefused(NO_OPTIONS)
        return {}
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return _call(MODEL, schema.model_validate, data)
    if isinstance(schema, type) and dataclasses.is_dataclass(schema):
        known = [f.name for f in dataclasses.fields(schema) if f.init]
        unknown = [k for k in data if k not in known]
        if unknown:
            raise OptionsRefused(UNKNOWN_KEYS, form=DATACLASS, unknown=unknown, known=known)
        build = TypeAdapter(schema).validate_python if validate_dataclass else lambda d: schema(**d)
        return _call(DATACLASS, build, data)
    if callable(schema):
        return _call(FUNCTION, schema, data)
    raise OptionsRefused(BAD_SCHEMA)


def _call(form: str, parse: Any, data: dict[str, Any]) -> Any:
    try:
        return parse(data)
    except ValidationError as exc:
        raise OptionsRefused(INVALID, form=form, error=exc) from exc
    except (ValueError, TypeError) as exc:
        raise OptionsRefused(RAISED, form=form, error=exc) from exc


def did_you_mean(name: str, pool: Sequence[str]) -> str:
    """``; did you mean 'x'?`` naming the closest of ``pool`` to ``name``, or ``""`` when none is close."""
    close = difflib.get_close_matches(name, list(pool), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
