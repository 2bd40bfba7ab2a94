"""Resolving admission rules: a name or ``module:Class`` to a class, a config's options to parsed ones, and a run's
rules resolved together into what ``AdmissionSet`` is built from.

What this module owns: ``resolve_group_admission`` (a core name, then a registered name, then ``module:Class``);
``parse_rule_options`` (a rule's ``options_schema`` applied to the config's mapping); ``resolve_rules``, which
resolves a run's rule and each entry's own into ``ResolvedRule``\\ s; and ``admission_set``, which builds the
policy layer's ``AdmissionSet`` from them.

Rules it keeps:

- A rule class has a callable, synchronous ``admit``: an ``async def`` (or async generator) is refused here, at
  resolution, since an admission is one synchronous call at settle.
- Every problem is one line that starts with its key path (``train.group_admission``,
  ``environments['a'].group_admission_options.band``, ...); an unknown name or option comes with a did-you-mean.
- An entry's options without the entry's own rule are a problem: the options go with the rule they configure.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from platoon.config import component_resolution as resolution
from platoon.config.component_resolution import did_you_mean, find_class, options_schema
from platoon.config.errors import ConfigError, ExtensionError
from platoon.policy import CORE_RULES, AdmissionSet, ResolvedRule


def resolve_group_admission(ref: str | type) -> type:
    """The rule class ``ref`` names: a core name, then a registered name, then ``module:Class``; or a class as is.

    Raises ``ExtensionError`` for an unknown name (with a did-you-mean), an import failure, or a class without a
    callable, synchronous ``admit``.
    """
    if isinstance(ref, type):
        cls, shown = ref, f"{ref.__module__}:{ref.__qualname__}"
    elif not isinstance(ref, str) or not ref:
        raise ExtensionError(f"a group admission rule is a name or module:Class, not {ref!r}")
    elif ref in CORE_RULES:
        return CORE_RULES[ref]
    else:
        cls, shown = find_class("group_admission", ref), ref
    if not isinstance(cls, type):
        raise ExtensionError(f"group admission {shown!r} is not a class but {type(cls).__name__}")
    admit = getattr(cls, "admit", None)
    if not callable(admit):
        raise ExtensionError(f"group admission {shown!r} has no callable admit(group, stats)")
    if inspect.iscoroutinefunction(admit) or inspect.isasyncgenfunction(admit):
        raise ExtensionError(
            f"group admission {shown!r}: admit must be a plain function, not async: an admission is one "
            "synchronous call at settle"
        )
    return cls


def parse_rule_options(cls: type, options: Mapping[str, Any] | None, *, key: str, name: str) -> Any:
    """``options`` parsed by ``cls.options_schema`` (``component_resolution.parse_options``); ValueError with one
    line per problem, each prefixed ``key``.

    A schema that is None takes no options (and parses to None); a pydantic model or a dataclass refuses unknown
    keys (with a did-you-mean); any other callable parses the mapping itself and raises ValueError to refuse it.
    """
    schema = options_schema(cls)
    try:
        parsed = resolution.parse_options(schema, options)
    except resolution.OptionsRefused as refused:
        raise _options_error(refused, schema, key, name) from None
    return None if schema is None else parsed


def _options_error(refused: resolution.OptionsRefused, schema: Any, key: str, name: str) -> Exception:
    """The ValueError a rule's refused options raise; a TypeError of a parsing function is raised unchanged."""
    error = refused.error
    if refused.reason == resolution.NO_OPTIONS:
        return ValueError(f"{key}: {name!r} takes no options; leave {key.rsplit('.', 1)[-1]} out")
    if refused.reason == resolution.UNKNOWN_KEYS:
        return ValueError("\n".join(_unknown_line(key, k, refused.known) for k in refused.unknown))
    if refused.reason == resolution.BAD_SCHEMA:
        return ValueError(f"{key}: {name}'s options_schema {schema!r} is not a model, dataclass or parsing function")
    if refused.form == resolution.MODEL and isinstance(error, ValidationError):
        known = list(schema.model_fields)
        return ValueError("\n".join(_pydantic_line(key, err, known) for err in error.errors()))
    if refused.form == resolution.DATACLASS or (refused.form == resolution.FUNCTION and isinstance(error, ValueError)):
        return ValueError(f"{key}: {error}")
    assert error is not None  # the remaining reasons carry what the schema raised
    return error


def _unknown_line(key: str, name: str, known: list[str]) -> str:
    hint = did_you_mean(name, known) or (f"; known: {', '.join(known)}" if known else "")
    return f"{key}.{name}: unknown option{hint}"


def _pydantic_line(key: str, err: Mapping[str, Any], known: list[str]) -> str:
    loc = ".".join(str(p) for p in err.get("loc", ()))
    if err.get("type") == "extra_forbidden":
        return _unknown_line(key, loc, known)
    msg = str(err.get("msg", "invalid"))
    msg = msg.removeprefix("Value error, ")
    return f"{key}.{loc}: {msg}" if loc else f"{key}: {msg}"


# ------------------------------------------------------------------------------------------ the run's rules


def _entry_key(label: str) -> str:
    return f"environments[{label!r}]"


def resolve_rules(
    run_rule: str,
    run_options: Mapping[str, Any] | None,
    entry_rules: Mapping[str, tuple[str | None, Mapping[str, Any] | None]],
) -> tuple[ResolvedRule | None, dict[str, ResolvedRule], list[str]]:
    """Resolve and parse the run's rule and each entry's own: ``(run's, entries' own by label, problems)``.

    An entry whose rule is None inherits the run's and has no entry of its own; the run's is None only when it has
    a problem. Each problem is one line with its key path.
    """
    problems: list[str] = []

    def one(ref: Any, options: Any, *, key: str, level: str, entry: str | None) -> ResolvedRule | None:
        try:
            cls = resolve_group_admission(ref)
        except ExtensionError as exc:
            problems.append(f"{key}.group_admission: {exc}")
            return None
        name = ref if entry is None else f"{ref}@{entry}"
        try:
            parsed = parse_rule_options(cls, options, key=f"{key}.group_admission_options", name=ref)
        except ValueError as exc:
            problems.extend(str(exc).splitlines())
            return None
        return ResolvedRule(name, ref, level, entry, cls, parsed)

    run = one(run_rule, run_options, key="train", level="run", entry=None)
    own: dict[str, ResolvedRule] = {}
    for label, (ref, options) in entry_rules.items():
        key = _entry_key(label)
        if ref is None:
            if options:
                problems.append(
                    f"{key}.group_admission_options: set without {key}.group_admission; the options go with the "
                    "rule they configure"
                )
            continue
        rule = one(ref, options, key=key, level="entry", entry=label)
        if rule is not None:
            own[label] = rule
    return run, own, problems


def admission_set(
    *,
    run_rule: str,
    run_options: Mapping[str, Any] | None,
    entry_rules: Mapping[str, tuple[str | None, Mapping[str, Any] | None]],
    entries: Mapping[str, Any],
    batch_size: int,
    label_column: str | None = None,
) -> AdmissionSet:
    """The run's ``AdmissionSet`` from the config's references (``resolve_rules``): ``entry_rules`` maps an entry
    label to ``(rule name or None, options)``, None inheriting the run's. A problem with a rule or its options
    raises ``ConfigError`` listing every one."""
    run, own, problems = resolve_rules(run_rule, run_options, entry_rules)
    if problems:
        raise ConfigError(problems)
    assert run is not None
    return AdmissionSet(run=run, own=own, entries=entries, batch_size=batch_size, label_column=label_column,
                        labels=tuple(entry_rules))
