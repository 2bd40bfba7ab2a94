"""The per-task table and train/tasks metrics from statistics the dispatcher fed."""

from dispatch_harness import Script, build

from platoon.policy.stats import FATES
from platoon.policy.task_table import (
    TASK_COLUMNS,
    show_table,
    sort_rows,
    store_from_snapshot,
    task_metrics,
    task_rows,
)


def finished_run():
    return Script(build(tasks=6, steps=3, batch_size=2, group_size=4)).run()


def test_columns_keep_the_release_order():
    assert len(TASK_COLUMNS) == 26
    assert TASK_COLUMNS.index("fate_rejected") == TASK_COLUMNS.index("fate_lost") + 1
    assert TASK_COLUMNS[-5:] == ("group_size", "pass_rate", "pass_at_G", "informative_at_G", "newest_version")


def test_rows_list_every_task_in_pool_order_and_agree_with_the_store():
    s = finished_run()
    store = s.d.recorder.store
    rows = task_rows(store, s.d.version)
    assert [r["task_id"] for r in rows] == list(store.ids)
    assert all(tuple(r) == TASK_COLUMNS for r in rows)
    assert sum(r["groups"] for r in rows) == sum(len(st.groups) for st in s.steps)
    assert sum(r["fate_consumed"] for r in rows) == 6
    for r in rows:
        assert 0 < r["pass_rate"] < 1 and 0 <= r["informative_at_G"] <= r["pass_at_G"] <= 1


def test_a_snapshot_with_the_recorded_pool_gives_the_same_rows():
    s = finished_run()
    snapshot = s.d.recorder.snapshot()
    pool = [(r.task_id, r.entry, r.label) for r in s.d.pool.rows]
    assert task_rows(store_from_snapshot(snapshot, pool), s.d.version) == task_rows(s.d.recorder.store, s.d.version)


def test_show_sorts_and_formats():
    rows = task_rows(finished_run().d.recorder.store, 3)
    ranked = sort_rows([r for r in rows if r["groups"]], "informative")
    assert [r["informative_at_G"] for r in ranked] == sorted((r["informative_at_G"] for r in ranked), reverse=True)
    text = show_table(ranked)
    assert text.splitlines()[0].split()[-1] == "/".join(FATES)
    assert len(text.splitlines()) == len(ranked) + 1


def test_task_metrics_cover_all_tasks_and_each_label():
    s = finished_run()
    m = task_metrics(s.d.recorder.store, s.d.version)
    assert 0 < m["train/tasks/coverage"] <= 1
    assert sum(m[f"train/tasks/bands/{b}"] for b in ("zero", "low", "mid", "high", "solved")) > 0
    assert "train/tasks/environment/env/pass_at_1" in m


def test_band_indices_agree_with_band_on_every_boundary():
    import numpy as np

    from platoon.policy.stats import BANDS, band
    from platoon.policy.task_table import band_indices

    rates = np.array([0.0, 0.05, 0.0500001, 0.2, 0.2000001, 0.5, 0.7999999, 0.8, 0.9499999, 0.95, 1.0])
    assert [BANDS[i] for i in band_indices(rates)] == [band(float(r)) for r in rates]


def test_vectorised_metrics_equal_a_per_task_count():
    from platoon.policy.stats import BANDS, NO_EVIDENCE_LIMIT, band

    s = finished_run()
    store, v = s.d.recorder.store, s.d.version
    seen = [t for t in store.ids if store.task(t).reported_groups > 0]
    p1 = [store.posterior(t, v)[0] / sum(store.posterior(t, v)) for t in seen]
    m = task_metrics(store, v)
    assert abs(m["train/tasks/pass_at_1"] - sum(p1) / len(p1)) < 1e-12
    assert [m[f"train/tasks/bands/{b}"] for b in BANDS] == [float(sum(band(p) == b for p in p1)) for b in BANDS]
    assert m["train/tasks/no_evidence"] == sum(store.counts(t).no_evidence_streak >= NO_EVIDENCE_LIMIT
                                               for t in store.ids)
