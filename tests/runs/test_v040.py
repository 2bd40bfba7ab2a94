"""Run directories of platoon 0.4.0, read as they are and resumed from (docs/run-directory.md, "Run directories of
platoon 0.4.0"). The fixture tests/fixtures/v040/run was written by platoon 0.4.0's own modules (its README says
how); run.tasks-export.csv and run.tasks-show.txt are 0.4.0's ``platoon tasks export``/``show`` of it."""

import json
import shutil
import sys
from pathlib import Path

import pytest

from platoon.analysis import load_run
from platoon.cli import app
from platoon.runs.checkpoints import CheckpointError
from platoon.runs.v040 import (
    is_v040_run,
    latest_v040_snapshot,
    read_v040_dispatch,
    read_v040_kept,
    v040_resume,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "policy"))
from dispatch_harness import Script  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "v040"
RUN = FIXTURES / "run"


@pytest.fixture
def run_copy(tmp_path):
    target = tmp_path / "run"
    shutil.copytree(RUN, target)
    return target


def invoke(args):
    from typer.testing import CliRunner

    return CliRunner().invoke(app, args)


def test_the_layout_is_told_apart(tmp_path):
    assert is_v040_run(RUN)
    assert not is_v040_run(tmp_path)


def test_tasks_export_is_what_040_exported(run_copy, tmp_path):
    out = tmp_path / "tasks.csv"
    result = invoke(["tasks", "export", str(run_copy), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == (FIXTURES / "run.tasks-export.csv").read_text()


def test_tasks_show_is_what_040_showed(run_copy):
    result = invoke(["tasks", "show", str(run_copy)])
    assert result.exit_code == 0, result.output
    expected = (FIXTURES / "run.tasks-show.txt").read_text().replace("tests/fixtures/v040/run", str(run_copy))
    assert result.stdout == expected


def test_a_changed_snapshot_is_passed_over_with_a_note(run_copy):
    (run_copy / "tasks" / "state-s1-000002.json").write_text("{}\n")
    found = latest_v040_snapshot(run_copy)
    assert found.row["name"] == "000001"
    assert found.passed_over == ["passed over checkpoint 000002: tasks/state-s1-000002.json: checksum mismatch "
                                 "(not the SHA-256 its checkpoint recorded)"]
    for name in ("state-s1-000001.json", "state-s1-recovery-000000.json"):
        (run_copy / "tasks" / name).unlink()
    with pytest.raises(CheckpointError, match="no checkpoint names a statistics snapshot that reads back"):
        latest_v040_snapshot(run_copy)
    assert invoke(["tasks", "show", str(run_copy)]).exit_code == 1


def test_load_run_reads_events_and_checkpoints():
    run = load_run(RUN)
    assert run.metrics.empty  # 0.4.0 logs its metrics to W&B and the console only
    assert list(run.checkpoints["step"]) == [0, 1, 2]
    assert list(run.checkpoints["name"]) == ["recovery-000000", "000001", "000002"]
    draws = run.events[run.events.event == "draw"]
    assert set(draws.sampler) == {"pass_rate@easy", "uniform@hard"}
    assert run.tasks.draws.sum() == len(draws)


def test_report_reads_a_040_run(run_copy, tmp_path):
    result = invoke(["report", str(run_copy), "--out", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    assert "| steps | 0 |" in (tmp_path / "report" / "summary.md").read_text()


def test_the_dispatch_state_maps_040_sampler_classes():
    rows = [json.loads(line) for line in (RUN / "checkpoints.jsonl").read_text().splitlines()]
    state = read_v040_dispatch(RUN, rows[-1])
    assert state["samplers"]["run"]["class"] == "platoon.policy.samplers.weighted:WeightedSampler"
    assert state["samplers"]["entries"]["easy"]["class"] == "platoon.policy.samplers.pass_rate:PassRateSampler"
    assert state["policy_version"] == 2
    groups = read_v040_kept(RUN, state["kept"])
    assert [g["key"] for g in groups] == state["kept"]["groups"]
    assert {g["output"]["type"] for g in groups} <= {"group", "datums", "failed"}


def fixture_dispatcher(start):
    """A dispatcher of this platoon for the fixture's config (config.resolved.yaml: entries easy, 6 tasks,
    pass_rate, and hard, 4 tasks, uniform; weight: tasks; group size 2; batch 4; max_staleness 1; 4 steps)."""
    from platoon.policy.admission import AdmissionSet
    from platoon.policy.dispatcher import DispatchConfig, Dispatcher
    from platoon.policy.pool import EntrySpec, TaskPool
    from platoon.policy.recorder import StatsRecorder
    from platoon.policy.samplers.runtime import SamplerSet

    entries = [EntrySpec("easy", [f"easy::e{i}" for i in range(6)], 2, weight=None),
               EntrySpec("hard", [f"hard::h{i}" for i in range(4)], 2, weight=None)]
    pool = TaskPool.from_entries(entries)
    config = DispatchConfig(batch_size=4, steps=4, max_concurrent_rollouts=8, max_staleness=1)
    samplers = SamplerSet(pool, run_sampler="auto", run_options={}, entry_samplers={"easy": ("pass_rate", {})},
                          batch_size=4, seed=0)
    recorder = StatsRecorder.for_pool(pool, start=start)
    recorder.add_listener(samplers.observe)
    rules = AdmissionSet(run_rule="all", run_options={}, entry_rules={}, entries=pool.entries, batch_size=4)
    return Dispatcher(config, pool, samplers, recorder, rules, rolling=True, start=start)


def test_a_resume_goes_on_from_the_040_dispatch_state():
    from platoon.policy.dispatch_state import resume, state_dict

    taken = v040_resume(RUN)
    assert taken.row["name"] == "000002"
    saved = taken.state
    assert any("kept group(s) hold platoon 0.4.0's Tinker datums" in w for w in taken.warnings)
    d = fixture_dispatcher(start=2)  # 0.4.0 numbers the next start after the largest its rows name (1)
    d.recorder.load_snapshot(taken.snapshot)
    warnings = resume(d, saved, step=taken.row["batch"])
    assert warnings == []
    ours = state_dict(d)
    # the samplers stand where 0.4.0 left them: counts and states as saved
    for level in ("run",):
        assert ours["samplers"][level]["decisions"] == saved["samplers"][level]["decisions"] == 12
    for entry in ("easy", "hard"):
        assert ours["samplers"]["entries"][entry]["decisions"] == saved["samplers"]["entries"][entry]["decisions"]
    assert ours["samplers"]["entries"]["easy"]["state"] == saved["samplers"]["entries"]["easy"]["state"]
    assert ours["next_position"] == saved["next_position"] == 12
    assert d.version == 2
    # every outstanding draw, the kept ones too (their datums are another model's), is drawn again in (start, seq)
    # order at its old position, as a draw of start 2 before any new position
    events = d.take_events()
    reissues = [e for e in events if e["event"] == "draw"]
    assert [tuple(e["reissues"]) for e in reissues] == sorted(tuple(o[:2]) for o in saved["outstanding"])
    assert [(e["task_id"], e["position"]) for e in reissues] == [(o[2], o[3]) for o in sorted(saved["outstanding"])]
    assert all(e["start"] == 2 and e["reason"] == "reissue" for e in reissues)
    assert [e["sampler"] for e in reissues] == [by for *_, by in sorted(saved["drawn"])]
    # and the run goes on to the end of its plan: positions 12.. are new draws of the same samplers
    script = Script(d).run()
    new = [e for e in d.take_events() if e["event"] == "draw" and "reissues" not in e]
    assert new and min(e["position"] for e in new) == 12
    assert d.step == 4 and script.steps
