"""Overrides: ``dotted.key=value`` and ``dotted.key+=value`` applied to a config's data before it is validated.

What this module owns: telling an override from a file name on a command line (``split_arguments``), parsing one
override and applying it to the raw data (``apply_override``), and naming the override in a problem at a key it set
(``with_overrides``).

Rules it keeps:
- a command-line argument is an override when it is not an existing file, holds ``=`` and its left side (without a
  trailing ``+``) is a dotted key (``train.batch_size``, ``environments.0.name``); anything else is a file name. A file
  literally named ``a=b.yaml`` is a file when it exists, as platoon 0.4.0 decides (``--set`` is always an override);
- ``key=value`` sets the key; ``key+=value`` appends the value, as one item, to the list at the key (a missing or
  null list starts as its default's copy, or empty), as in platoon 0.4.0;
- the value is YAML (``null`` for None, ``[1, 2]`` for a list, ``{a: 1}`` for a mapping), read as a file is
  (``platoon.config.yaml_loader``: plain data, no duplicate keys, bounded); a duplicate key is a problem, and the
  value is applied with its last one, so that the rest of it is checked too;
- a list is indexed by a number, and an index one past the end appends; a key the data lacks on the way to the
  last one starts empty (``_empty_like``): a mapping, or its default's list with each mapping in it emptied (a default
  distribution is copied whole), so that an override sets only its own key (a required key stays missing; the
  no-effect warning names only keys set);
- a malformed override is one problem keyed ``override <text>``, and is not recorded as applied;
- a problem at a key an override set, or below it, is prefixed ``override <key>=<value>: ``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from platoon.config.models import schema_defaults
from platoon.config.problems import Problem
from platoon.config.yaml_loader import describe_yaml_error, load_yaml, read_yaml

_INDEX = re.compile(r"\d+")
_DOTTED_KEY = re.compile(r"[A-Za-z_][\w-]*(\.[\w-]+)*")


def is_override(argument: str) -> bool:
    """Whether a command-line ``argument`` is an override rather than a file name (see the module doc)."""
    key, sep, _ = argument.partition("=")
    if not sep or Path(argument).is_file():
        return False
    return _DOTTED_KEY.fullmatch(key.strip().removesuffix("+")) is not None


def split_arguments(arguments: Iterable[str]) -> tuple[list[str], list[str]]:
    """``(file names, overrides)`` of positional command-line ``arguments``, each list in the order given."""
    files: list[str] = []
    overrides: list[str] = []
    for argument in arguments:
        (overrides if is_override(argument) else files).append(argument)
    return files, overrides


def apply_override(
    data: dict[str, Any],
    text: str,
    applied: dict[str, str],
    problems: list[Problem],
    *,
    defaults: Mapping[str, Any] | None = None,
) -> None:
    """Apply the override ``text`` to ``data`` in place and record it in ``applied`` (key -> text); a problem with
    it goes to ``problems`` instead. ``defaults`` (the schema's defaults as plain data; None: ``RunConfig``'s) give a
    key the data lacks its starting value."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    append = key.endswith("+")
    key = key.removesuffix("+").strip()
    if not sep or not key or any(not part for part in key.split(".")):
        problems.append(Problem(f"override {text}", "expected dotted.key=value or dotted.key+=value"))
        return
    try:
        value, duplicates = read_yaml(raw)
    except yaml.YAMLError as exc:
        duplicates, value = describe_yaml_error(exc), _REFUSED
    for p in duplicates:  # a duplicate key is reported, and its last value applied (as a file's is)
        where = f"{p.path}: " if p.path else ""
        problems.append(Problem(f"override {text}", f"the value is not YAML: {where}{p.message}"))
    if value is _REFUSED:
        return
    parts = key.split(".")
    if defaults is None:
        defaults = schema_defaults().model_dump(mode="json")
    if append:
        value = _appended(data, defaults, parts, value, text, problems)
        if value is _REFUSED:
            return
    node: Any = data
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        here = ".".join(parts[:depth])
        if isinstance(node, list):
            if not _INDEX.fullmatch(part):
                problems.append(Problem(f"override {text}", f"{here} is a list: index it with a number"))
                return
            index = int(part)
            if index > len(node):
                problems.append(
                    Problem(
                        f"override {text}", f"{here} has {len(node)} items; index {index} is past its end"
                    )
                )
                return
            if last:
                node[index : index + 1] = [value]
                break
            if index == len(node):
                node.append({})
            node = node[index]
        elif isinstance(node, dict):
            if last:
                node[part] = value
                break
            if part not in node:
                node[part] = _empty_like(_at(defaults, parts[: depth + 1]), parts[: depth + 1])
            node = node[part]
        else:
            problems.append(Problem(f"override {text}", f"{here} is {_kind(node)}, not a mapping or a list"))
            return
    applied[key] = text


_REFUSED = object()


def _appended(
    data: Any, defaults: Any, parts: Sequence[str], item: Any, text: str, problems: list[Problem]
) -> Any:
    """The list at ``parts`` (the data's, else a copy of its default; null: empty) with ``item`` appended, or
    ``_REFUSED`` after adding the problem when something other than a list is there."""
    current = _at(data, parts)
    if current is None:
        current = copy.deepcopy(_at(defaults, parts))
    if current is None:
        current = []
    if not isinstance(current, list):
        problems.append(Problem(f"override {text}", f"{'.'.join(parts)} is {_kind(current)}, not a list to "
                                                    "append to"))
        return _REFUSED
    return [*current, item]


def override_value(raw: str) -> tuple[Any, bool]:
    """The value of an override's text after ``=``, and whether it reads (as ``apply_override`` reads it)."""
    try:
        return load_yaml(raw), True
    except yaml.YAMLError:
        return None, False


_VALUE_MAPPINGS = (["train", "loss_fn_config"],)
"""Mappings that are one value, not a section: a config's own mapping replaces the default whole, so an override of
one key adds it to the default (``train.loss_fn_config.kl_coef=0.1`` keeps the default clip thresholds)."""


def _empty_like(default: Any, parts: Sequence[str]) -> Any:
    """What the key at ``parts``, which the data lacks, starts as on an override's way to a key below it:
    ``default``'s items when it is a list (``environments.0.name=x`` indexes the default entry), each mapping among
    them emptied (its fields' defaults stand in when it validates); a copy of a default distribution
    (``sim.rollout.duration.median_s=3`` keeps its ``dist`` and other fields, which mean nothing without it) or of a
    mapping that is one value (``_VALUE_MAPPINGS``); else an empty mapping. Otherwise never a copy of the defaults'
    values: they would read as set."""
    if isinstance(default, list):
        return [{} if isinstance(item, dict) else copy.deepcopy(item) for item in default]
    if isinstance(default, dict) and ("dist" in default or list(parts) in _VALUE_MAPPINGS):
        return copy.deepcopy(default)
    return {}


def _at(data: Any, parts: Sequence[str]) -> Any:
    for part in parts:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and _INDEX.fullmatch(part) and int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


def _kind(v: object) -> str:
    return "null" if v is None else f"a {type(v).__name__}"


def with_overrides(lines: list[str], applied: Mapping[str, str]) -> list[str]:
    """``lines`` (problems, each starting with its key path), those at or below a key of ``applied`` prefixed with
    the override that set it."""
    out = []
    for line in lines:
        for key, text in applied.items():
            if line.startswith((f"{key}:", f"{key}.")):
                line = f"override {text}: {line}"
                break
        out.append(line)
    return out
