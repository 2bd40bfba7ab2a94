"""Tasks and the learning model: task files, synthesized populations, pass rates that training moves."""

from __future__ import annotations

import numpy as np
import pytest

from platoon.config.sim import SimConfig
from platoon.sim.learning import EntryTasks, Learner, read_task_file, sigmoid


def learner(entries, *, learn=True, gain=0.5, transfer=0.2, ability=0.0) -> Learner:
    row_entry, row_task = [], []
    for i, e in enumerate(entries):
        row_entry += [i] * len(e.task_ids)
        row_task += list(range(len(e.task_ids)))
    n = len(entries)
    return Learner(entries, row_entry, row_task, learn=[learn] * n, gain=[gain] * n, transfer=[transfer] * n,
                   initial_ability=[ability] * n)


def test_task_files(tmp_path):
    (tmp_path / "t.csv").write_text("task_id,pass_rate,length,kind\na,0.25,2,x\nb,1,,y\n")
    rows = read_task_file(tmp_path / "t.csv")
    assert [(r.task_id, r.pass_rate, r.length, r.data) for r in rows] == [
        ("a", 0.25, 2.0, {"kind": "x"}), ("b", 1.0, 1.0, {"kind": "y"})]
    (tmp_path / "t.json").write_text('[{"task_id": 7, "pass_rate": 0.5}]')
    assert read_task_file(tmp_path / "t.json")[0].task_id == "7"
    for text, match in [("task_id,rate\na,1\n", "needs columns"), ("task_id,pass_rate\na,1.5\n", r"in \[0, 1\]"),
                        ("task_id,pass_rate,length\na,0.5,0\n", "positive"), ("task_id,pass_rate\n", "no tasks")]:
        (tmp_path / "bad.csv").write_text(text)
        with pytest.raises(ValueError, match=match):
            read_task_file(tmp_path / "bad.csv")


def test_a_task_file_fixes_rates(tmp_path):
    (tmp_path / "t.csv").write_text("task_id,pass_rate,length\na,0.25,2\nb,0\nc,1\n")
    sim = SimConfig.model_validate({"tasks": str(tmp_path / "t.csv")})
    assert not sim.learning_on
    e = EntryTasks.build("env", sim, seed=0, task_ids=None)
    L = learner([e], learn=sim.learning_on)
    assert [L.pass_rate(r) for r in range(3)] == [0.25, 0.0, 1.0]
    assert L.length == [2.0, 1.0, 1.0]
    L.trained([0, 0, 0])
    L.publish()
    assert L.pass_rate(0) == 0.25
    assert L.pass_at_1() is None


def test_population_is_the_entrys_not_the_runs():
    sim = SimConfig.model_validate({"population": {"tasks": 50, "heldout": 10, "difficulty_sd": 2.0},
                                    "rollout": {"length_sigma": 0.5}})
    a = EntryTasks.build("env", sim, seed=3, task_ids=None)
    b = EntryTasks.build("env", sim, seed=3, task_ids=None)
    c = EntryTasks.build("env", sim, seed=4, task_ids=None)
    assert a.task_ids == [f"env/{i}" for i in range(50)]
    assert np.array_equal(a.difficulty, b.difficulty) and np.array_equal(a.heldout, b.heldout)
    assert not np.array_equal(a.difficulty, c.difficulty)
    assert len(set(a.length.tolist())) == 50
    listed = EntryTasks.build("env", sim, seed=3, task_ids=["env/7", "env/2"])
    assert listed.difficulty.tolist() == [a.difficulty[7], a.difficulty[2]]  # a task keeps its difficulty


def test_training_moves_trained_tasks_and_ability():
    sim = SimConfig.model_validate({"population": {"tasks": 10, "heldout": 30}})
    e = EntryTasks.build("env", sim, seed=0, task_ids=None)
    L = learner([e], gain=0.5, transfer=0.2)
    before = [L.pass_rate(r) for r in range(10)]
    assert before == pytest.approx(sigmoid(-e.difficulty).tolist())
    p0 = L.pass_at_1()
    assert p0 == pytest.approx(float(sigmoid(-e.heldout).mean()))
    L.trained([3, 3])
    assert L.pass_rate(3) == before[3]  # not before the weights are published
    L.publish()
    assert L.pass_rate(3) == pytest.approx(float(sigmoid(np.array(1.0 + 0.2 - e.difficulty[3]))))
    assert L.pass_rate(4) == pytest.approx(float(sigmoid(np.array(0.2 - e.difficulty[4]))))
    assert L.pass_at_1() > p0
    twin = learner([e], gain=0.5, transfer=0.2)
    twin.load_state_dict(L.state_dict())
    assert [twin.pass_rate(r) for r in range(10)] == [L.pass_rate(r) for r in range(10)]


def test_state_keeps_skill_sparse_and_reads_an_older_dense_one():
    sim = SimConfig.model_validate({"population": {"tasks": 100_000, "heldout": 0}})
    e = EntryTasks.build("env", sim, seed=0, task_ids=None)
    L = learner([e])
    L.trained([7, 7, 99_999])
    L.publish()
    state = L.state_dict()
    assert state["skill_rows"] == [7, 99_999] and state["skill"] == [1.0, 0.5]  # two rows, not 100,000
    twin = learner([e])
    twin.load_state_dict(state)
    assert np.array_equal(twin.skill, L.skill)
    older = learner([e])
    older.load_state_dict({"ability": state["ability"], "skill": L.skill.tolist(), "pending_rows": []})
    assert np.array_equal(older.skill, L.skill)
    assert older.pass_rate(7) == L.pass_rate(7)


def test_no_learning_keeps_rates():
    sim = SimConfig.model_validate({"population": {"tasks": 5}, "learning": {"enabled": False}})
    e = EntryTasks.build("env", sim, seed=0, task_ids=None)
    L = learner([e], learn=sim.learning_on)
    before = [L.pass_rate(r) for r in range(5)]
    L.trained([0, 1])
    L.publish()
    assert [L.pass_rate(r) for r in range(5)] == before


def test_learning_beside_a_task_file_is_refused():
    with pytest.raises(ValueError, match="fixes each task's pass rate"):
        SimConfig.model_validate({"tasks": "t.csv", "learning": {"enabled": True}})


def test_learner_rows_read_their_entrys_task(tmp_path):
    """Rows of several entries, interleaved and repeating tasks, each take their own entry's task's values."""
    (tmp_path / "t.csv").write_text("task_id,pass_rate,length\na,0.25,2\nb,0\nc,1,3\n")
    fixed = EntryTasks.build("f", SimConfig.model_validate({"tasks": str(tmp_path / "t.csv")}), seed=0, task_ids=None)
    drawn = EntryTasks.build("d", SimConfig.model_validate({"population": {"tasks": 4},
                                                            "rollout": {"length_sigma": 0.5}}), seed=1, task_ids=None)
    entries, row_entry, row_task = [drawn, fixed], [1, 0, 0, 1, 0, 1, 0], [2, 3, 0, 0, 3, 1, 1]
    L = Learner(entries, row_entry, row_task, learn=[True, False], gain=[0.5, 0.5], transfer=[0.2, 0.2],
                initial_ability=[0.0, 0.0])
    pairs = list(zip(row_entry, row_task, strict=True))
    assert L.difficulty.tolist() == [entries[e].difficulty[t] for e, t in pairs]
    assert L.length == [float(entries[e].length[t]) for e, t in pairs]
    assert L.fixed_mask.tolist() == [e == 1 for e, _ in pairs]
    assert L.fixed.tolist() == [fixed.fixed_rate[t] if e == 1 else 0.0 for e, t in pairs]
    assert [L.pass_rate(r) for r in (0, 3, 5)] == [1.0, 0.25, 0.0]


def grouped(label_gain=0.4, half_life=None, gain=0.5, transfer=0.0, sd=0.0):
    """Four training tasks in groups a, a, b, b and held-out tasks a, b; every difficulty 0."""
    sim = SimConfig.model_validate({"population": {"difficulty_sd": sd},
                                    "learning": {"similar_by": ["kind"], "label_gain": label_gain,
                                                 "forget_half_life": half_life, "gain": gain, "transfer": transfer}})
    data = [{"kind": k} for k in "aabb"]
    e = EntryTasks.build("env", sim, seed=0, task_ids=["a1", "a2", "b1", "b2"], data=data,
                         heldout=(["ha", "hb"], [{"kind": "a"}, {"kind": "b"}]))
    return Learner([e], [0] * 4, range(4), learn=[True], gain=[gain], transfer=[transfer], initial_ability=[0.0],
                   label_gain=[label_gain], forget_half_life=[half_life])


def test_training_a_task_moves_its_group_held_out_tasks_included_and_no_other():
    L = grouped(label_gain=0.4)
    L.trained([0])
    L.publish()
    logit = lambda p: float(np.log(p / (1 - p)))  # noqa: E731
    assert [round(logit(L.pass_rate(r)), 9) for r in range(4)] == [0.9, 0.4, 0.0, 0.0]
    assert L.pass_at_1() == pytest.approx((sigmoid(0.4) + 0.5) / 2)


def test_a_negative_label_gain_lowers_the_others_of_the_group():
    L = grouped(label_gain=-0.2)
    L.trained([0, 0])
    L.publish()
    assert L.pass_rate(1) < 0.5 < L.pass_rate(0) and L.pass_rate(2) == 0.5


def test_skill_halves_every_half_life_after_the_task_was_last_trained():
    L = grouped(label_gain=0.0, half_life=4.0, gain=1.0)
    L.trained([0])
    L.publish()
    assert L.pass_rate(0) == pytest.approx(float(sigmoid(1.0)))
    for _ in range(4):
        L.publish()
    assert L.pass_rate(0) == pytest.approx(float(sigmoid(0.5)))
    L.trained([0])  # trained again: what is left of it, and the new gain
    L.publish()
    assert L.pass_rate(0) == pytest.approx(float(sigmoid(0.5 * 2 ** -0.25 + 1.0)))


def test_a_grouped_learner_resumes_exactly():
    a = grouped(half_life=3.0)
    for rows in ([0, 2], [1], [], [3, 3]):
        a.trained(rows, [0.5] * len(rows))
        a.publish()
    a.trained([1], [2.0])  # pending across the save
    b = grouped(half_life=3.0)
    b.load_state_dict(a.state_dict())
    for learner in (a, b):
        learner.publish()
        learner.publish()
    assert [a.pass_rate(r) for r in range(4)] == [b.pass_rate(r) for r in range(4)]
    assert a.pass_at_1() == b.pass_at_1()


def test_groups_need_similar_by_and_columns():
    with pytest.raises(ValueError, match="similar_by"):
        SimConfig.model_validate({"learning": {"label_gain": 0.1}})
    sim = SimConfig.model_validate({"learning": {"similar_by": ["kind"]}})
    with pytest.raises(ValueError, match="lacks column"):
        EntryTasks.build("env", sim, seed=0, task_ids=["x"], data=[{"other": 1}], heldout=(["h"], [{"kind": "a"}]))
    with pytest.raises(ValueError, match="held-out tasks"):
        EntryTasks.build("env", sim, seed=0, task_ids=None)
