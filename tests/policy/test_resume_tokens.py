"""Resume of the slots that waited for an environment's adaptive sampler (docs/dispatch.md, "Checkpoints and
resume"): an environment whose sampler is static now draws them at once, at their positions, before any new one;
one that no longer gets slots (the run's sampler hands none, or it left the run) drops them, each a
``slot_skipped`` event, with one warning."""

from __future__ import annotations

from platoon.components import admission_set, sampler_set
from platoon.policy.dispatch_state import resume
from platoon.policy.dispatcher import DispatchConfig, Dispatcher, StartGroup
from platoon.policy.pool import EntrySpec, TaskPool
from platoon.policy.recorder import StatsRecorder

ENTRIES = [EntrySpec("a", [f"a{i}" for i in range(5)], 2), EntrySpec("b", [f"b{i}" for i in range(5)], 2)]


def dispatcher(run_sampler: str, entry_samplers: dict) -> Dispatcher:
    pool = TaskPool.from_entries(ENTRIES)
    samplers = sampler_set(pool, run_sampler=run_sampler, run_options={}, entry_samplers=entry_samplers,
                          batch_size=2, seed=0)
    rules = admission_set(run_rule="all", run_options={}, entry_rules={}, entries=pool.entries, batch_size=2)
    config = DispatchConfig(batch_size=2, steps=10, max_concurrent_rollouts=100, max_staleness=1)
    return Dispatcher(config, pool, samplers, StatsRecorder.for_pool(pool), rules, start=2)


def saved(tokens: dict[str, list[int]], fallback: list[int]) -> dict:
    """A format-2 state saved by a run (under weighted, pass_rate@a) at step 2 whose entry a had slots waiting."""
    return {"format": 2, "start": 1, "next_position": 8, "outstanding": [], "waiting": {}, "kept": None,
            "drawn": [], "tokens": tokens, "fallback_slots": fallback}


def test_slots_of_an_entry_whose_sampler_became_static_are_drawn_by_it_first():
    d = dispatcher("weighted", {})  # a's sampler is uniform now
    assert resume(d, saved({"a": [4, 6]}, [6]), step=2) == []
    started = [g for g in d.start(now=0.0) if isinstance(g, StartGroup)]
    draws = [e for e in d.take_events() if e["event"] == "draw"]
    assert [(e["position"], e["sampler"], e["reason"]) for e in draws[:2]] == [
        (4, "uniform@a", "order"), (6, "weighted", "fallback")]  # a fallback slot's draw is the run's fallback
    assert [e["position"] for e in draws[2:]] == list(range(8, 8 + len(draws) - 2))
    assert [g.key for g in started[:2]] == [(2, 0), (2, 1)]
    # what uniform@a draws for them: its decisions 2 and 3, the slots weighted handed a at positions 4 and 6
    fresh = dispatcher("weighted", {}).samplers
    assert [e["task_id"] for e in draws[:2]] == [fresh.static_decision(p).row.task_id for p in range(8)][4:7:2]


def test_slots_are_dropped_when_the_run_sampler_hands_none_or_the_entry_left():
    d = dispatcher("uniform", {})  # hands no slots: no entry has a sampler
    warnings = resume(d, saved({"a": [4, 6], "gone": [7]}, []), step=2)
    assert warnings == [
        "dropped 2 slot(s) of environment a at resume: the run's task sampler no longer hands it slots",
        "dropped 1 slot(s) of environment gone at resume: it is no longer an environment of the run"]
    skipped = [(e["position"], e["entry"], e["why"]) for e in d.take_events() if e["event"] == "slot_skipped"]
    assert skipped == [(4, "a", "no_slots"), (6, "a", "no_slots"), (7, "gone", "entry_left")]


def test_slots_of_an_adaptive_entry_wait_for_it_again():
    d = dispatcher("weighted", {"a": ("pass_rate", {})})
    assert resume(d, saved({"a": [4, 6]}, [6]), step=2) == []
    assert [(t.position, t.fallback) for _, t in d.mixture.tokens["a"]] == [(4, False), (6, True)]
