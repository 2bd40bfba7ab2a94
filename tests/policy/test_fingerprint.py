"""The sampling fingerprint: unchanged for the same config, one line per change that alters draws."""

from dispatch_harness import build

from platoon.policy.dispatch_state import sampling_changes, state_dict
from platoon.policy.pool import EntrySpec


def entries(seed=0, tasks=6):
    return [EntrySpec("a", [f"a{i}" for i in range(tasks)], 4, seed=seed), EntrySpec("b", ["b0", "b1"], 4, weight=2.0)]


def test_the_same_config_changes_nothing():
    state = state_dict(build(entries=entries()))
    assert "fingerprint" in state
    assert sampling_changes(build(entries=entries()), state) == []


def test_each_change_that_alters_draws_is_named():
    state = state_dict(build(entries=entries()))
    assert sampling_changes(build(entries=entries(seed=1)), state) == ["environments[a].seed: 0 -> 1"]
    assert sampling_changes(build(entries=entries(tasks=7)), state) == ["environments[a]: its training tasks, 6 -> 7"]
    lines = sampling_changes(build(entries=entries(), sampler="pass_rate"), state)
    assert "train.task_sampler: auto -> pass_rate" in lines
    assert sampling_changes(build(entries=entries(), admission="informative"), state) == [
        "environments[a].group_admission: all {} -> informative {'band': None}",
        "environments[b].group_admission: all {} -> informative {'band': None}",
    ]
    three = [*entries(), EntrySpec("c", ["c0"], 4)]
    assert sampling_changes(build(entries=entries()), state_dict(build(entries=three))) == [
        "environments[c] left the run"]
    # a mixture that becomes one entry renames its tasks (a::a0 -> a0, platoon 0.4.0's ids): others, to a resume
    assert sampling_changes(build(entries=entries()[:1]), state) == [
        "environments[b] left the run", "environments[a]: its training tasks, 6 -> 6 (as many, but others)"]


def test_a_state_without_a_fingerprint_reads_as_unchanged():
    assert sampling_changes(build(), {"format": 1}) == []


def test_the_runs_seed_is_named_where_a_sampler_reads_it():
    state = state_dict(build(entries=entries(), sampler="pass_rate"))
    assert sampling_changes(build(entries=entries(), sampler="pass_rate", seed=7), state) == ["train.seed: 0 -> 7"]
    state = state_dict(build(entries=entries()))  # weighted over uniform entries: no decision key is read
    assert "seed" not in state["fingerprint"]
    assert sampling_changes(build(entries=entries(), seed=7), state) == []
