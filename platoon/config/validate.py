"""``platoon config validate``'s verdict on one file: the schema that checks it (``--kind``, ``--schema``), its
problems and its warnings.

What this module owns: ``validate_file``, the kinds a file may be checked as (``KINDS``), and ``check_files``: the
command's verdict on each file it is given, as the lines it prints, with ``--strict`` and ``--tasks`` applied.

Rules it keeps:
- ``auto`` and ``train`` check the run config (``RunConfig``), this platoon's one config schema, which ``platoon
  simulate``, ``platoon train`` and ``platoon eval`` read, with stage 2 (resolution) unless ``resolve`` is off, and
  give its warnings; ``none`` reads the YAML and applies the overrides, and checks nothing else;
- ``eval`` is refused before any file is read (``EVAL_KIND_REFUSED``, a usage error): this platoon has no evaluation
  config, unlike platoon 0.4.0, whose ``platoon eval`` read one;
- ``schema`` (``module:Class``, a pydantic model or a dataclass) checks the file against that class instead, each
  problem with its key path; one that does not import is the file's problem, as in platoon 0.4.0. Naming
  ``RunConfig`` itself is ``train``;
- a problem at a key an override set is prefixed with the override, as everywhere;
- ``--tasks`` lists a file's training tasks only when it has no problem, through the lister the caller gives (the
  live layer builds the environments: this layer cannot); a ``problem: `` line it gives fails the file, and under
  ``--strict`` so does any warning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from platoon.config.errors import ConfigError, ExtensionError, UsageError
from platoon.config.loader import load_config, load_config_warnings, load_data
from platoon.config.models import RunConfig
from platoon.config.overrides import with_overrides
from platoon.config.problems import describe_errors
from platoon.config.registry import import_ref

KINDS = ("auto", "train", "eval", "none")

EVAL_KIND_REFUSED = (
    "--kind eval: this platoon has no evaluation config: platoon eval reads a run config (its initial policy) or a "
    "run directory, so check a run config with --kind train (or auto); one of platoon 0.4.0's evaluation configs "
    "(its inference: section) has no counterpart here"
)


@dataclass
class Verdict:
    """One file's verdict. ``schema`` is what checked it when that is not the run config (printed beside ``ok``);
    ``cfg`` is the loaded run config when it is one and has no problem."""

    path: Path
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    schema: str | None = None
    cfg: RunConfig | None = None


TaskLister = Callable[[RunConfig], list[str]]
"""A run config's tasks as ``--tasks`` prints them: plan lines, ``warning: ...`` and ``problem: ...`` lines."""


@dataclass(frozen=True)
class Checked:
    """One file as ``config validate`` prints it: ``ok``/``FAIL`` and its path, then a line per problem, warning
    and listed task line; ``failed`` when it fails the command (exit 78)."""

    failed: bool
    text: str


def check_files(paths: Sequence[Path], overrides: Sequence[str] = (), *, kind: str = "auto",
                schema: str | None = None, resolve: bool = True, strict: bool = False,
                list_tasks: TaskLister | None = None) -> Iterator[Checked]:
    """``config validate``: each file's ``Checked``, in order, as each is checked. Raises UsageError, before any
    file is read, for ``--kind eval`` or no file."""
    if kind == "eval":
        raise UsageError(EVAL_KIND_REFUSED)
    if not paths:
        raise UsageError("config validate needs at least one CONFIG")
    return (_checked(validate_file(p, overrides, kind=kind, schema=schema, resolve=resolve), strict, list_tasks)
            for p in paths)


def _checked(verdict: Verdict, strict: bool, list_tasks: TaskLister | None) -> Checked:
    listed: list[str] = []
    if list_tasks is not None and not verdict.problems:
        listed = list_tasks(verdict.cfg) if verdict.cfg is not None else ["tasks: only a run config's tasks are listed"]
    problems = [*verdict.problems, *(line.removeprefix("problem: ") for line in listed if line.startswith("problem: "))]
    warned = bool(verdict.warnings) or any(line.startswith("warning: ") for line in listed)
    failed = bool(problems) or (strict and warned)
    if failed:
        head = f"FAIL {verdict.path}" + ("" if problems else " (--strict: its warnings fail it)")
    else:
        head = f"ok   {verdict.path}" + (f" ({verdict.schema})" if verdict.schema else "")
    lines = [*problems, *(f"warning: {w}" for w in verdict.warnings),
             *(line for line in listed if not line.startswith("problem: "))]
    return Checked(failed, head + "".join(f"\n  {line}" for line in lines))


def validate_file(
    path: Path, overrides: Sequence[str] = (), *, kind: str = "auto", schema: str | None = None, resolve: bool = True
) -> Verdict:
    """Check the config at ``path`` with ``overrides`` applied (see the module doc). ``kind`` must not be ``eval``
    (ValueError: the caller refuses it first)."""
    if kind not in KINDS or kind == "eval":
        raise ValueError(f"kind {kind!r}: one of auto, train, none")
    verdict = Verdict(path)
    try:
        cls = _schema_class(schema) if schema is not None else None
        if cls is None or cls is RunConfig:
            if kind == "none" and cls is None:
                verdict.schema = "no schema"
                load_data(path, overrides)
                return verdict
            verdict.cfg = load_config(path, overrides, strict_resolve=resolve, needs_log_path=True)
            verdict.warnings = load_config_warnings(verdict.cfg)
            return verdict
        verdict.schema = cls.__name__
        data, applied = load_data(path, overrides, defaults=_defaults(cls))
        verdict.problems = with_overrides(_schema_problems(cls, data), applied)
    except (ConfigError, ExtensionError) as exc:
        verdict.problems = list(getattr(exc, "problems", None) or [str(exc)])
    return verdict


def _schema_class(ref: str) -> type:
    if ":" not in ref:
        raise ConfigError([f"--schema {ref!r}: expected module:Class"])
    try:
        cls = import_ref(ref)
    except ExtensionError as exc:
        raise ConfigError([f"--schema {ref!r} cannot be imported: {exc}"]) from None
    if not (isinstance(cls, type) and (issubclass(cls, BaseModel) or dataclasses.is_dataclass(cls))):
        raise ConfigError([f"--schema {ref!r}: not a pydantic model or a dataclass"])
    return cls


def _defaults(cls: type) -> dict[str, Any]:
    """The class's defaults as plain data (what an override reaching into a missing key starts from); empty when it
    cannot be built without arguments."""
    try:
        return TypeAdapter(cls).dump_python(cls(), mode="json")
    except Exception:  # noqa: BLE001 - a class with required fields has no defaults to start from
        return {}


def _schema_problems(cls: type, data: dict[str, Any]) -> list[str]:
    try:
        if issubclass(cls, BaseModel):
            cls.model_validate(data)
        else:
            TypeAdapter(cls).validate_python(data)
    except ValidationError as exc:
        return [str(p) for p in describe_errors(exc, root=cls, data=data)]
    return []
