"""``check_group_admission``: the contract check a group admission rule's author runs in their own tests.

What this module owns (docs/group-admission.md): a fixed fixture of settled groups and per-task statistics, and the five checks
of ``CHECKS`` -- protocol, options, answers, pure, fast -- run against a rule given as a class, a registered name or
``module:Class``. Every failed check is listed by name in one AssertionError, with what it saw and what to change.

It is not the policy layer: it times calls (``time.perf_counter``) and, for a rule given by reference, replays the
answers in two subprocesses with ``PYTHONHASHSEED`` 0 and 1, since a rule whose answers follow ``hash()`` or set order
would decide differently after a restart.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from platoon.components import parse_rule_options, resolve_group_admission
from platoon.config.errors import ExtensionError
from platoon.policy import (
    VERDICTS,
    AdmissionCheckContext,
    AdmissionSetup,
    EntryInfo,
    GroupRecord,
    MemberResult,
    TaskStatsStore,
    TaskStatsView,
    accept_answer,
    pool_task_id,
)

CHECKS = ("protocol", "options", "answers", "pure", "fast")
LEVELS = ("run", "entry")
GROUPS = 400
"""Groups each level's rule is asked about."""
PASSES = 10
"""Passes over the groups before the first instance is compared with fresh ones."""
FAST_CALLS = 101
FAST_POOL = 4096
UNKNOWN_OPTION = "conformance_check_unknown_option"
RATES = (0.0, 0.05, 0.3, 0.5, 0.7, 0.95, 1.0)
VERSION = 4
CHANGED_VERSION = 9
_SHOW = 3  # examples shown per failure


# ------------------------------------------------------------------------------------------------- fixture


@dataclass(frozen=True)
class Fixture:
    """The settled groups and statistics every rule is judged on (the same in every process).

    40 tasks (a mixture's pool ids, ``a::t00`` ... ``b::t19``) in entries ``a`` (group size 4, labels alternating
    ``x`` and ``w``, weight 1, seed 3) and ``b`` (group size 8, label ``y``, weight 2, seed 5, success threshold
    0.5); label column ``label``; batch size 8. Per task a
    pass rate from ``RATES`` and 0-3 settled groups, about 15% invalid members and 10% failed groups; every seventh
    task has a draw outstanding. ``view`` reads them at version 4, ``changed`` at version 9 after more groups, and
    ``big`` over 4096 tasks (the 40 among them) for timing.
    """

    entries: Mapping[str, EntryInfo]
    entry_dicts: Mapping[str, Mapping[str, Any]]
    records: tuple[GroupRecord, ...]
    view: TaskStatsView
    changed: TaskStatsView
    big: TaskStatsView
    groups: Mapping[str, tuple[GroupRecord, ...]]
    batch_size: int = 8
    label_column: str = "label"


def _task_rows() -> list[tuple[str, str, str]]:
    """``(task_id, entry, label)``: a mixture's pool ids (``a::t00``), as a run's rule sees them."""
    rows = [(pool_task_id("a", f"t{i:02d}", True), "a", "x" if i % 2 == 0 else "w") for i in range(20)]
    return rows + [(pool_task_id("b", f"t{i:02d}", True), "b", "y") for i in range(20)]


def _records(
    rows: Sequence[tuple[str, str, str]], rng: random.Random, start: int, versions: int
) -> list[GroupRecord]:
    sizes = {"a": 4, "b": 8}
    thresholds = {"a": 1.0, "b": 0.5}
    out: list[GroupRecord] = []
    seq = 0
    for position, (task, entry, label) in enumerate(rows):
        rate = RATES[rng.randrange(len(RATES))]
        for _ in range(rng.randrange(4)):
            version = rng.randrange(versions + 1)
            common = dict(
                start=start,
                seq=seq,
                task_id=task,
                entry=entry,
                labels={"label": label},
                group_size=sizes[entry],
                sampler="uniform@" + entry,
                position=position,
                drawn_at={"main": version},
            )
            seq += 1
            if rng.random() < 0.1:
                out.append(GroupRecord(**common, verdict="failed"))
                continue
            members = []
            for _ in range(sizes[entry]):
                if rng.random() < 0.15:
                    members.append(MemberResult(outcome="invalid", disposition="completed"))
                    continue
                score = 1.0 if rng.random() < rate else (0.5 if entry == "b" and rng.random() < 0.3 else 0.0)
                members.append(
                    MemberResult(
                        reward=score,
                        scored=score,
                        valid=True,
                        outcome="scored",
                        steps=rng.randrange(1, 20),
                        output_tokens=rng.randrange(50, 4000),
                        seconds=round(rng.uniform(1.0, 300.0), 3),
                        versions={"main": (version, version)},
                    )
                )
            valid = [m for m in members if m.valid]
            passes = sum(1 for m in valid if m.passes(thresholds[entry]))
            verdict = "trained" if 0 < passes < len(valid) else ("uniform" if valid else "no_completed_root")
            out.append(GroupRecord(**common, members=tuple(members), verdict=verdict))
    return out


def _store(rows: Sequence[tuple[str, str, str]], records: Sequence[GroupRecord]) -> TaskStatsStore:
    store = TaskStatsStore(rows, {"a": (4, 1.0), "b": (8, 0.5)}, column="label")
    for r in records:
        store.draw(r.start, r.seq, r.task_id, r.position)
        store.settle(r)
        store.fate(r.start, r.seq, "failed" if r.verdict == "failed" else "consumed")
    for i, (task, _, _) in enumerate(rows[::7]):
        store.draw(2, i, task, None)
    return store


def _shapes(record: GroupRecord, level: str) -> list[GroupRecord]:
    """The record under every verdict, then the shapes a workflow can hand over."""
    out = [dataclasses.replace(record, verdict=v) for v in VERDICTS]
    invalid = tuple(
        dataclasses.replace(m, valid=False, scored=None, outcome="invalid") for m in record.members
    )
    out.append(dataclasses.replace(record, members=invalid, verdict="no_completed_root"))
    out.append(dataclasses.replace(record, members=(), verdict="unknown"))
    out.append(dataclasses.replace(record, labels={}))
    if level == "run":
        out.append(dataclasses.replace(record, labels={}, entry=None))
    return out


@functools.lru_cache(maxsize=1)
def fixture() -> Fixture:
    """The fixture, built once per process (deterministic: no hash or clock enters it)."""
    rows = _task_rows()
    records = _records(rows, random.Random(20240401), start=1, versions=VERSION)
    more = _records(rows, random.Random(777), start=3, versions=CHANGED_VERSION)
    entries = {
        "a": EntryInfo(4, 1.0, "a", 1.0, 3, 0, tuple(t for t, e, _ in rows if e == "a")),
        "b": EntryInfo(8, 0.5, "b", 2.0, 5, 1, tuple(t for t, e, _ in rows if e == "b")),
    }
    entry_dicts = {
        name: {
            "weight": info.weight,
            "seed": info.seed,
            "group_size": info.group_size,
            "success_threshold": info.success_threshold,
            "task_sampler": "uniform",
            "task_sampler_options": {},
        }
        for name, info in entries.items()
    }
    big_rows = list(rows)
    for i in range(FAST_POOL - len(rows)):
        entry = "a" if i % 2 == 0 else "b"
        big_rows.append((pool_task_id(entry, f"big-{i:04d}", True), entry, "x" if entry == "a" else "y"))
    groups: dict[str, tuple[GroupRecord, ...]] = {}
    for level in LEVELS:
        base = [r for r in records if level == "run" or r.entry == "a"]
        variants = [_shapes(r, level) for r in base]
        width = len(variants[0])
        groups[level] = tuple(variants[(i // width) % len(base)][i % width] for i in range(GROUPS))
    return Fixture(
        entries=entries,
        entry_dicts=entry_dicts,
        records=tuple(records),
        view=TaskStatsView(_store(rows, records), float(VERSION)),
        changed=TaskStatsView(_store(rows, records + more), float(CHANGED_VERSION)),
        big=TaskStatsView(_store(big_rows, records), float(VERSION)),
        groups=groups,
    )


# --------------------------------------------------------------------------------------------- answering


def _ask(instance: Any, group: GroupRecord, view: TaskStatsView) -> tuple[tuple, str]:
    """(a comparable answer, a description). Comparable answers carry no addresses or messages, only the verdict,
    or the kind of failure and the exception's type."""
    try:
        answer = instance.admit(group, view)
    except Exception as exc:  # noqa: BLE001 - the check reports whatever a rule raises
        return ("raised", type(exc).__name__), f"raised {type(exc).__name__}: {exc}"
    if inspect.isawaitable(answer):
        close = getattr(answer, "close", None)
        if callable(close):
            close()
        return ("invalid", "awaitable"), "returned an awaitable (admit must be one synchronous call)"
    verdict, problem = accept_answer(answer)
    if verdict is None:
        return ("invalid", type(answer).__name__), problem
    return ("ok", verdict.admit, verdict.reason), f"Admission({verdict.admit}, {verdict.reason!r})"


def _describe(i: int, group: GroupRecord) -> str:
    return f"group {i} (task {group.task_id!r}, entry {group.entry!r}, verdict {group.verdict!r})"


def _shown(answer: tuple) -> str:
    if answer[0] == "ok":
        return f"Admission({answer[1]}, {answer[2]!r})"
    return f"{answer[0]} {answer[1]}"


def _differences(first: Sequence[tuple], second: Sequence[tuple], groups: Sequence[GroupRecord]) -> list[str]:
    diffs = [i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b]
    shown = [
        f"{_describe(i, groups[i])}: {_shown(first[i])}, then {_shown(second[i])}" for i in diffs[:_SHOW]
    ]
    more = f" (and {len(diffs) - _SHOW} more)" if len(diffs) > _SHOW else ""
    return [f"{len(diffs)} of {len(first)} groups differ: " + "; ".join(shown) + more] if diffs else []


def _setup(name: str, level: str, fx: Fixture, *, with_entries: bool = True) -> AdmissionSetup:
    entry = "a" if level == "entry" else None
    qualified = f"{name}@a" if level == "entry" else name
    return AdmissionSetup(
        qualified, level, entry, fx.entries if with_entries else {}, fx.batch_size, fx.label_column
    )


def _replay(payload: Mapping[str, Any]) -> dict[str, list]:
    """A subprocess's answers: a fresh instance per level, one pass over the level's groups (JSON-safe)."""
    if payload.get("module"):
        __import__(payload["module"])
    cls = resolve_group_admission(payload["ref"])
    options = parse_rule_options(cls, payload["options"], key="options", name=payload["ref"])
    fx = fixture()
    out = {}
    for level in payload["levels"]:
        instance = cls(_setup(payload["ref"], level, fx), options)
        out[level] = [list(_ask(instance, g, fx.view)[0]) for g in fx.groups[level]]
    return out


_REPLAY = "import json, sys\nfrom platoon._checks.admission import _replay\nprint(json.dumps(_replay(json.loads(sys.argv[1]))))\n"


# --------------------------------------------------------------------------------------------- the check


def check_group_admission(
    rule: str | type,
    *,
    options: Mapping[str, Any] | None = None,
    levels: Sequence[str] = ("run", "entry"),
    budget_ms: float | None = 2.0,
) -> None:
    """Check a group admission rule against its contract; raise AssertionError listing every failed check.

    ``rule`` is a class, a registered name or ``module:Class``; ``options`` the options it is configured with (as in
    ``group_admission_options``); ``levels`` a non-empty subset of ``("run", "entry")``; ``budget_ms`` the largest
    median ``admit`` time allowed on 4096-task statistics (None skips ``fast``). Checks (``CHECKS``):

    - **protocol**: the rule resolves; ``admit`` is callable and synchronous; ``Class(setup, options)`` builds at
      each level with the fixture's entries and with none; ``check(options, ctx)`` returns or raises ValueError
      (a refusal of the fixture's config is no failure, and every level is still asked, as in 0.4.0); a
      protocol failure, or an options one, ends the check there;
    - **options**: the schema accepts ``{}`` and ``options``; a pydantic or dataclass schema refuses an unknown key;
    - **answers**: each answer to the 400 groups is an ``Admission`` or a bool, and no call raises;
    - **pure**: one instance asked twice, a second instance asked in reverse order, the first instance after 10
      passes against a fresh instance per group, and the first instance over changed statistics against a fresh
      one, all answer alike; given by reference, subprocesses with ``PYTHONHASHSEED`` 0 and 1 answer alike too;
    - **fast**: the median of 101 ``admit`` calls on 4096-task statistics is at most ``budget_ms``, and none raises.
    """
    if (
        isinstance(levels, str)
        or not levels
        or not set(levels) <= set(LEVELS)
        or len(set(levels)) != len(levels)
    ):
        raise ValueError(f"levels must be a non-empty subset of ('run', 'entry'), got {levels!r}")
    name = rule if isinstance(rule, str) else f"{rule.__module__}:{rule.__qualname__}"
    failures: dict[str, list[str]] = {check: [] for check in CHECKS}
    _run_checks(rule, name, dict(options or {}), list(levels), budget_ms, failures)
    failed = [(check, lines) for check, lines in failures.items() if lines]
    if failed:
        report = [f"check_group_admission({name}) failed {len(failed)} of {len(CHECKS)} checks:"]
        for check, lines in failed:
            if len(lines) == 1:
                report.append(f"- {check}: {lines[0]}")
            else:
                report.append(f"- {check}:")
                report.extend(f"    {line}" for line in lines)
        raise AssertionError("\n".join(report))


def _run_checks(
    rule: str | type,
    name: str,
    options: dict[str, Any],
    levels: list[str],
    budget_ms: float | None,
    failures: dict[str, list[str]],
) -> None:
    protocol, opts = failures["protocol"], failures["options"]
    try:
        cls = resolve_group_admission(rule)
    except ExtensionError as exc:
        protocol.append(f"the rule does not resolve: {exc}")
        return
    fx = fixture()

    schema = getattr(cls, "options_schema", None)
    try:
        parse_rule_options(cls, {}, key="options", name=name)
    except ValueError as exc:
        opts.append(f"its options schema refuses {{}}, the options of a config that sets none: {exc}")
    try:
        parsed = parse_rule_options(cls, options, key="options", name=name)
    except ValueError as exc:
        opts.append(f"its options schema refuses the given options {options!r}: {exc}")
        return
    strict = (isinstance(schema, type) and issubclass(schema, BaseModel)) or (
        isinstance(schema, type) and dataclasses.is_dataclass(schema)
    )
    if strict:
        try:
            parse_rule_options(cls, {**options, UNKNOWN_OPTION: 1}, key="options", name=name)
        except ValueError:
            pass
        else:
            opts.append(
                f"its options schema {schema.__qualname__} accepts an unknown key ({UNKNOWN_OPTION!r}): a typo in a "
                "config would pass silently; forbid extra keys (pydantic: model_config = ConfigDict(extra='forbid'))"
            )
    if opts:
        return

    instances: dict[str, Any] = {}
    for level in levels:
        for with_entries in (True, False):
            try:
                instance = cls(_setup(name, level, fx, with_entries=with_entries), parsed)
            except Exception as exc:  # noqa: BLE001
                where = "the fixture's entries" if with_entries else "no entries"
                protocol.append(
                    f"Class(setup, options) raised {type(exc).__name__}: {exc} at {level} level with {where}; a rule "
                    "is built once per start, at either level, and with no entries when the trainer was given an order"
                )
                continue
            if with_entries:
                instances[level] = instance
        ctx = AdmissionCheckContext(
            level,
            "a" if level == "entry" else None,
            fx.entry_dicts,
            fx.batch_size,
            fx.label_column,
            3.0,
            True,
        )
        check = getattr(cls, "check", None)
        if check is not None:
            try:
                check(parsed, ctx)
            except ValueError:
                pass  # a refusal of the fixture's config, which says why: the contract allows it
            except Exception as exc:  # noqa: BLE001
                protocol.append(
                    f"check(options, ctx) raised {type(exc).__name__}: {exc} at {level} level; it may only return "
                    "or raise ValueError to refuse a config"
                )
    if protocol:
        return  # the other checks judge a rule that builds and keeps its check's contract
    asked = list(levels)

    answers = failures["answers"]
    pure = failures["pure"]
    first_pass: dict[str, list[tuple]] = {}
    for level in asked:
        groups = fx.groups[level]
        instance = instances[level]
        results = [_ask(instance, g, fx.view) for g in groups]
        first = [a for a, _ in results]
        first_pass[level] = first
        bad = [(i, text) for i, (a, text) in enumerate(results) if a[0] != "ok"]
        if bad:
            shown = "; ".join(f"{_describe(i, groups[i])} {text}" for i, text in bad[:_SHOW])
            more = f" (and {len(bad) - _SHOW} more)" if len(bad) > _SHOW else ""
            answers.append(
                f"at {level} level {len(bad)} of {len(groups)} answers were not an Admission or a bool: {shown}{more}. "
                "A rule answers every group, whatever its verdict and shape (no members, no labels, no entry), "
                "with an Admission(admit: bool, reason: str of 1-64 characters) or a bool; in a run such a group "
                "would be admitted unjudged"
            )
        again = [_ask(instance, g, fx.view)[0] for g in groups]
        for line in _differences(first, again, groups):
            pure.append(
                f"at {level} level one instance asked about the same groups twice answered differently: {line}"
            )
        second = cls(_setup(name, level, fx), parsed)
        reverse = [_ask(second, g, fx.view)[0] for g in reversed(groups)][::-1]
        for line in _differences(first, reverse, groups):
            pure.append(
                f"at {level} level a second instance asked in reverse order answered differently: {line}"
            )
        later = again
        for _ in range(PASSES - 2):
            later = [_ask(instance, g, fx.view)[0] for g in groups]
        fresh = [_ask(cls(_setup(name, level, fx), parsed), g, fx.view)[0] for g in groups]
        for line in _differences(fresh, later, groups):
            pure.append(
                f"at {level} level after {PASSES} passes the instance answered unlike a new instance built for each "
                f"group: {line}"
            )
        changed_new = [_ask(cls(_setup(name, level, fx), parsed), g, fx.changed)[0] for g in groups]
        changed_old = [_ask(instance, g, fx.changed)[0] for g in groups]
        for line in _differences(changed_new, changed_old, groups):
            pure.append(
                f"at {level} level over changed statistics the used instance answered unlike a new one: {line}"
            )
    if isinstance(rule, str) and not failures["protocol"]:
        _replay_check(rule, cls, options, asked, first_pass, fx, pure)
    if pure:
        pure.append(
            "a rule must be a pure function of (group, stats, options) and keep no state between calls: a resume "
            "builds new instances, and a restart new hash seeds, so anything else decides differently after one"
        )

    if budget_ms is not None:
        _fast_check(cls, name, parsed, asked[0], budget_ms, fx, failures["fast"])


def _replay_check(
    ref: str,
    cls: type,
    options: Mapping[str, Any],
    levels: list[str],
    first_pass: Mapping[str, list[tuple]],
    fx: Fixture,
    pure: list[str],
) -> None:
    try:
        payload = json.dumps(
            {"ref": ref, "module": cls.__module__, "options": dict(options), "levels": levels}
        )
    except TypeError:
        pure.append(
            f"the options {options!r} are not JSON data, so the answers cannot be replayed in a subprocess"
        )
        return
    # The environment as it is, PYTHONPATH included, never this process's sys.path: a module that only a
    # sys.path.insert makes importable fails the replay, as it fails a run's next process (and 0.4.0's replay).
    env = dict(os.environ)
    procs = {}
    for seed in (0, 1):
        env["PYTHONHASHSEED"] = str(seed)
        procs[seed] = subprocess.Popen(
            [sys.executable, "-c", _REPLAY, payload],
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    for seed, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pure.append(f"the replay with PYTHONHASHSEED={seed} did not finish in 300 s")
            continue
        if proc.returncode != 0:
            tail = err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"
            pure.append(f"the replay of {ref!r} with PYTHONHASHSEED={seed} failed: {tail}")
            continue
        replayed = json.loads(out.strip().splitlines()[-1])
        for level in levels:
            theirs = [tuple(a) for a in replayed[level]]
            for line in _differences(first_pass[level], theirs, fx.groups[level]):
                pure.append(
                    f"at {level} level a process with PYTHONHASHSEED={seed} answered differently: {line}; answers "
                    "that follow hash() or set order change with every restart"
                )


def _fast_check(
    cls: type, name: str, parsed: Any, level: str, budget_ms: float, fx: Fixture, fast: list[str]
) -> None:
    instance = cls(_setup(name, level, fx), parsed)
    groups = fx.groups[level]
    for g in groups[:5]:
        _ask(instance, g, fx.big)  # warm caches, as a run's first calls would
    times = []
    for i in range(FAST_CALLS):
        group = groups[i % len(groups)]
        t0 = time.perf_counter()
        try:
            instance.admit(group, fx.big)
        except Exception as exc:  # noqa: BLE001 - a call that raises has no time to judge
            fast.append(f"admit raised {type(exc).__name__}: {exc} on {FAST_POOL}-task statistics, so it was not timed")
            return
        times.append((time.perf_counter() - t0) * 1000.0)
    median = statistics.median(times)
    if median > budget_ms:
        fast.append(
            f"the median of {FAST_CALLS} admit calls took {median:.3g} ms on {FAST_POOL}-task statistics, over the "
            f"budget of {budget_ms:g} ms: admit runs at every settle, in the dispatcher's path; read the group and "
            "its own task's statistics (stats.counts(task), stats.posterior(task)) instead of scanning the pool"
        )
