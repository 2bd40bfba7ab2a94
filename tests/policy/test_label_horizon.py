"""Label limits and the horizon: a capped label's next group keeps a place (docs/dispatch.md, "The horizon").

With ``max_staleness: k`` and ``train.rollout_group_limits``, the horizon should hold places for the next groups of
a capped label that runs a group and has draws waiting for room: another group may start only while
``in_use + held < (k + 1) * B``, where ``running`` counts the running groups of capped labels that have draws
waiting and ``held = min(running, max(0, k * B - running))`` (0 at ``k = 0`` or without limits); a waiting draw of
such a label gets the places held for it. Without these places, groups of unlimited labels fill the horizon, and the
capped label's waiting draw, once its label has room, still waits for a step to free a place.
"""

from __future__ import annotations

from platoon.components import admission_set, sampler_set
from platoon.policy.dispatcher import DispatchConfig, Dispatcher, StartGroup
from platoon.policy.outputs import GroupOutput
from platoon.policy.pool import EntrySpec, TaskPool
from platoon.policy.recorder import StatsRecorder
from platoon.policy.stats import MemberResult


def capped_dispatcher() -> tuple[Dispatcher, TaskPool]:
    """Eight tasks labelled x, y, x, y, ... in the column ``tier``; x runs one group at a time; k = 1, B = 2."""
    pool = TaskPool.from_entries([EntrySpec("e", [f"t{i}" for i in range(8)], 2, label=["x", "y"] * 4)],
                                 label_column="tier")
    samplers = sampler_set(pool, run_sampler="uniform", run_options={}, entry_samplers={}, batch_size=2, seed=0)
    recorder = StatsRecorder.for_pool(pool)
    recorder.add_listener(samplers.observe)
    rules = admission_set(run_rule="all", run_options={}, entry_rules={}, entries=pool.entries, batch_size=2)
    config = DispatchConfig(batch_size=2, steps=4, max_concurrent_rollouts=16, max_staleness=1,
                            label_limits={"x": 1})
    return Dispatcher(config, pool, samplers, recorder, rules), pool


def test_a_capped_labels_waiting_draw_keeps_a_place_in_the_horizon():
    d, pool = capped_dispatcher()
    now = 0.0
    started = [x for x in d.start(now=now) if isinstance(x, StartGroup)]
    draws = [e["task_id"] for e in d.take_events() if e["event"] == "draw"]
    # the uniform pass draws t3 (y), t4 (x), t2 (x: waits, x is at its limit), t7 (y); with t4 running and t2 waiting,
    # one place is held for x, so in_use = 3 fills the horizon of (1 + 1) x 2 = 4
    assert draws == ["t3", "t4", "t2", "t7"]
    assert [(g.task_id, pool.rows[g.row_index].label) for g in started] == [("t3", "y"), ("t4", "x"), ("t7", "y")]
    # t4's group ends: x has room again, and its waiting draw t2 starts at once, on the place held for it
    x_group = started[1]
    for i in range(2):
        d.on_block_entered(x_group.key, i, now=now)
    now += 1.0
    for i in range(2):
        d.on_block_exited(x_group.key, i, now=now)
    members = tuple(MemberResult(reward=float(i), scored=float(i), valid=True, versions={"main": (0, 0)})
                    for i in range(2))
    after = d.on_group_finished(x_group.key, GroupOutput("trained", members, ((0, 0.0), (1, 1.0))), now=now)
    assert [g.task_id for g in after if isinstance(g, StartGroup)] == ["t2"]


def test_the_places_held_follow_the_running_groups_of_capped_labels_with_draws_waiting():
    from platoon.policy.dispatch_records import BoundDraw
    from platoon.policy.mixture import Mixture

    pool = TaskPool.from_entries([EntrySpec("e", [f"t{i}" for i in range(4)], 2, label=["x", "y"] * 2)],
                                 label_column="tier")
    m = Mixture(pool, {"x": 1, "y": 3}, batch_size=2)

    def wait(label, seq):
        assert m.park_draw(BoundDraw((1, seq), 0, "t0", "e", label, seq, 2, 0, "uniform", "order", None))

    m.take_label("x")
    assert m.held(1) == 0  # x runs a group, but nothing of x waits
    wait("x", 0)
    assert (m.held(0), m.held(None), m.held(1), m.held(1, release=("x",))) == (0, 0, 1, 0)
    for _ in range(3):
        m.take_label("y")
    wait("y", 1)
    assert m.held(1) == 0  # running = 4 leaves no room under k x B = 2: min(4, max(0, 2 - 4))
    assert m.held(3) == 2  # min(4, 6 - 4)
    assert m.held(3, release=("y",)) == 0 and m.held(3, release=("x",)) == 1
    assert Mixture(pool, {}, batch_size=2).held(1) == 0  # no limits, nothing held
