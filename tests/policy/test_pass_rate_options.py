"""pass_rate's options beside its contract: ``importance_cap`` (loss weights, scaled per step by the sampler set),
``explore_order: reshuffled``, ``forget_versions`` and ``near_best``; each off by default, each exact across a
state round trip."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from pydantic import ValidationError
from test_pass_rate_drift import G, Run

from platoon.components import sampler_set
from platoon.config.components import PassRateOptions
from platoon.policy.pool import EntrySpec, TaskPool
from platoon.policy.samplers.base import Sampler
from platoon.policy.samplers.drift import PRIOR_STRENGTH, DriftModel
from platoon.policy.samplers.pass_rate import PassRateSampler
from platoon.policy.stats import GroupRecord


def _draw_many(run: Run, decisions: int, *, passes=lambda task: G // 2, version=lambda d: d // 8) -> list[str]:
    """Ask ``decisions`` times, settling each draw at once with ``passes(task)`` passes."""
    drawn = []
    for d in range(decisions):
        task = run.ask(version(d)).task_id
        drawn.append(task)
        run.settle(task, passes(task), version(d))
    return drawn


def test_without_importance_cap_every_task_weighs_one():
    run = Run(16)
    _draw_many(run, 40)
    assert {run.sampler.loss_weight(t) for t in run.ids} == {1.0}


def test_importance_weights_are_the_uniform_share_over_the_recent_share_capped():
    """Tasks 0-3 mix (half pass), the rest never pass: exploitation draws the mixing four over and over, so their
    weight falls below 1, while a task drawn once in the two windows gets the cap."""
    run = Run(32, {"importance_cap": 2.0})
    _draw_many(run, 96, passes=lambda task: G // 2 if int(task[1:]) < 4 else 0)
    s = run.sampler
    total = int(s.history.window_draws.sum() + s.history.previous.sum())
    for t in run.ids:
        i = run.ids.index(t)
        drawn = max(int(s.history.window_draws[i] + s.history.previous[i]), 1)
        assert s.loss_weight(t) == pytest.approx(min(2.0, total / (32 * drawn)))
    assert max(s.loss_weight(t) for t in run.ids[:4]) < 1.0
    assert max(s.loss_weight(t) for t in run.ids[4:]) > 1.0
    assert s.loss_weight("not a task") == 1.0


def test_reshuffled_exploration_covers_the_window_in_a_new_order_each_time():
    """With ``explore: 1.0`` every draw explores: least_recent repeats the first window's order for good, reshuffled
    draws every task once a window, in another order each window."""
    orders = {}
    for order in ("least_recent", "reshuffled"):
        run = Run(24, {"explore": 1.0, "explore_order": order})
        drawn = _draw_many(run, 24 * 4)
        windows = [drawn[w * 24:(w + 1) * 24] for w in range(4)]
        assert all(sorted(w) == sorted(run.ids) for w in windows)  # each task once a window
        orders[order] = windows
    assert all(w == orders["least_recent"][1] for w in orders["least_recent"][1:])
    assert len({tuple(w) for w in orders["reshuffled"]}) == 4


def test_forget_versions_fades_evidence_with_the_policy_versions_since_it_came():
    model = DriftModel(2, np.zeros(2, dtype=np.int64), ("e",), np.array([2]), forget_versions=10.0)
    model.observe(0, 6, 8, "trained", version=0)
    idx = np.array([0])
    a0, b0 = (float(x[0]) for x in model.posterior(idx, model.clock))
    model.now = 10.0
    a1, b1 = (float(x[0]) for x in model.posterior(idx, model.clock))
    assert (a1 + b1 - PRIOR_STRENGTH) == pytest.approx((a0 + b0 - PRIOR_STRENGTH) / 2)
    assert a1 / (a1 + b1) == pytest.approx(a0 / (a0 + b0))  # the mean stays: only its weight fades
    plain = DriftModel(2, np.zeros(2, dtype=np.int64), ("e",), np.array([2]))
    plain.observe(0, 6, 8, "trained", version=0)
    plain.now = 10.0
    assert sum(float(x[0]) for x in plain.posterior(idx, plain.clock)) == pytest.approx(a0 + b0)


@pytest.mark.parametrize("options", [
    {"importance_cap": 3.0}, {"explore_order": "reshuffled"}, {"forget_versions": 8.0}, {"near_best": 1.0},
])
def test_each_option_resumes_exactly(options):
    """A state saved mid-run, through JSON, into a new sampler: both answer alike from there on."""
    run = Run(20, options)
    _draw_many(run, 50, passes=lambda task: int(task[1:]) % (G + 1))
    twin = PassRateSampler(run.setup, run.options)
    twin.load_state_dict(json.loads(json.dumps(run.sampler.state_dict())))
    for d in range(50, 90):
        task = run.ask(d // 8, twin).task_id
        run.settle(task, int(task[1:]) % (G + 1), d // 8, twin)
        assert twin.loss_weight(task) == run.sampler.loss_weight(task)


def test_a_drift_state_without_version_stamps_loads_under_forget_versions():
    """A checkpoint written without ``forget_versions`` (four numbers a task, no ``now``) loads with it on: its
    evidence counts as of the version the state was saved at."""
    run = Run(12)
    _draw_many(run, 30)
    state = json.loads(json.dumps(run.sampler.state_dict()))
    assert "now" not in state["model"] and {len(v) for v in state["model"]["tasks"].values()} == {4}
    later = PassRateSampler(run.setup, PassRateOptions(forget_versions=4.0))
    later.load_state_dict(state)
    assert later.state_dict()["model"]["now"] == 0.0


def test_near_best_one_lets_every_candidate_compete_on_its_sample():
    """With every task at even odds but one, near_best 0.05 keeps the draws off the one at 1 in 8; near_best 1.0
    lets its Thompson samples win some draws."""
    counts = {}
    for near in (0.05, 1.0):
        run = Run(8, {"near_best": near, "explore": 0.0, "max_draws_per_epoch": None})
        for t in run.ids:  # evidence first: t0 passes once in eight, the others half the time
            for _ in range(3):
                run.store.settle(rec := run.record(t, 1 if t == "t0" else G // 2, 0))
                run.sampler.observe(rec)
        counts[near] = sum(run.ask(0).task_id == "t0" for _ in range(400))
    assert counts[0.05] == 0 < counts[1.0]


@pytest.mark.parametrize("bad", [
    {"near_best": 0}, {"near_best": 1.5}, {"forget_versions": 0}, {"importance_cap": 0.5},
    {"importance_cap": math.inf}, {"explore_order": "random"},
    {"evidence": "versions", "forget_versions": 8}, {"evidence": "versions", "near_best": 0.2},
])
def test_bad_options_are_refused(bad):
    with pytest.raises(ValidationError):
        PassRateOptions(**bad)


class Weighs(Sampler):
    """Draws in order; its loss weights come from ``WEIGHTS`` by task id (what a test sets)."""

    WEIGHTS: dict = {}

    def next(self, ctx):
        return self.setup.task_ids[ctx.decision % len(self.setup.task_ids)]

    def loss_weight(self, task_id):
        value = self.WEIGHTS[task_id]
        if isinstance(value, Exception):
            raise value
        return value


def _weights(answers: dict, verdicts: str) -> tuple[tuple[float, ...], list[str]]:
    """The sampler set's loss weights of groups of tasks a, b, c, d with these verdicts (t: trained, u: uniform),
    and its warnings."""
    pool = TaskPool.from_entries([EntrySpec("e", list("abcd"), 2, 1.0, 0)])
    samplers = sampler_set(pool, run_sampler="test_pass_rate_options:Weighs", run_options={}, entry_samplers={},
                          batch_size=4, seed=0)
    name = samplers.static_decision(0).sampler
    samplers.sampler().WEIGHTS = answers  # the instance the set built (its class may be another import's)
    records = [GroupRecord(1, i, t, sampler=name, verdict="trained" if v == "t" else "uniform")
               for i, (t, v) in enumerate(zip("abcd", verdicts, strict=True))]
    return samplers.loss_weights(records), samplers.take_warnings()


def test_a_step_s_trained_groups_weigh_their_sampler_s_answer_scaled_to_mean_one():
    weights, warnings = _weights({"a": 1.0, "b": 3.0, "c": 0.5, "d": 2.0}, "tttu")
    assert weights == pytest.approx((2 / 3, 2.0, 1 / 3, 1.0)) and warnings == []  # trained: mean 1.5
    assert _weights({t: 2.0 for t in "abcd"}, "tttt")[0] == pytest.approx((1.0,) * 4)
    assert _weights({t: 1.0 for t in "abcd"}, "tutu")[0] == ()  # nobody weighs: the step's groups weigh 1


@pytest.mark.parametrize("bad", [math.nan, 0.0, -1.0, "2", True, RuntimeError("no")])
def test_a_weight_that_is_not_a_number_above_zero_counts_one_and_is_said_once(bad):
    weights, warnings = _weights({"a": bad, "b": 3.0, "c": bad, "d": 1.0}, "tttt")
    assert weights == pytest.approx((2 / 3, 2.0, 2 / 3, 2 / 3))
    assert len(warnings) == 1 and "loss_weight" in warnings[0] and "weigh 1" in warnings[0]
