"""Resume by reissue from a dispatch state of format 2 (this release's) and format 1 (0.3's): every position of the
order ends exactly once, what was in flight is drawn again at its old position before any new one, and a state of
an unknown format is refused naming the file."""

import json

import pytest
from dispatch_harness import Script, build

from platoon.policy.dispatch_state import check_format, resume, state_dict

KW = dict(tasks=10, group_size=3, batch_size=3, steps=6, max_staleness=1)
FORMAT_1_KEYS = ("format", "start", "sampler", "next_position", "outstanding", "waiting", "kept")


def interrupted(sampler="auto"):
    first = Script(build(**KW, sampler=sampler)).run(until_steps=2)
    assert first.d.running, "the interruption must catch groups in flight"
    return first, json.loads(json.dumps(state_dict(first.d))), first.d.recorder.snapshot()


def resumed(state, stats, step, sampler="auto"):
    d = build(**KW, sampler=sampler, start=2)
    d.recorder.load_snapshot(stats)
    warnings = resume(d, state, step=step)
    return Script(d).run(), warnings


def positions_ended(*scripts):
    """position -> the fates its draws ended with, over the scripts' event logs."""
    position, ended = {}, {}
    for s in scripts:
        for e in s.events:
            key = (e["start"], e.get("seq"))
            if e["event"] == "draw":
                position[key] = e["position"]
            elif e["event"] == "fate":
                ended.setdefault(position[key], []).append(e["fate"])
    return ended


@pytest.mark.parametrize("fmt", [2, 1])
@pytest.mark.parametrize("sampler", ["auto", "pass_rate"])
def test_resume_goes_on_with_every_position_ending_once(fmt, sampler):
    first, state, stats = interrupted(sampler)
    first.events = first.d.take_events()
    kept = {tuple(k) for k in (state["kept"] or {}).get("groups", [])}
    if fmt == 1:  # 0.3's state: no rows, no sampler states, and here no kept groups (they are drawn again)
        state = {k: state[k] for k in FORMAT_1_KEYS} | {"format": 1, "kept": None}
        kept = set()
    in_flight = sorted(k for k in first.d.outstanding if k not in kept)
    second, _ = resumed(state, stats, first.d.step, sampler)
    second.events = second.d.take_events()
    reissues = [e for e in second.events if e["event"] == "draw" and e["reason"] == "reissue"]
    assert [tuple(e["reissues"]) for e in reissues] == in_flight  # in (start, seq) order, before any new draw
    first_new = next(i for i, e in enumerate(second.events) if e["event"] == "draw" and e["reason"] != "reissue")
    assert all(second.events.index(e) < first_new for e in reissues)
    ended = positions_ended(first, second)
    trained = KW["steps"] * KW["batch_size"]
    assert sorted(p for p, fates in ended.items() if "consumed" in fates or "stale" in fates) == list(range(trained))
    assert all(len(f) == 1 for f in ended.values()), "a position ended twice"
    assert [s.step for s in second.steps] == [2, 3, 4, 5]
    trained_first = [g.key for g in second.steps[0].groups]
    assert kept <= set(trained_first) | {k for st in second.steps for k in (g.key for g in st.stale)}


def test_an_unknown_format_is_refused_naming_the_file():
    with pytest.raises(ValueError, match=r"tasks/dispatch-000004.json: unknown dispatch state format 3"):
        check_format({"format": 3}, "tasks/dispatch-000004.json")
