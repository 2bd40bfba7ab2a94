"""What a step logs about labels (docs/metrics.md): the rows a capped label skipped and parked, and prefixes that
say what they group by: ``train/tasks/<column>/<label>/`` per label of ``train.label_by`` (``environment/`` only
when labels are entries' names), while ``train/batch/environment/`` and ``train/admission/environment/`` stay per
entry."""

from __future__ import annotations

from dispatch_harness import output_of

from platoon.components import admission_set, sampler_set
from platoon.policy.dispatcher import DispatchConfig, Dispatcher, StartGroup
from platoon.policy.pool import DEFAULT_LABEL_COLUMN, EntrySpec, TaskPool, label_prefix
from platoon.policy.recorder import StatsRecorder
from platoon.policy.task_table import task_metrics


def dispatcher(*, limits: dict[str, int], admission: str = "all") -> tuple[Dispatcher, TaskPool]:
    """Eight tasks of entry ``e`` labelled x, y, x, y, ... in the column ``tier``; B = 1, 12 steps, no horizon."""
    pool = TaskPool.from_entries([EntrySpec("e", [f"t{i}" for i in range(8)], 2, label=["x", "y"] * 4)],
                                 label_column="tier")
    samplers = sampler_set(pool, run_sampler="uniform", run_options={}, entry_samplers={}, batch_size=1, seed=0)
    rules = admission_set(run_rule=admission, run_options={}, entry_rules={}, entries=pool.entries, batch_size=1,
                         label_column="tier")
    config = DispatchConfig(batch_size=1, steps=12, max_concurrent_rollouts=100, max_staleness=None,
                            label_limits=limits, max_groups_per_step=2.0)
    return Dispatcher(config, pool, samplers, StatsRecorder.for_pool(pool), rules), pool


def one_step(d: Dispatcher, started: list[StartGroup], nth: int = 0) -> dict[str, float]:
    """The ``nth`` y group runs for a second and settles (mixed), a step trains it: its metrics."""
    g = [s for s in started if s.task_id in ("t1", "t3", "t5", "t7")][nth]
    now = d.now
    for i in range(2):
        d.on_block_entered(g.key, i, now=now)
    now += 1.0
    for i in range(2):
        d.on_block_exited(g.key, i, now=now)
    d.on_group_finished(g.key, output_of(g.task_id, [True, False], d.version), now=now)
    step = d.take_step(now=now)
    assert step is not None and [x.key for x in step.groups] == [g.key]
    d.commit_step(now=now)
    return d.step_metrics(now=now)


def test_a_capped_labels_skipped_and_parked_rows_are_logged_each_step():
    d, pool = dispatcher(limits={"x": 1})
    started = [s for s in d.start(now=0.0) if isinstance(s, StartGroup)]
    assert [pool.rows[s.row_index].label for s in started].count("x") == 1  # x runs one group at a time
    skipped = [e for e in d.take_events() if e.get("fate") == "skipped"]
    assert len(skipped) == 6  # x's backlog holds 4 x B = 4 draws; the rest were skipped
    m = one_step(d, started)
    assert (m["train/batch/skipped_rows"], m["train/batch/parked_rows"]) == (6.0, 4.0)
    assert (m["train/batch/tier/x/skipped_rows"], m["train/batch/tier/x/parked_rows"]) == (6.0, 4.0)
    assert "train/batch/tier/y/skipped_rows" not in m  # only capped labels get their own
    assert any("train/batch/skipped_rows" in w for w in d.take_warnings())
    d.publish(now=d.now)
    m = one_step(d, started, nth=1)  # nothing more was skipped, and x's backlog still waits
    assert (m["train/batch/skipped_rows"], m["train/batch/parked_rows"]) == (0.0, 4.0)


def test_without_limits_no_row_metrics_are_logged():
    d, _ = dispatcher(limits={})
    m = one_step(d, [s for s in d.start(now=0.0) if isinstance(s, StartGroup)])
    assert not [k for k in m if k.endswith(("skipped_rows", "parked_rows"))]


def test_prefixes_say_what_they_group_by():
    assert label_prefix(DEFAULT_LABEL_COLUMN, "hard/large") == "environment/hard--large"
    assert label_prefix("tier", "x") == "tier/x"
    assert label_prefix("a/b", "x/y") == "a--b/x--y"
    d, _ = dispatcher(limits={}, admission="informative")
    m = one_step(d, [s for s in d.start(now=0.0) if isinstance(s, StartGroup)])
    tasks = task_metrics(d.recorder.store, d.version)
    assert "train/tasks/tier/x/coverage" in tasks and "train/tasks/tier/y/pass_at_1" in tasks  # by label
    assert not [k for k in tasks if k.startswith("train/tasks/environment/")]
    assert "train/batch/environment/e/informative_groups" in m  # by entry
    assert "train/admission/environment/e/admitted" in m
