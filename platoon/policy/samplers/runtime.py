"""`SamplerSet`: the run's task samplers as the dispatcher drives them.

Owns the run's and the entries' samplers (handed over resolved: `SamplerSpec`, found and parsed in
``platoon.components``), asking them, accepting their answers, the fallback of non-core samplers, decision counts,
per-step metrics, and restoring their saved state (format 2's ``samplers`` record).

Rules it keeps (docs/task-samplers.md, docs/dispatch.md):
- a decision's key is ``decision_key(setup.seed, qualified name, count)``; the count advances by one whenever a
  decision binds a draw or a slot (fallbacks included), never for "nothing eligible";
- an answer is accepted only when it is a pool task (eligible, for an adaptive decision), an internal `Row` from a
  core class, or a `Slot` from a slot-handing run sampler for an entry that has a sampler;
- a non-core sampler that raises, gives a refused answer, or answers None while something is eligible falls back
  deterministically from the key (reason ``fallback``, no score); a core sampler's failure raises `SamplerError`;
- a static run sampler's count is always the position it decides; a static entry sampler's count is the number of
  slots the run's first decisions handed it, so a resume recomputes it by replaying the run sampler;
- failures are warned about once per sampler and kind (`take_warnings`); metric keys follow 2.7.

Each sampler's own keeping (eligibility masks, warnings, its own metrics) is `Member`'s (``member``); the saved
state and ``lock.json`` records are ``saved``'s; the answers' checks and fallbacks ``answers``'.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from platoon.policy.pool import TaskPool
from platoon.policy.samplers.answers import (
    accept,
    fallback_row,
    weighted_fallback_entry,
)
from platoon.policy.samplers.base import (
    SamplerError,
    TaskStatsView,
)
from platoon.policy.samplers.bound import Bound, Measure, Token
from platoon.policy.samplers.member import Member, SamplerSpec
from platoon.policy.samplers.metrics import RUN_PREFIX, Counters
from platoon.policy.samplers.saved import component_records, load_member_record, member_record
from platoon.policy.stats import GroupRecord


class SamplerSet:
    """The run's sampler and, under a slot-handing run sampler, each entry's, as the dispatcher drives them.

    ``run`` is the run's sampler, resolved (``platoon.components.resolve_samplers``: ``train.task_sampler`` as
    configured, ``auto`` resolved to its class); ``entries`` maps each entry of the pool to its own, required
    exactly when the run's sampler hands slots (an entry's may not). Qualified names: the run's as configured, an
    entry's ``<name>@<entry>``. Seeds (``SamplerSetup.seed``, the decision keys' seed): ``seed`` (``train.seed``) plus the
    options' ``seed`` for the run's; ``seed`` plus the entry's ``EntryInfo.seed`` plus the options' ``seed`` for
    an entry's, so that ``train.seed`` varies every sampler's draws. ``measure`` (a runtime's, e.g.
    ``platoon.runs.timing.measured_call``) calls each ``next`` and answers its value, the ``Exception`` it raised (or
    None) and the seconds it took: the layer reads no clock, the decision times are the runtime's measurements.
    """

    def __init__(
        self,
        pool: TaskPool,
        *,
        run: SamplerSpec,
        entries: Mapping[str, SamplerSpec],
        batch_size: int,
        seed: int,
        measure: Measure | None = None,
    ) -> None:
        if len(pool) == 0:
            raise ValueError("the run has no training tasks to sample")
        self.pool = pool
        self.seed = seed
        self.run_name = run.ref
        self._measure = measure
        self._warnings: list[str] = []
        self._run = Member(
            self.run_name,
            run.cls,
            run.options,
            level="run",
            entry=None,
            rows=range(len(pool)),
            pool=pool,
            batch_size=batch_size,
            seed=seed,
            warnings=self._warnings,
        )
        self._entries: dict[str, Member] = {}
        wanted = set(pool.entries) if self._run.slots else set()
        if set(entries) != wanted:
            raise ValueError(
                f"the run's sampler {run.ref!r} {'hands' if wanted else 'hands no'} slots: its entries' samplers "
                f"are {sorted(wanted)}, not {sorted(entries)}"
            )
        for name, info in pool.entries.items() if wanted else ():
            spec = entries[name]
            if getattr(spec.cls, "entry_slots", False):
                raise ValueError(f"environments[{name}].task_sampler {spec.ref!r} hands slots; an entry's cannot")
            self._entries[name] = Member(
                f"{spec.ref}@{name}",
                spec.cls,
                spec.options,
                level="entry",
                entry=name,
                rows=pool.entry_indices(name),
                pool=pool,
                batch_size=batch_size,
                seed=seed + info.seed,
                warnings=self._warnings,
            )
        self._by_name = {m.name: m for m in self._members()}
        self._slot_weights = [
            (n, float(e.weight) if e.weight is not None else float(len(e.task_ids)) or 1.0)
            for n, e in pool.entries.items()
        ]
        self._counters = {m.prefix: Counters() for m in self._members()}
        self._slot_entries = frozenset(self._entries)

    # -- who is who
    def _members(self) -> list[Member]:
        return [self._run, *self._entries.values()]

    @property
    def run_adaptive(self) -> bool:
        return self._run.adaptive

    @property
    def run_class(self) -> type:
        return self._run.cls

    def entry_adaptive(self, entry: str) -> bool:
        """Whether entry ``entry``'s sampler is adaptive (its slots become Tokens); KeyError without one."""
        return self._entries[entry].adaptive

    def entry_sampler_name(self, entry: str) -> str | None:
        """The qualified name of the entry's sampler (``<name>@<entry>``), or None when it has none."""
        m = self._entries.get(entry)
        return m.name if m else None

    def decisions(self) -> dict[str, int]:
        """Each sampler's decision count, by qualified name."""
        return {m.name: m.decisions for m in self._members()}

    def sampler(self, name: str | None = None) -> Any:
        """The sampler instance by qualified name (the run's by default)."""
        return self._run.sampler if name is None else self._by_name[name].sampler

    # -- asking
    def _ask(
        self,
        m: Member,
        decision: int,
        *,
        stats: TaskStatsView | None,
        mask: np.ndarray | None,
        step: int,
        version: int,
        timed: bool = True,
    ) -> tuple[Any, BaseException | None]:
        ctx = m.context(decision, stats=stats, mask=mask, step=step, version=version)
        try:
            if not (timed and self._measure is not None):
                try:
                    return m.sampler.next(ctx), None
                except Exception as exc:  # noqa: BLE001 - a sampler's failure is judged below
                    return None, exc
            answer, exc, seconds = self._measure(m.sampler.next, ctx)
            ms = seconds * 1000.0
            for prefix in {RUN_PREFIX, m.prefix}:
                c = self._counters[prefix]
                c.ms_sum, c.ms_n, c.ms_max = c.ms_sum + ms, c.ms_n + 1, max(c.ms_max, ms)
            return answer, exc
        finally:
            m.drain()

    def _judge(
        self, m: Member, decision: int, answer: Any, exc: BaseException | None, mask: np.ndarray | None
    ) -> tuple[tuple[str, Any, str, float | None], bool]:
        """The accepted answer, or the fallback (and True); a core sampler's failure raises SamplerError."""
        kind, problem = None, None
        if exc is not None:
            kind, problem = "raised", f"raised {type(exc).__name__}: {exc}"
        elif answer is None:
            kind, problem = "none", "answered None while tasks were eligible"
        else:
            try:
                return accept(
                    answer,
                    m.setup,
                    core=m.core,
                    adaptive=m.adaptive,
                    slots=m.slots,
                    slot_entries=self._slot_entries if m.level == "run" else (),
                    mask=mask,
                    uid_of_row=m.uid_of_row,
                ), False
            except ValueError as refusal:
                kind, problem = "refused", str(refusal)
        if m.core:
            raise SamplerError(f"task sampler {m.name} failed at decision {decision}: {problem}") from exc
        m.warn_once(kind, f"{problem} (decision {decision}); falling back, as for later failures")
        m.fallbacks += 1
        key = m.key(decision)
        if m.slots:
            return ("slot", weighted_fallback_entry(key, self._slot_weights), "fallback", None), True
        return ("row", fallback_row(key, m.setup, mask), "fallback", None), True

    def _bound(self, m: Member, index: int, sampler: str, reason: str, score: float | None) -> Bound:
        for prefix in {RUN_PREFIX, m.prefix}:
            self._counters[prefix].count(reason)
        return Bound(self.pool.rows[m.rows[index]], sampler, reason, score)

    def static_decision(self, position: int) -> Bound | Token:
        """The static run sampler's decision at ``position``: a Bound row, or a slot filled at once by a static
        entry sampler (its next decision), or a Token for an adaptive entry. Advances the counts it uses."""
        run = self._run
        if run.adaptive:
            raise SamplerError(f"the run's sampler {run.name} is adaptive: ask adaptive_decision")
        if run.decisions != position:
            self._sync(position)
        (kind, value, reason, score), fallback = self._static_answer(run, position, timed=True)
        run.decisions = position + 1
        if kind == "row":
            return self._bound(run, value, run.name, reason, score)
        m = self._entries[value]
        if m.adaptive:
            return Token(position, value, fallback)
        return self._fill_static(m, fallback)

    def _static_answer(self, m: Member, decision: int, *, timed: bool) -> tuple[tuple, bool]:
        answer, exc = self._ask(m, decision, stats=None, mask=None, step=0, version=0, timed=timed)
        return self._judge(m, decision, answer, exc, None)

    def _fill_static(self, m: Member, run_fallback: bool) -> Bound:
        (_, index, reason, score), _ = self._static_answer(m, m.decisions, timed=True)
        m.decisions += 1
        if run_fallback:
            return self._bound(m, index, self.run_name, "fallback", None)
        return self._bound(m, index, m.name, reason, score)

    def _slot_counts(self, upto: int) -> Counter:
        """How many of the run sampler's first ``upto`` decisions handed each entry a slot (fallbacks included)."""
        counts: Counter = Counter()
        for d in range(upto):
            (kind, value, _, _), _ = self._static_answer(self._run, d, timed=False)
            if kind == "slot":
                counts[value] += 1
        return counts

    def _sync(self, position: int) -> None:
        self._run.decisions = position
        statics = [m for m in self._entries.values() if not m.adaptive]
        if statics:
            counts = self._slot_counts(position)
            for m in statics:
                m.decisions = counts[m.entry]

    def restore_static_tokens(
        self,
        entry: str,
        positions: Sequence[int],
        fallback_positions: frozenset[int] | set[int] = frozenset(),
    ) -> list[Bound]:
        """Saved tokens of an entry whose sampler is now static (6.4.2): its count already includes them, so
        subtract them, then decide each position in order (a fallback slot's draw is the run's fallback)."""
        m = self._entries[entry]
        if m.adaptive:
            raise SamplerError(f"{m.name} is adaptive: re-queue its tokens instead")
        m.decisions = max(0, m.decisions - len(positions))
        return [self._fill_static(m, p in fallback_positions) for p in positions]

    def adaptive_decision(
        self,
        entry: str | None,
        *,
        eligible: Callable[[str], bool],
        view: TaskStatsView,
        step: int,
        version: int,
        max_group_size: int | None = None,
        fallback_slot: bool = False,
    ) -> Bound | None:
        """An adaptive decision: the run's (``entry`` None: over the whole pool) or entry ``entry``'s (a Token).

        ``eligible(task_id)`` says whether a task may start now; it must depend only on the task's label and group
        size (those of its first row: "its label has room"), since it is asked once per distinct (label, group
        size) of the sampler's pool, with the first such task. With ``max_group_size``, a task's group size must
        also be at most that. None when nothing is eligible (the count does not advance). ``fallback_slot``: the token came
        from the run sampler's fallback, so the draw is recorded as the run's, reason ``fallback``.
        """
        m = self._run if entry is None else self._entries[entry]
        if not m.adaptive:
            raise SamplerError(f"task sampler {m.name} is static: it is not asked adaptive decisions")
        mask = m.mask(eligible, max_group_size)
        if not mask.any():
            return None
        decision = m.decisions
        answer, exc = self._ask(m, decision, stats=view, mask=mask, step=step, version=version)
        (_, index, reason, score), _ = self._judge(m, decision, answer, exc, mask)
        m.decisions += 1
        if fallback_slot:
            return self._bound(m, index, self.run_name, "fallback", None)
        return self._bound(m, index, m.name, reason, score)

    def note_reissue(self, sampler: str) -> None:
        """Count a reissued draw (reason ``reissue``) under the run's prefix and its sampler's."""
        m = self._by_name.get(sampler)
        for prefix in {RUN_PREFIX, m.prefix if m else RUN_PREFIX}:
            self._counters[prefix].count("reissue")

    # -- statistics feedback
    def observe(self, record: GroupRecord) -> None:
        """Forward a settled record (in draw order) to the adaptive samplers of its pool that override observe."""
        for m in self._members():
            if not (m.adaptive and m.overrides_observe):
                continue
            if m.level == "entry" and record.entry != m.entry:
                continue
            try:
                m.sampler.observe(record)
            except Exception as exc:  # noqa: BLE001 - a sampler's observe must not stop the statistics
                m.warn_once("observe", f"observe raised {type(exc).__name__}: {exc}")
            m.drain()

    def note_consumed(self, records: Sequence[GroupRecord]) -> None:
        """The step's consumed groups: ``predicted_informative`` (mean score) and ``informative_share`` (share
        with verdict ``trained``), under the run's prefix and the drawing entry sampler's."""
        for record in records:
            m = self._by_name.get(record.sampler)
            for prefix in {RUN_PREFIX, m.prefix if m else RUN_PREFIX}:
                c = self._counters[prefix]
                c.consumed += 1
                c.trained += record.verdict == "trained"
                if record.score is not None:
                    c.score_sum += record.score
                    c.score_n += 1

    def loss_weights(self, records: Sequence[GroupRecord]) -> tuple[float, ...]:
        """Each record's loss weight, from the sampler that drew it (its ``loss_weight(task_id)``, where it has one),
        the ``trained`` groups' scaled to mean 1 (the others' datums carry no advantage: 1). A sampler's answer that
        is not a finite number above 0, or raises, counts 1 and is said once. ``()`` when no sampler weighs: a
        step's groups then weigh 1 each."""
        raw: list[float] = []
        for record in records:
            m = self._by_name.get(record.sampler)
            weigh = getattr(m.sampler, "loss_weight", None) if m is not None else None
            raw.append(1.0 if weigh is None or record.verdict != "trained" else m.loss_weight(record.task_id))
        trained = [w for w, r in zip(raw, records, strict=True) if r.verdict == "trained"]
        if all(w == 1.0 for w in trained):
            return ()
        scale = len(trained) / sum(trained)
        out = tuple(w * scale if r.verdict == "trained" else 1.0 for w, r in zip(raw, records, strict=True))
        for w, record in zip(out, records, strict=True):
            if record.verdict == "trained":
                m = self._by_name.get(record.sampler)
                for prefix in {RUN_PREFIX, m.prefix if m else RUN_PREFIX}:
                    c = self._counters[prefix]
                    c.weight_min, c.weight_max = min(c.weight_min, w), max(c.weight_max, w)
        return out

    # -- metrics
    def metrics(self, view: TaskStatsView | None) -> dict[str, float]:
        """The step's sampler metrics by full name (counts reset): draws, draws/<reason>, decision_ms(_max),
        predicted_informative, informative_share, and each sampler's own metrics under its prefix."""
        out: dict[str, float] = {}
        for m in self._members():
            c = self._counters[m.prefix]
            if m.level == "run" or c.draws:
                out[f"{m.prefix}draws"] = float(c.draws)
                for reason, n in sorted(c.reasons.items()):
                    out[f"{m.prefix}draws/{reason}"] = float(n)
            if c.ms_n:
                out[f"{m.prefix}decision_ms"] = c.ms_sum / c.ms_n
                out[f"{m.prefix}decision_ms_max"] = c.ms_max
            if c.consumed:
                out[f"{m.prefix}informative_share"] = c.trained / c.consumed
            if c.score_n:
                out[f"{m.prefix}predicted_informative"] = c.score_sum / c.score_n
            if c.weight_max >= c.weight_min:
                out[f"{m.prefix}loss_weight_min"], out[f"{m.prefix}loss_weight_max"] = c.weight_min, c.weight_max
            for key, value in m.own_metrics(view if m.adaptive else None).items():
                out[f"{m.prefix}{key}"] = value
            c.reset()
        return out

    # -- state
    def state_dict(self) -> dict[str, Any]:
        """Format 2's ``samplers`` record: ``{"run": rec, "entries": {label: rec}}``, ``rec = {name, class,
        decisions, state?}`` (state left out, with a warning once, when ``state_dict`` fails or is not JSON);
        ``class`` names a core class by platoon 0.4.0's path (``saved_class_ref``), and ``restore`` takes either
        spelling."""
        return {
            "run": member_record(self._run),
            "entries": {e: member_record(m) for e, m in self._entries.items()},
        }

    def restore(self, state: Mapping[str, Any] | None, next_position: int) -> list[str]:
        """Restore counts and states (6.4.1); returns warnings. ``state`` None (a format-1 checkpoint) recomputes
        the counts from the position. A static run sampler's count is ``next_position``; a static entry
        sampler's, when its record is not loaded, the slots the run's first ``next_position`` decisions handed it;
        an adaptive sampler whose record is not loaded starts at 0, fresh."""
        warnings: list[str] = []
        if state is not None and not isinstance(state, Mapping):
            warnings.append(
                f"the checkpoint's sampler state is {type(state).__name__}, not a mapping; ignored"
            )
            state = None
        state = state or {}
        entries = state.get("entries") if isinstance(state.get("entries"), Mapping) else {}
        run = self._run
        loaded = load_member_record(run, state.get("run"), warnings)
        if run.adaptive:
            run.decisions = state["run"]["decisions"] if loaded else 0
            if not loaded:
                run.sampler = run.fresh()
        else:
            run.decisions = int(next_position)
        replay: list[Member] = []
        for name, m in self._entries.items():
            if load_member_record(m, entries.get(name), warnings):
                m.decisions = entries[name]["decisions"]
            elif m.adaptive:
                m.sampler, m.decisions = m.fresh(), 0
            else:
                m.sampler = m.fresh()
                replay.append(m)
        if replay:
            counts = self._slot_counts(int(next_position))
            for m in replay:
                m.decisions = counts[m.entry]
        return warnings

    def take_warnings(self) -> list[str]:
        """Warnings since the last call (each failure kind once per sampler)."""
        out = list(self._warnings)
        self._warnings.clear()  # in place: the members share this outbox
        return out

    def component_records(self) -> list[dict[str, Any]]:
        """lock.json's task sampler components (6.6), without the distribution fields the run directory adds."""
        return component_records(self._run, self._entries, list(self.pool.entries))
