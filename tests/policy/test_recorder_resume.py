"""``StatsRecorder.replace_outstanding``: a resume whose statistics are not its checkpoint's own takes the
checkpoint's outstanding draws from its dispatch state, so that reissues and fates find them."""

from __future__ import annotations

from platoon.policy.pool import EntrySpec, TaskPool
from platoon.policy.recorder import StatsRecorder


def test_replace_outstanding_makes_reissues_and_fates_recorded():
    pool = TaskPool.from_entries([EntrySpec("a", ["t0", "t1"], 2, 1.0, 0)])
    recorder = StatsRecorder.for_pool(pool, start=2)
    recorder.draw(1, 0, "t0", 0, version=0, sampler="uniform", reason="fresh")  # an older snapshot's draw, since fated
    recorder.take_events()
    recorder.replace_outstanding([(1, 3, "t1", 3), (1, 4, "t1", 4)])
    store = recorder.peek_store()
    assert store.outstanding_draws() == [(1, 3, "t1", 3), (1, 4, "t1", 4)]
    assert store.counts("t1").outstanding == 2 and store.counts("t0").outstanding == 0
    assert recorder.reissue((1, 3), (2, 0), version=1, sampler="uniform")
    (event,) = recorder.take_events()
    assert event["reissues"] == [1, 3] and event["position"] == 3
    recorder.fate(2, 0, "consumed")
    recorder.fate(1, 4, "lost")
    assert store.outstanding_draws() == [] and store.counts("t1").outstanding == 0
