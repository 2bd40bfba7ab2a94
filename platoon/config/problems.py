"""Config problems: pydantic's validation errors as ``<dotted.path>: <message>`` lines.

Owns ``Problem`` (one report line) and ``describe_errors``, which the loader, the core option checks
(``components``), stage 2 (``resolve``) and the simulator's setup all use to report a config's mistakes.

Rules it keeps:
- paths follow the data, not pydantic's locations: a discriminated union's tag and pydantic's internal names are
  left out, so ``sim.rollout.duration.fixed.value_s`` reads ``sim.rollout.duration.value_s``;
- an unknown key gets its model's ``UNKNOWN_KEY_HINTS`` message (read off whichever model validates that node),
  else a did-you-mean among the model's fields;
- a value is shown as a YAML reader wrote it (``null``, ``true``, ``'text'``).

It reads the schema only through pydantic's own model fields, so it sits below ``models`` and any schema can use it.
"""

from __future__ import annotations

import difflib
import re
import types
from typing import Annotated, Any, NamedTuple, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from platoon.config.bounds import INT64_MAX, INT64_MIN


class Problem(NamedTuple):
    """One problem of a config: its dotted key path and what is wrong there; ``str()`` is the report line."""

    path: str
    message: str
    loc: tuple[str | int, ...] = ()
    """The path as keys and list indices into the data that was validated (without the prefix)."""

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


MISSING_KEY = "missing required key"

_TYPE_WORDS = {
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "list_type": "must be a list",
    "string_too_short": "must not be empty",
    "finite_number": "must be a finite number",
}


def show_value(v: object) -> str:
    """A value as a YAML reader wrote it: ``null``, ``true``, ``'text'``, ``3``, or ``a mapping``/``a list``."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list | tuple):
        return "a list"
    return repr(v)


def describe_errors(exc: ValidationError, *, root: Any, data: Any, prefix: str = "") -> list[Problem]:
    """Translate every error of ``exc`` (from validating ``data`` as ``root``) into a Problem.

    Paths follow the data, not pydantic's locations: a discriminated union's tag and pydantic's internal names
    are left out, so ``sim.rollout.duration.fixed.value_s`` reads ``sim.rollout.duration.value_s``. An unknown key
    gets its model's ``UNKNOWN_KEY_HINTS`` message, else a did-you-mean among the model's fields.
    """
    out: list[Problem] = []
    for err in exc.errors(include_url=False):
        loc = _data_loc(err["loc"], data, err["type"])
        path = ".".join(str(p) for p in ((prefix,) if prefix else ()) + loc)
        out.append(Problem(path, _message(err, root, loc, data), loc))
    return out


def _data_loc(loc: tuple[Any, ...], data: Any, kind: str) -> tuple[str | int, ...]:
    node, out = data, []
    for i, el in enumerate(loc):
        if isinstance(node, dict) and el in node:
            out.append(el)
            node = node[el]
        elif isinstance(node, list) and isinstance(el, int) and 0 <= el < len(node):
            out.append(el)
            node = node[el]
        elif i == len(loc) - 1 and kind == "missing" and isinstance(node, dict):
            out.append(el)
        # anything else is a union tag or one of pydantic's own names ("[key]", "function-after[...]")
    return tuple(out)


def _nested_key(model: Any, key: str, depth: int = 3) -> str | None:
    """``section.key`` where ``key`` is no key of ``model`` but one of its sections' (``model_name`` written at the
    top level: ``train.model_name``), searched in the order the sections are declared, or None."""
    for name, field in model.model_fields.items():
        section = field.annotation
        if not (isinstance(section, type) and hasattr(section, "model_fields")):
            continue
        if key in section.model_fields:
            return f"{name}.{key}"
        deeper = _nested_key(section, key, depth - 1) if depth > 1 else None
        if deeper:
            return f"{name}.{deeper}"
    return None


def _message(err: Any, root: Any, loc: tuple[str | int, ...], data: Any) -> str:
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "missing":
        return MISSING_KEY
    if kind == "extra_forbidden":
        key = str(loc[-1]) if loc else ""
        model = model_at(root, loc[:-1], data)
        if model is None:
            return "unknown key"
        hint = getattr(model, "UNKNOWN_KEY_HINTS", {}).get(key)
        if hint:
            return hint
        nested = _nested_key(model, key)
        if nested:
            return f"unknown key; did you mean {nested!r}?"
        close = difflib.get_close_matches(key, list(model.model_fields), n=1, cutoff=0.6)
        return f"unknown key; did you mean {close[0]!r}?" if close else "unknown key"
    if kind in ("value_error", "assertion_error"):
        msg = str(err["msg"])
        return msg.split(", ", 1)[1] if msg.startswith(("Value error, ", "Assertion failed, ")) else msg
    if kind == "union_tag_invalid":
        return f"dist must be one of {ctx.get('expected_tags')}, got {ctx.get('tag')!r}"
    if kind == "union_tag_not_found":
        return f"needs a dist: one of {', '.join(_DIST_TAGS)}"
    if err["loc"] and err["loc"][-1] == "[key]":
        text = "a key here must be a string"
    elif kind == "float_type" and _reads_as_float(err.get("input")):
        return (f"must be a number; YAML reads {err['input']} as text, since its floats need a dot and a signed "
                f"exponent: write {_as_yaml_float(err['input'])}")
    elif kind in _TYPE_WORDS:
        text = _TYPE_WORDS[kind]
    elif kind in ("greater_than_equal", "less_than_equal") and ctx.get("ge", ctx.get("le")) in (INT64_MIN, INT64_MAX):
        text = "must be a 64-bit integer, from -2**63 to 2**63 - 1"
    elif kind == "greater_than_equal":
        text = f"must be at least {ctx['ge']}"
    elif kind == "greater_than":
        text = f"must be above {ctx['gt']}"
    elif kind == "less_than_equal":
        text = f"must be at most {ctx['le']}"
    elif kind == "less_than":
        text = f"must be below {ctx['lt']}"
    elif kind == "literal_error":
        text = f"must be {ctx['expected']}"
    elif kind == "string_pattern_mismatch":
        text = f"must match {ctx['pattern']}"
    else:
        msg = str(err["msg"])
        text = msg[:1].lower() + msg[1:]
    return f"{text}, got {show_value(err.get('input'))}"


_EXPONENT_TEXT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _reads_as_float(v: object) -> bool:
    """Whether ``v`` is text that YAML 1.2 would read as a float and PyYAML (YAML 1.1) reads as text: ``1e308``."""
    return isinstance(v, str) and _EXPONENT_TEXT.fullmatch(v) is not None


def _as_yaml_float(text: str) -> str:
    """``1e308`` as YAML 1.1 reads it as a float: ``1.0e+308``."""
    mantissa, _, exponent = text.strip().lower().partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    if exponent and exponent[0] not in "+-":
        exponent = "+" + exponent
    return f"{mantissa}e{exponent}" if exponent else mantissa


def model_at(root: Any, loc: tuple[str | int, ...], data: Any) -> type[BaseModel] | None:
    """The model class that validates the node at ``loc`` of ``data`` (a union picked by the node's ``dist``)."""
    t: Any = root
    node = data
    for el in loc:
        t = _unwrap(t, node)
        if isinstance(t, type) and issubclass(t, BaseModel):
            field = t.model_fields.get(el) if isinstance(el, str) else None
            if field is None:
                return None
            t = field.annotation
        elif get_origin(t) in (list, dict):
            t = get_args(t)[-1]
        else:
            return None
        try:
            node = node[el]
        except (KeyError, IndexError, TypeError):
            node = None
    t = _unwrap(t, node)
    return t if isinstance(t, type) and issubclass(t, BaseModel) else None


def _unwrap(t: Any, node: Any) -> Any:
    while True:
        origin = get_origin(t)
        if origin is Annotated:
            t = get_args(t)[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in get_args(t) if a is not type(None)]
            if len(members) == 1:
                t = members[0]
                continue
            tag = node.get("dist") if isinstance(node, dict) else None
            for m in members:
                m = _unwrap(m, None)
                if isinstance(m, type) and issubclass(m, BaseModel) and "dist" in m.model_fields:
                    if tag in get_args(m.model_fields["dist"].annotation):
                        return m
            return None
        else:
            return t


_DIST_TAGS = ("fixed", "exponential", "lognormal", "empirical")
