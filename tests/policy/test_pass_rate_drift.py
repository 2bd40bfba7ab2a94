"""pass_rate's default evidence (``evidence: drift``): shared drift, forgetting by rounds, graded rewards, spread,
exact state; and ``evidence: versions``, platoon 0.4.0's."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from platoon.config.components import PassRateOptions
from platoon.policy.samplers.base import EntryInfo, SamplerContext, SamplerSetup, TaskStatsView, decision_key
from platoon.policy.samplers.drift import FORGET_ROUNDS, PRIOR_STRENGTH, DriftModel, informative_chance
from platoon.policy.samplers.pass_rate import SPREAD, PassRateSampler
from platoon.policy.stats import GroupRecord, MemberResult, TaskStatsStore, informative_at

G = 8


class Run:
    """A pass_rate sampler fed as the runtime feeds it: each settled group goes to the store, then to ``observe``."""

    def __init__(self, n: int, options: dict | None = None, *, graded: bool = False) -> None:
        self.ids = [f"t{i}" for i in range(n)]
        entries = {"e": EntryInfo(G, name="e", weight=1.0, index=0, task_ids=tuple(self.ids))}
        self.setup = SamplerSetup(
            name="pass_rate", level="run", entry=None, task_ids=tuple(self.ids), entries=entries, batch_size=8
        )
        self.options = PassRateOptions(**(options or {}))
        self.sampler = PassRateSampler(self.setup, self.options)
        self.store = TaskStatsStore([(t, "e", "L") for t in self.ids], {"e": (G, 1.0)})
        self.graded = graded
        self.decision = 0
        self.seq = 0

    def view(self, version: int) -> TaskStatsView:
        return TaskStatsView(self.store, version)

    def ask(self, version: int = 0, *twins: PassRateSampler):
        """The sampler's next answer (each twin, asked the same question, must answer alike)."""
        s = self.setup
        ctx = SamplerContext(
            s.task_ids,
            None,
            self.decision,
            decision_key(0, s.name, self.decision),
            lambda t: True,
            stats=self.view(version),
        )
        self.decision += 1
        answer = self.sampler.next(ctx)
        for twin in twins:
            assert twin.next(ctx) == answer
        return answer

    def record(self, task: str, passes: int, version: int) -> GroupRecord:
        members = tuple(
            MemberResult(scored=float(i < passes), valid=True, versions={"main": (version, version)})
            for i in range(G)
        )
        trains = 0 < passes < G or (self.graded and passes == 0)
        self.seq += 1
        return GroupRecord(
            1, self.seq, task, entry="e", members=members, verdict="trained" if trains else "uniform"
        )

    def settle(self, task: str, passes: int, version: int, *twins: PassRateSampler) -> None:
        """Settle a group into the store, then feed it to the sampler (and its twins)."""
        record = self.record(task, passes, version)
        self.store.settle(record)
        for s in (self.sampler, *twins):
            s.observe(record)


def test_a_shared_drift_keeps_old_evidence_true():
    """Every task's logit rises by 0.05 a version. A task last seen 60 versions ago reads near its true rate under
    the drift model, while 0.4.0's evidence (halved every 32 versions) has faded toward the entry's prior."""
    rng = np.random.default_rng(0)
    run = Run(40)
    theta = rng.normal(-1.0, 1.5, 40)

    def rate(i: int, v: int) -> float:
        return float(1 / (1 + np.exp(-(theta[i] + 0.05 * v))))

    for v in range(60):
        for i in range(40):
            if i == 0 and v > 0:
                continue  # task 0 is seen at version 0 only (many groups)
            for _ in range(4 if i == 0 else 1):
                run.settle(run.ids[i], int((rng.random(G) < rate(i, v)).sum()), v)
    model = run.sampler._model
    assert model.entries[0, 0] == pytest.approx(0.05 * 59, abs=1.0)  # the drift followed the policy
    a, b = model.posterior(np.array([0]), model.clock)
    assert float(a[0] / (a[0] + b[0])) == pytest.approx(rate(0, 60), abs=0.12)  # 0.31 at version 0, 0.90 now
    assert float(a[0] + b[0]) > 16  # most of its 32 rollouts still count
    a_old, b_old = run.store.posterior("t0", 60)
    assert abs(a_old / (a_old + b_old) - rate(0, 60)) > 0.3


def test_fixed_rates_leave_the_drift_near_zero():
    rng = np.random.default_rng(1)
    run = Run(50)
    rates = rng.beta(0.5, 0.5, 50)
    for v in range(40):
        for i in range(50):
            run.settle(run.ids[i], int((rng.random(G) < rates[i]).sum()), v)
    assert abs(run.sampler._model.entries[0, 0]) < 0.25


def test_evidence_fades_by_rounds_of_the_pool_not_by_versions():
    model = DriftModel(10, np.zeros(10, dtype=np.int64), ("e",), np.array([10]))
    model.observe(0, 4, 8, "trained", version=0)
    strength = lambda clock: float(np.sum(model.posterior(np.array([0]), clock)))  # noqa: E731
    evidence = strength(0) - PRIOR_STRENGTH
    assert evidence == pytest.approx(G)
    assert strength(10 * int(FORGET_ROUNDS)) - PRIOR_STRENGTH == pytest.approx(
        evidence / 2
    )  # 16 rounds of 10
    model.observe(1, 4, 8, "trained", version=10_000)  # versions alone fade nothing
    assert strength(0) - PRIOR_STRENGTH == pytest.approx(G)


@pytest.mark.parametrize("graded", [False, True])
def test_a_graded_reward_makes_all_fail_tasks_worth_drawing(graded):
    """Half the tasks always fail, half pass a fifth of the time. With a binary reward an all-fail group trains
    nothing and the score is 0.4.0's; with partial credit it trains, and the never-solved tasks are as good."""
    run = Run(20, {"explore": 0.0, "max_draws_per_epoch": None}, graded=graded)
    rng = np.random.default_rng(2)
    hard = {t for i, t in enumerate(run.ids) if i % 2}
    for _ in range(6):
        for t in run.ids:
            run.settle(t, 0 if t in hard else int((rng.random(G) < 0.2).sum()), 0)
    u1, u0 = run.sampler._model.uniform_shares(np.array([0]))
    assert u1[0] == 1.0
    assert (u0[0] < 0.2) if graded else (u0[0] == 1.0)
    draws = Counter(run.ask().task_id in hard for _ in range(200))
    if graded:
        assert draws[True] > 40
    else:
        assert draws[True] < 10
    model = run.sampler._model
    clock = model.clock  # a decision reads the evidence as of the decisions before it
    answer = run.ask()
    a, b = (float(x[0]) for x in model.posterior(np.array([run.ids.index(answer.task_id)]), clock))
    if not graded:
        assert answer.score == pytest.approx(
            informative_at(a, b, G)
        )  # 0.4.0's formula on the model's posterior


def test_spread_covers_equally_good_tasks_before_drawing_one_again():
    """Thirty tasks alike and informative (four passes of eight, three times), thirty never solved: within a window,
    exploitation draws every good task once before it draws any twice, and never a hopeless one; 0.4.0's evidence
    draws some good tasks three times while others wait."""
    spread, versions = Run(60, {"explore": 0.0}), Run(60, {"explore": 0.0, "evidence": "versions"})
    for run in (spread, versions):
        for _ in range(3):
            for i, t in enumerate(run.ids):
                run.settle(t, 4 if i < 30 else 0, 0)
    first = [spread.ask().task_id for _ in range(30)]
    assert sorted(first) == sorted(spread.ids[:30])
    again = Counter(versions.ask().task_id for _ in range(30))
    assert max(again.values()) > 1 and all(int(t[1:]) < 30 for t in again)


def test_spread_does_not_hand_a_draw_to_a_worse_task():
    """One task mixes half the time, the others nearly never: it is drawn up to the cap first."""
    run = Run(30, {"explore": 0.0})
    rng = np.random.default_rng(4)
    for _ in range(4):
        for i, t in enumerate(run.ids):
            run.settle(t, int((rng.random(G) < (0.5 if i == 0 else 0.01)).sum()), 0)
    assert [run.ask().task_id for _ in range(3)] == ["t0"] * 3
    assert SPREAD < informative_chance(np.array([20.0]), np.array([20.0]), G, 1.0, 1.0)[0] - 0.5


def test_exploitation_draws_among_the_near_best_not_the_luckiest_sample():
    """Forty tasks known to mix half the time (four passes of eight, five times), two hundred seen once with two
    passes (a wide posterior, expected chance well below): over a window's first eighty draws exploitation draws
    only the near-best, each up to the cap, though a wide posterior often samples the highest score. 0.4.0's pure
    Thompson sampling hands some of those draws to the wide posteriors."""
    near, versions = Run(240, {"explore": 0.0}), Run(240, {"explore": 0.0, "evidence": "versions"})
    for run in (near, versions):
        for t in run.ids[:40]:
            for _ in range(5):
                run.settle(t, 4, 0)
        for t in run.ids[40:]:
            run.settle(t, 2, 0)
    model = near.sampler._model
    good, wide = np.array([0]), np.array([40])
    assert informative_chance(*model.posterior(good, 0), G, 1.0, 1.0)[0] - SPREAD > informative_chance(
        *model.posterior(wide, 0), G, 1.0, 1.0
    )[0]
    drawn = Counter(near.ask().task_id for _ in range(80))
    assert all(int(t[1:]) < 40 for t in drawn) and max(drawn.values()) <= 3
    assert any(int(versions.ask().task_id[1:]) >= 40 for _ in range(80))


def test_versions_is_0_4_0s_evidence_and_ignores_observe():
    """``evidence: versions`` keeps 0.4.0's state (no model), scores by the statistics' posterior, and draws the
    same whether or not ``observe`` is fed."""
    fed, unfed = Run(12, {"evidence": "versions"}), Run(12, {"evidence": "versions"})
    rng = np.random.default_rng(5)
    for _ in range(3):
        for t in fed.ids:
            record = fed.record(t, int((rng.random(G) < 0.4).sum()), 0)
            fed.store.settle(record)
            fed.sampler.observe(record)
            unfed.store.settle(record)
    assert set(fed.sampler.state_dict()) == {"last_drawn", "window", "window_draws", "previous_window_draws"}
    for _ in range(40):
        a, b = fed.ask(), unfed.ask()
        assert a == b
        x, y = fed.store.posterior(a.task_id, 0)
        assert a.score == pytest.approx(informative_at(x, y, G))


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_restored_at_any_point_it_draws_and_learns_alike(data):
    """Save the state (through JSON) at any decision, settle the same groups into both: identical answers."""
    n = data.draw(st.integers(3, 12))
    options = {
        "explore": data.draw(st.sampled_from([0.0, 0.2])),
        "max_draws_per_epoch": data.draw(st.sampled_from([None, 1, 3])),
    }
    run = Run(n, options, graded=data.draw(st.booleans()))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    rates = rng.uniform(0, 1, n)
    at, more = data.draw(st.integers(0, 4 * n)), data.draw(st.integers(1, 3 * n))
    twin = None
    for d in range(at + more):
        if d == at:
            twin = PassRateSampler(run.setup, run.options)
            twin.load_state_dict(json.loads(json.dumps(run.sampler.state_dict())))
        version = d // 4
        twins = () if twin is None else (twin,)
        answer = run.ask(version, *twins)
        k = int((rng.random(G) < rates[run.ids.index(answer.task_id)]).sum())
        run.settle(answer.task_id, k, version, *twins)
    assert twin.state_dict() == run.sampler.state_dict()


def test_state_refusals_and_0_4_0_states():
    run = Run(5)
    for v in range(3):
        for t in run.ids:
            run.settle(t, 3, v)
        run.ask(v)
    state = json.loads(json.dumps(run.sampler.state_dict()))
    model = state["model"]
    assert set(model["tasks"]) == set(run.ids) and model["clock"] == 3
    before = run.sampler.state_dict()
    for bad in (
        {**state, "model": []},
        {**state, "model": {**model, "clock": -1}},
        {**state, "model": {**model, "tasks": {"t0": [1.0, 2.0]}}},
        {**state, "model": {**model, "tasks": {"t0": [0.0, 2.0, 0.0, 1]}}},
        {**state, "model": {**model, "entries": {"e": [0.0] * 3}}},
        {**state, "model": {**model, "entries": {"e": [float("nan")] * 9}}},
    ):
        with pytest.raises(ValueError):
            run.sampler.load_state_dict(bad)
        assert run.sampler.state_dict() == before  # a refusal changes nothing
    v040 = {k: state[k] for k in ("last_drawn", "window", "window_draws", "previous_window_draws")}
    fresh = PassRateSampler(run.setup, run.options)
    fresh.load_state_dict(v040)  # 0.4.0's state: the draws' bookkeeping, the model afresh
    assert fresh.state_dict() == v040  # a fresh model is not saved: the state is 0.4.0's
    moved = PassRateSampler(
        SamplerSetup(
            name="pass_rate",
            level="run",
            entry=None,
            task_ids=("t0", "new"),
            entries={"e": EntryInfo(G, name="e", task_ids=("t0", "new"))},
            batch_size=8,
        ),
        run.options,
    )
    moved.load_state_dict(state)
    assert set(moved.state_dict()["model"]["tasks"]) == {"t0"}


def test_a_task_the_model_never_saw_reads_the_statistics():
    """Nobody fed observe (a test, a resume from 0.4.0's state): the statistics' evidence still steers exploitation."""
    run = Run(20, {"explore": 0.0, "max_draws_per_epoch": None})
    rng = np.random.default_rng(6)
    for _ in range(4):
        for i, t in enumerate(run.ids):
            run.store.settle(run.record(t, int((rng.random(G) < (0.5 if i < 2 else 0.0)).sum()), 0))
    assert {run.ask().task_id for _ in range(30)} <= {"t0", "t1"}


def test_metrics_report_the_drift_and_the_graded_share():
    run = Run(10, graded=True)
    for v in range(4):
        for t in run.ids:
            run.settle(t, 0, v)
        run.ask(v)
    m = run.sampler.metrics(run.view(4))
    assert m["all_fail_uniform"] < 0.1 and np.isfinite(m["drift"])
    assert 0 < m["prior_share"] < PRIOR_STRENGTH / (PRIOR_STRENGTH + 8)  # the model's prior weight, 0.5
    versions = Run(10, {"evidence": "versions"})
    versions.ask()
    assert "drift" not in versions.sampler.metrics(versions.view(0))
