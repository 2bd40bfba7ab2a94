"""`check_task_sampler`: a task sampler checked against the contract a plug-in author must keep (docs/task-samplers.md).

The checks, by name: protocol, options, pool-task-or-nothing, fast, deterministic, static, state, observe, metrics.
Every failed check is listed in one AssertionError, each line naming the check, the level and case it ran under, and
what it saw, so that an author can see at once what to fix. Answers are judged by the dispatcher's own rules
(`platoon.policy.samplers.answers.accept`), over a fixed fixture: 40 tasks in two entries (a mixture: pool ids
``a::a0`` ... ``b::b19``, docs/run-directory.md "Task ids"), ``a`` (group size 4, labels alternating ``x`` and ``w``,
weight 1, seed 3) and ``b`` (group size 8, label ``y``, weight 2, seed 5), label column ``label``, batch size 8,
with synthetic settled groups and every seventh task drawn once.

This module is outside the policy layer: it times decisions with a clock and replays them in subprocesses. It runs
past 600 lines because it is the contract written as code: the fixture, the asker and one function per check, which
a plug-in author reads side by side with the failure message.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, is_dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel

from platoon.components import parse_options, resolve_task_sampler, validate_sampler_class
from platoon.config.errors import ExtensionError
from platoon.policy import (
    Draw,
    EntrySpec,
    GroupRecord,
    Member,
    MemberResult,
    Row,
    Slot,
    TaskPool,
    TaskStatsStore,
    TaskStatsView,
    accept,
    check_json,
    class_ref,
    clean_metrics,
)

CHECKS = (
    "protocol",
    "options",
    "pool-task-or-nothing",
    "fast",
    "deterministic",
    "static",
    "state",
    "observe",
    "metrics",
)
UNKNOWN_OPTION = "conformance_check_unknown_option"
RATES = (0.0, 0.05, 0.3, 0.5, 0.7, 0.95, 1.0)
VERSION = 10
PATTERNS = ("all eligible", "label x at its limit", "nothing eligible")


class _Failures:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, check: str, where: str, message: str) -> None:
        self.lines.append(f"{check} [{where}]: {message}" if where else f"{check}: {message}")


# --------------------------------------------------------------------------------------------------- fixture


def fixture_pool(size_a: int = 20, size_b: int = 20, *, prefix: str = "") -> TaskPool:
    """The fixture's pool: entries ``a`` and ``b`` (see the module doc), a mixture, so its ids read ``a::a0``;
    ``prefix`` renames the tasks (``a::<prefix>a0``)."""
    a = [f"{prefix}a{i}" for i in range(size_a)]
    b = [f"{prefix}b{i}" for i in range(size_b)]
    return TaskPool.from_entries(
        [
            EntrySpec("a", a, 4, 1.0, 3, label=["x" if i % 2 == 0 else "w" for i in range(size_a)]),
            EntrySpec("b", b, 8, 2.0, 5, label="y"),
        ],
        label_column="label",
    )


def changed_pool() -> TaskPool:
    """The fixture's pool with a fifth of each entry's tasks replaced by new ones."""
    pool = fixture_pool()
    specs = []
    for name, size, group, weight, seed in (("a", 20, 4, 1.0, 3), ("b", 20, 8, 2.0, 5)):
        ids = [r.env_task_id for r in pool.by_entry(name)]
        ids[: size // 5] = [f"new-{t}" for t in ids[: size // 5]]
        labels = [r.label for r in pool.by_entry(name)]
        specs.append(EntrySpec(name, ids, group, weight, seed, label=labels))
    return TaskPool.from_entries(specs, label_column="label")


def synthetic_groups(pool: TaskPool, *, seed: int = 0, start_seq: int = 0) -> list[GroupRecord]:
    """0-3 settled groups per task, pass rates from RATES, ~15% invalid members, ~10% failed groups."""
    rng = random.Random(seed)
    records: list[GroupRecord] = []
    seq = start_seq
    for row in pool.rows:
        rate = rng.choice(RATES)
        for _ in range(rng.randrange(4)):
            version = rng.randrange(VERSION + 1)
            if rng.random() < 0.1:
                members: tuple[MemberResult, ...] = ()
                verdict = "failed"
            else:
                members = tuple(_member(rng, rate, version) for _ in range(row.group_size))
                scores = {m.scored for m in members if m.valid}
                verdict = "trained" if len(scores) > 1 else "uniform"
            records.append(
                GroupRecord(
                    start=1,
                    seq=seq,
                    task_id=row.task_id,
                    entry=row.entry,
                    labels={pool.label_column: row.label or ""},
                    group_size=row.group_size,
                    sampler="fixture",
                    position=seq,
                    drawn_at={"main": version},
                    members=members,
                    verdict=verdict,
                )
            )
            seq += 1
    rng.shuffle(records)  # settled out of draw order: the recorder's flush sorts them
    return records


def _member(rng: random.Random, rate: float, version: int) -> MemberResult:
    valid = rng.random() >= 0.15
    scored = (1.0 if rng.random() < rate else 0.0) if valid else None
    return MemberResult(
        reward=scored,
        scored=scored,
        valid=valid,
        outcome="scored" if valid else "error",
        steps=rng.randrange(1, 20),
        seconds=rng.random() * 10,
        versions={"main": (version, version)},
    )


def fixture_store(pool: TaskPool) -> TaskStatsStore:
    store = TaskStatsStore(
        [(r.task_id, r.entry, r.label) for r in pool.rows],
        {n: (e.group_size, e.success_threshold) for n, e in pool.entries.items()},
        column=pool.label_column,
    )
    for record in sorted(synthetic_groups(pool), key=lambda r: r.key):
        store.settle(record)
    for i, row in enumerate(pool.rows):
        if i % 7 == 0:
            store.draw(1, 100_000 + i, row.task_id, i)
    return store


# --------------------------------------------------------------------------------------------------- asking


@dataclass
class _Case:
    level: str
    entry: str | None
    name: str

    @property
    def where(self) -> str:
        return "run level" if self.level == "run" else f"entry {self.entry}"


def _member_for(cls: type, options: Any, case: _Case, pool: TaskPool) -> Member:
    rows = range(len(pool)) if case.level == "run" else pool.entry_indices(case.entry or "")
    seed = 0 if case.level == "run" else pool.entries[case.entry or ""].seed
    return Member(
        case.name,
        cls,
        parse_options(cls, options),
        level=case.level,
        entry=case.entry,
        rows=rows,
        pool=pool,
        batch_size=8,
        seed=seed,
    )


def _pattern_mask(m: Member, pool: TaskPool, pattern: int) -> np.ndarray | None:
    if pattern == 0:
        return None
    if pattern == 2:
        return np.zeros(len(m.setup.unique_ids), dtype=bool)
    labels = {r.task_id: r.label for r in reversed([pool.rows[i] for i in m.rows])}
    return np.array([labels[t] != "x" for t in m.setup.unique_ids], dtype=bool)


def _normal(answer: Any) -> Any:
    """A comparable, JSON-safe form of an answer."""
    if isinstance(answer, Draw):
        return ["draw", answer.task_id, answer.reason, answer.score]
    if isinstance(answer, str):
        return ["draw", answer, "order", None]
    if isinstance(answer, Slot):
        return ["slot", answer.entry]
    if isinstance(answer, Row):
        return ["row", answer.index, answer.reason, answer.score]
    if answer is None:
        return None
    return ["other", repr(answer)]


class _Asker:
    """Asks one sampler instance its decisions in order, as the runtime would, counting only binding answers."""

    def __init__(self, m: Member, pool: TaskPool, view: TaskStatsView | None) -> None:
        self.m, self.pool, self.view = m, pool, view
        self.decision = 0

    def ask(self, pattern: int = 0, *, step: int = 0, version: int = VERSION) -> tuple[Any, str | None]:
        """``(answer, problem)``; the count advances when the answer binds (is not None)."""
        m = self.m
        mask = _pattern_mask(m, self.pool, pattern) if m.adaptive else None
        ctx = m.context(
            self.decision, stats=self.view if m.adaptive else None, mask=mask, step=step, version=version
        )
        try:
            answer = m.sampler.next(ctx)
        except Exception as exc:  # noqa: BLE001 - reported as a failed check
            self.decision += 1
            return None, f"decision {ctx.decision} raised {type(exc).__name__}: {exc}"
        problem = _judge(m, answer, mask, self.pool)
        if answer is not None:
            self.decision += 1
        return answer, problem if problem is None else f"decision {ctx.decision} {problem}"


def _judge(m: Member, answer: Any, mask: np.ndarray | None, pool: TaskPool) -> str | None:
    if inspect.isawaitable(answer):
        if hasattr(answer, "close"):
            answer.close()
        return "answered an awaitable: next must return its answer synchronously"
    nothing = mask is not None and not mask.any()
    if answer is None:
        if not m.adaptive:
            return "answered None: a static sampler always answers a pool task (or a slot)"
        return None if nothing else "answered None while tasks were eligible"
    if nothing:
        return f"answered {answer!r} while nothing was eligible: the only answer then is None"
    try:
        accept(
            answer,
            m.setup,
            core=m.core,
            adaptive=m.adaptive,
            slots=m.slots and m.level == "run",
            slot_entries=frozenset(pool.entries),
            mask=mask if mask is not None else m.all_eligible,
            uid_of_row=m.uid_of_row,
        )
    except ValueError as refusal:
        return str(refusal)
    return None


def _feed(m: Member, store: TaskStatsStore, records: list[GroupRecord]) -> str | None:
    """Settle ``records`` in draw order and hand those of the sampler's pool to its observe."""
    for record in sorted(records, key=lambda r: r.key):
        store.settle(record)
        if m.adaptive and m.overrides_observe and (m.level == "run" or record.entry == m.entry):
            try:
                m.sampler.observe(record)
            except Exception as exc:  # noqa: BLE001
                return f"observe raised {type(exc).__name__}: {exc}"
    return None


def _summarise(problems: list[str]) -> str:
    more = len(problems) - 1
    return problems[0] + (f" (and {more} more like it)" if more > 0 else "")


def _show(normal: Any) -> str:
    """An answer's normal form as an author would write it."""
    if normal is None:
        return "None"
    kind, *rest = normal
    if kind == "draw":
        task, reason, score = rest
        return f"Draw({task!r}, {reason!r}" + (f", {score!r})" if score is not None else ")")
    if kind == "slot":
        return f"Slot({rest[0]!r})"
    if kind == "row":
        return f"Row({rest[0]})"
    return str(rest[0])


# --------------------------------------------------------------------------------------------------- the checks


def _check_protocol(sampler: Any, levels: Sequence[str], f: _Failures) -> tuple[type | None, str]:
    if isinstance(sampler, str):
        name = sampler
        try:
            cls = resolve_task_sampler(sampler)
        except ExtensionError as exc:
            f.add("protocol", "", f"{sampler!r} does not resolve: {exc}")
            return None, name
    else:
        cls, name = sampler, class_ref(sampler) if isinstance(sampler, type) else repr(sampler)
        try:
            validate_sampler_class(cls, name)
        except ExtensionError as exc:
            f.add("protocol", "", str(exc))
            return None, name
    bad = [lv for lv in levels if lv not in ("run", "entry")]
    if bad or not levels:
        f.add("protocol", "", f"levels must be 'run' and/or 'entry', got {tuple(levels)!r}")
        return None, name
    if getattr(cls, "entry_slots", False) and "entry" in levels:
        f.add(
            "protocol",
            "",
            "the class hands entry slots (entry_slots = True), so it can only be a run's sampler; "
            "check it with levels=('run',)",
        )
        return None, name
    return cls, name


def _check_options(cls: type, options: Mapping[str, Any] | None, f: _Failures) -> tuple[bool, Any]:
    ok = True
    try:
        parse_options(cls, {})
    except Exception as exc:  # noqa: BLE001
        f.add(
            "options",
            "",
            f"the schema refuses {{}} ({type(exc).__name__}: {exc}); every option needs a default",
        )
        ok = False
    parsed = None
    try:
        parsed = parse_options(cls, options or {})
    except Exception as exc:  # noqa: BLE001
        f.add("options", "", f"the schema refuses the given options {options!r}: {type(exc).__name__}: {exc}")
        ok = False
    schema = getattr(cls, "options_schema", None)
    if (isinstance(schema, type) and issubclass(schema, BaseModel)) or is_dataclass(schema):
        try:
            parse_options(cls, {**(options or {}), UNKNOWN_OPTION: 1})
        except ValueError:
            pass
        else:
            f.add(
                "options",
                "",
                f"the schema accepted an unknown key {UNKNOWN_OPTION!r}: refuse unknown keys "
                "(pydantic: model_config = ConfigDict(extra='forbid'))",
            )
    return ok, parsed


def _cases(cls: type, name: str, levels: Sequence[str]) -> list[_Case]:
    cases = []
    for level in levels:
        if level == "entry":
            cases += [_Case("entry", e, f"{name}@{e}") for e in ("a", "b")]
        else:
            cases.append(_Case("run", None, name))
    return cases


def _pool_task_or_nothing(cls, options, case, pool, store, f) -> list[Any] | None:
    """200 decisions per pattern; returns the all-eligible series (for the static check), None when it had problems:
    this check reports them, and the checks that build on the series do not report them again."""
    view = TaskStatsView(store, VERSION, live=True)
    patterns = (0, 1, 2) if cls.adaptive else (0,)
    series: list[Any] | None = None
    for pattern in patterns:
        asker = _Asker(_member_for(cls, options, case, pool), pool, view)
        problems, answers = [], []
        for _ in range(200):
            answer, problem = asker.ask(pattern)
            answers.append(_normal(answer))
            if problem:
                problems.append(problem)
        if problems:
            f.add("pool-task-or-nothing", f"{case.where}, {PATTERNS[pattern]}", _summarise(problems))
        elif pattern == 0:
            series = answers
    if cls.adaptive:
        asker = _Asker(_member_for(cls, options, case, pool), pool, view)
        problems = [p for i in range(120) if (p := asker.ask((i // 10) % 3)[1])]
        if problems:
            f.add(
                "pool-task-or-nothing",
                f"{case.where}, switching pattern every 10 decisions",
                _summarise(problems),
            )
    return series


def _static(cls, options, case, pool, series: list[Any], f: _Failures) -> None:
    problems = []
    for n in sorted(random.Random(0).sample(range(len(series)), 12)):
        asker = _Asker(_member_for(cls, options, case, pool), pool, None)
        asker.decision = n
        answer, problem = asker.ask(step=7, version=3)
        if problem or _normal(answer) != series[n]:
            problems.append(
                f"a fresh instance asked decision {n} alone answered {_show(_normal(answer))}, the series "
                f"{_show(series[n])}"
            )
    if problems:
        f.add(
            "static",
            case.where,
            _summarise(problems)
            + ": a static sampler's answer must be a function of ctx.decision (and its state), "
            "not of the questions asked before",
        )


def _state(cls, options, case, pool, f: _Failures) -> None:
    store = fixture_store(pool)
    view = TaskStatsView(store, VERSION, live=True)
    original = _Asker(_member_for(cls, options, case, pool), pool, view)
    extra = synthetic_groups(pool, seed=1, start_seq=10_000)
    for i in range(37):
        if original.ask()[1] is not None:
            return  # pool-task-or-nothing reports it
        if cls.adaptive and _feed(original.m, store, extra[4 * i : 4 * i + 4]) is not None:
            return  # observe reports it
    problems: list[str] = []
    try:
        state = original.m.sampler.state_dict()
        check_json(state)
        if not isinstance(state, Mapping):
            raise ValueError(f"state_dict gave {type(state).__name__}, not a mapping")
        state = json.loads(json.dumps(state, allow_nan=False))
    except Exception as exc:  # noqa: BLE001
        f.add("state", case.where, f"state_dict after 37 decisions is not JSON data with string keys: {exc}")
        return
    twin = _Asker(_member_for(cls, options, case, pool), pool, view)
    twin.decision = original.decision
    try:
        twin.m.sampler.load_state_dict(state)
    except Exception as exc:  # noqa: BLE001
        f.add(
            "state", case.where, f"a fresh instance could not load its own state: {type(exc).__name__}: {exc}"
        )
        return
    for _ in range(20):
        a, pa = original.ask()
        b, pb = twin.ask()
        if _normal(a) != _normal(b):
            problems.append(
                f"after loading the state, decision {twin.decision - 1} answered {_show(_normal(b))} where the "
                f"original answered {_show(_normal(a))}: state_dict must hold everything later answers depend on"
            )
            break
    new_pool = changed_pool()
    moved = _Asker(
        _member_for(cls, options, case, new_pool), new_pool, TaskStatsView(fixture_store(new_pool), VERSION)
    )
    moved.decision = original.decision
    try:
        moved.m.sampler.load_state_dict(state)
    except ValueError:
        moved = _Asker(_member_for(cls, options, case, new_pool), new_pool, moved.view)
    except Exception as exc:  # noqa: BLE001
        problems.append(
            f"loading the state over a changed pool raised {type(exc).__name__}: {exc}, not ValueError"
        )
    problems += [
        f"over a changed pool (a fifth of the tasks replaced): {p}"
        for _ in range(20)
        if (p := moved.ask()[1])
    ]
    malformed = [{"conformance_check": "not a state"}]
    if state:
        malformed.append({k: "conformance_check" for k in state})
    for bad in malformed:
        fresh = _member_for(cls, options, case, pool).sampler
        try:
            fresh.load_state_dict(bad)
        except ValueError:
            continue
        except Exception as exc:  # noqa: BLE001
            problems.append(f"load_state_dict({bad!r}) raised {type(exc).__name__}, not ValueError")
        else:
            problems.append(
                f"load_state_dict({bad!r}) accepted it: a state that does not fit must raise ValueError"
            )
    if problems:
        f.add("state", case.where, _summarise(problems))


def _observe(cls, options, case, pool, f: _Failures) -> None:
    problems = []
    for fed in (True, False):
        store = fixture_store(pool)
        asker = _Asker(_member_for(cls, options, case, pool), pool, TaskStatsView(store, VERSION))
        extra = synthetic_groups(pool, seed=2, start_seq=20_000)
        for i in range(40):
            problem = asker.ask()[1]
            if problem:
                problems.append(f"({'with' if fed else 'without'} settled groups) {problem}")
            if fed and (problem := _feed(asker.m, store, extra[4 * i : 4 * i + 4])):
                problems.append(problem)
    if problems:
        f.add("observe", case.where, _summarise(problems))


def _metrics(cls, options, case, pool, store, f: _Failures) -> None:
    m = _member_for(cls, options, case, pool)
    asker = _Asker(m, pool, TaskStatsView(store, VERSION))
    for _ in range(10):
        asker.ask()
    for view in (TaskStatsView(store, VERSION), None):
        try:
            raw = m.sampler.metrics(view)
        except Exception as exc:  # noqa: BLE001
            f.add(
                "metrics",
                case.where,
                f"metrics({'view' if view else 'None'}) raised {type(exc).__name__}: {exc}",
            )
            continue
        _, problem, reserved = clean_metrics(raw)
        if problem:
            f.add("metrics", case.where, f"metrics({'view' if view else 'None'}) {problem}")
        if reserved:
            f.add(
                "metrics", case.where, f"metrics({'view' if view else 'None'}) used reserved keys {reserved}"
            )


def _series(cls: type, options: Any, case: _Case, pool: TaskPool) -> list[Any]:
    """60 decisions under each of the first two patterns (the ``deterministic`` check's series)."""
    asker = _Asker(_member_for(cls, options, case, pool), pool, TaskStatsView(fixture_store(pool), VERSION))
    return [_normal(asker.ask(pattern)[0]) for pattern in (0, 1) for _ in range(60)]


def _deterministic(cls, options, case, pool, ref: str | None, f: _Failures) -> None:
    first, second = _series(cls, options, case, pool), _series(cls, options, case, pool)
    if first != second:
        n = next(i for i, (x, y) in enumerate(zip(first, second, strict=True)) if x != y)
        f.add(
            "deterministic",
            case.where,
            f"two fresh instances differ at decision {n}: {_show(first[n])} vs {_show(second[n])}; draw randomness only from "
            "ctx.rng or ctx.key",
        )
        return
    if ref is None:
        return
    for hash_seed in ("0", "1"):
        replay, problem = _replay_in_subprocess(ref, options, case, hash_seed)
        if problem:
            f.add("deterministic", f"{case.where}, PYTHONHASHSEED={hash_seed}", problem)
        elif replay != first:
            n = next((i for i, (x, y) in enumerate(zip(first, replay, strict=False)) if x != y), len(replay))
            got = _show(replay[n]) if n < len(replay) else "nothing"
            f.add(
                "deterministic",
                f"{case.where}, PYTHONHASHSEED={hash_seed}",
                f"a subprocess answered {got} at decision {n}, this process {_show(first[n])}: "
                "do not let set or dict-of-set order or hash() choose",
            )


def _replay_in_subprocess(
    ref: str, options: Any, case: _Case, hash_seed: str
) -> tuple[list[Any], str | None]:
    # The environment as it is, PYTHONPATH included, never this process's sys.path: a module that only a
    # sys.path.insert makes importable fails the replay, as it fails a run's next process (and 0.4.0's replay).
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    args = [sys.executable, "-m", "platoon._checks.samplers", ref, json.dumps(options or {}), case.level]
    args += [case.entry or "", resolve_task_sampler(ref).__module__]
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        return [], "the subprocess replay took more than 120 s"
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return [], f"the subprocess replay failed: {' / '.join(tail)}"
    return json.loads(done.stdout.strip().splitlines()[-1]), None


def _fast(cls, options, case, budget_ms: float, f: _Failures) -> None:
    size = 4096 if case.level == "entry" else 2048
    pool = fixture_pool(size, size)
    m = _member_for(cls, options, case, pool)
    store = TaskStatsStore(
        [(r.task_id, r.entry, r.label) for r in pool.rows],
        {n: (e.group_size, 1.0) for n, e in pool.entries.items()},
    )
    asker = _Asker(m, pool, TaskStatsView(store, VERSION))
    times = []
    for _ in range(41):
        t0 = time.perf_counter()
        asker.ask()
        times.append((time.perf_counter() - t0) * 1000.0)
    median = statistics.median(times)
    if median > budget_ms:
        f.add(
            "fast",
            case.where,
            f"the median of 41 decisions over {len(m.setup.unique_ids)} tasks took {median:.2f} ms, over the budget "
            f"of {budget_ms} ms: precompute in __init__, read stats.count_arrays/posterior_arrays for many tasks",
        )


def check_task_sampler(
    sampler: type | str,
    *,
    options: Mapping[str, Any] | None = None,
    levels: Sequence[str] = ("entry", "run"),
    budget_ms: float | None = 20.0,
) -> None:
    """Check ``sampler`` (a class, a registered name or ``module:Class``) against the task sampler contract.

    Raises AssertionError listing every failed check by name with what it saw; returns None when all pass.
    """
    f = _Failures()
    cls, name = _check_protocol(sampler, tuple(levels), f)
    if cls is not None:
        ok, _ = _check_options(cls, options, f)
        if ok:
            _run_cases(
                cls,
                name,
                options or {},
                tuple(levels),
                sampler if isinstance(sampler, str) else None,
                budget_ms,
                f,
            )
    if f.lines:
        lines = "\n".join(f"  - {line}" for line in f.lines)
        raise AssertionError(f"check_task_sampler({name}) failed {len(f.lines)} check(s):\n{lines}")


def _run_cases(cls, name, options, levels, ref, budget_ms, f: _Failures) -> None:
    pool = fixture_pool()
    cases = _cases(cls, name, levels)
    for case in cases:
        try:
            _member_for(cls, options, case, pool)
        except Exception as exc:  # noqa: BLE001
            f.add(
                "protocol",
                case.where,
                f"constructing it as Class(setup, options) raised {type(exc).__name__}: {exc}",
            )
            return
    for case in cases:
        store = fixture_store(pool)
        series = _pool_task_or_nothing(cls, options, case, pool, store, f)
        if not cls.adaptive and series is not None:
            _static(cls, options, case, pool, series, f)
        _state(cls, options, case, pool, f)
        if cls.adaptive:
            _observe(cls, options, case, pool, f)
        _metrics(cls, options, case, pool, store, f)
    _deterministic(cls, options, cases[0], pool, ref, f)
    if budget_ms is not None:
        _fast(cls, options, cases[0], budget_ms, f)


def _replay_main(argv: Sequence[str]) -> None:
    ref, options, level, entry, module = argv[0], json.loads(argv[1]), argv[2], argv[3] or None, argv[4]
    # The class's module first, so that a name it registers resolves; then the reference itself, as given.
    importlib.import_module(module)
    cls = resolve_task_sampler(ref)
    name = ref if level == "run" else f"{ref}@{entry}"
    print(json.dumps(_series(cls, options, _Case(level, entry, name), fixture_pool())))


if __name__ == "__main__":
    _replay_main(sys.argv[1:])
