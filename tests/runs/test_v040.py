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
from platoon.components import admission_set, sampler_set
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


def test_the_dispatch_state_reads_with_040_sampler_classes():
    rows = [json.loads(line) for line in (RUN / "checkpoints.jsonl").read_text().splitlines()]
    state = read_v040_dispatch(RUN, rows[-1])
    # the sampler runtime takes 0.4.0's class paths as its own (and writes them: tests/runs/test_kept.py)
    assert state["samplers"]["run"]["class"] == "platoon.train.samplers:WeightedSampler"
    assert state["samplers"]["entries"]["easy"]["class"] == "platoon.train.samplers:PassRateSampler"
    assert state["policy_version"] == 2
    groups = read_v040_kept(RUN, state["kept"])
    assert [g["key"] for g in groups] == state["kept"]["groups"]
    assert {g["output"]["type"] for g in groups} <= {"group", "datums", "failed"}


def fixture_dispatcher(start):
    """A dispatcher of this platoon for the fixture's config (config.resolved.yaml: entries easy, 6 tasks,
    pass_rate, and hard, 4 tasks, uniform; weight: tasks; group size 2; batch 4; max_staleness 1; 4 steps)."""
    from platoon.policy.dispatcher import DispatchConfig, Dispatcher
    from platoon.policy.pool import EntrySpec, TaskPool
    from platoon.policy.recorder import StatsRecorder

    entries = [EntrySpec("easy", [f"e{i}" for i in range(6)], 2, weight=None),
               EntrySpec("hard", [f"h{i}" for i in range(4)], 2, weight=None)]
    pool = TaskPool.from_entries(entries)
    assert pool.task_ids[0] == "easy::e0"  # the pool names a mixture's tasks as 0.4.0 did
    config = DispatchConfig(batch_size=4, steps=4, max_concurrent_rollouts=8, max_staleness=1)
    samplers = sampler_set(pool, run_sampler="auto", run_options={}, entry_samplers={"easy": ("pass_rate", {})},
                          batch_size=4, seed=0)
    recorder = StatsRecorder.for_pool(pool, start=start)
    recorder.add_listener(samplers.observe)
    rules = admission_set(run_rule="all", run_options={}, entry_rules={}, entries=pool.entries, batch_size=4)
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


def test_this_platoons_old_sampler_class_paths_restore_too():
    d = fixture_dispatcher(start=2)
    saved = d.samplers.state_dict()
    assert saved["entries"]["easy"]["class"] == "platoon.train.samplers:PassRateSampler"
    saved["entries"]["easy"]["class"] = "platoon.policy.samplers.pass_rate:PassRateSampler"
    saved["entries"]["easy"]["decisions"] = 5
    assert fixture_dispatcher(start=2).samplers.restore(saved, 12) == []


def test_with_the_same_tokenizer_the_kept_groups_train_first():
    from platoon.policy.dispatch_state import resume

    taken = v040_resume(RUN, same_tokenizer=True, vocab_size=1000)
    assert (taken.kept, taken.reissued) == (3, 0) and taken.warnings == []
    d = fixture_dispatcher(start=2)
    d.recorder.load_snapshot(taken.snapshot)
    assert resume(d, taken.state, step=2) == []
    assert [g.key for g in d.queue] == [(1, 7), (1, 8), (1, 9)]
    reissued = [e["reissues"] for e in d.take_events() if e["event"] == "draw"]
    assert reissued == [[1, 11]]  # only the draw that was running is drawn again
    script = Script(d).run()
    assert d.step == 4 and script.steps


def test_the_tokenizer_matches_by_name_or_by_the_checkpoints_origin(tmp_path):
    from platoon.runs.v040 import tokenizer_matches, v040_model_name

    assert v040_model_name(RUN) == "Qwen/Qwen3-4B"
    assert tokenizer_matches("Qwen/Qwen3-4B", "Qwen/Qwen3-4B")
    assert not tokenizer_matches("Qwen/Qwen3-4B", "tiny")
    (tmp_path / "config.json").write_text(json.dumps({"_name_or_path": "Qwen/Qwen3-4B"}))
    assert tokenizer_matches("Qwen/Qwen3-4B", str(tmp_path))
    assert not tokenizer_matches("Qwen/Qwen3-8B", str(tmp_path))


class RenamedTasks:
    """An environment whose training tasks go by the fixture's environment ids (``e0`` ... of entry easy): the
    fixture's 0.4.0 run listed them with a dataset loader of its own (``dataset_loader: fixture_tasks:easy``, which
    this project ignores), where platoon-number-search's own ids read ``n4-g2-t1``. Only that part is renamed: the
    pool adds the ``easy::`` of a mixture's ids itself."""

    def __init__(self, env, names):
        self.env, self.names = env, names

    def __getattr__(self, name):
        return getattr(self.env, name)

    def task_ids(self, split):
        return list(self.names) if split == "train" else self.env.task_ids(split)

    def task(self, task_id):
        return self.env.task(self.names.get(task_id, task_id))


def fixture_envs():
    from platoon.live.launch.build import build_environments
    from platoon.live.launch.command import load_train_config

    cfg = load_train_config(RUN / "config.resolved.yaml", ["train.model_name=tiny"], out=RUN)
    envs = build_environments(cfg)
    out = {}
    for label, prefix, n in (("easy", "e", 6), ("hard", "h", 4)):
        ids = envs[label].task_ids("train")
        out[label] = RenamedTasks(envs[label], {f"{prefix}{i}": ids[i] for i in range(n)})
    return out


def test_train_resumes_a_040_run_for_two_more_steps(run_copy):
    from platoon.live.launch.command import train

    before = {p.relative_to(run_copy): p.read_bytes() for p in run_copy.rglob("*") if p.is_file()}
    train(None, ["train.model_name=tiny", "train.renderer_name=role_colon"], resume=run_copy, progress=False,
          envs=fixture_envs())
    # 0.4.0's files are as they were; its logs only grew; its lock.json keeps every key and value
    for rel, data in before.items():
        now = (run_copy / rel).read_bytes()
        if rel.name in ("checkpoints.jsonl", "events.jsonl"):
            assert now.startswith(data), rel
        elif rel.name == "lock.json":
            lock = json.loads(now)
            assert json.loads(data).items() <= lock.items() and lock["runtime"] == "live"
            assert not lock.get("sampling_changed")  # the pool's ids are 0.4.0's: same tasks, same fingerprint
        else:
            assert now == data, rel
    events = [json.loads(line) for line in (run_copy / "tasks" / "events.jsonl").read_text().splitlines()]
    ours = events[len(before[Path("tasks/events.jsonl")].splitlines()):]
    reissues = [tuple(e["reissues"]) for e in ours if e["event"] == "draw" and "reissues" in e]
    assert reissues == [(1, 7), (1, 8), (1, 9), (1, 11)]  # tiny reads other token ids: the kept groups too
    assert all(e["start"] == 2 for e in ours if "start" in e)
    fixture_ids = {f"easy::e{i}" for i in range(6)} | {f"hard::h{i}" for i in range(4)}
    assert {e["task_id"] for e in ours if e["event"] in ("draw", "settle")} <= fixture_ids
    rows = [json.loads(line) for line in (run_copy / "checkpoints.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 4 and rows[-1]["start"] == 2
    from platoon.runs.checkpoints import read_checkpoint_file

    state = read_checkpoint_file(run_copy, rows[-1], "tasks/dispatch-000004.json")
    # the samplers went on from 0.4.0's counts: 12 decisions then, 4 x 2 more positions after
    assert state["samplers"]["run"]["decisions"] == state["next_position"] >= 16
    assert state["samplers"]["run"]["class"] == "platoon.train.samplers:WeightedSampler"
    metrics = [json.loads(line) for line in (run_copy / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "train/reward_mean" in m] == [2, 3]
    # the directory is a run of this platoon now: its own resume finds it finished
    assert not is_v040_run(run_copy)
    assert invoke(["train", "--resume", str(run_copy)]).exit_code == 0


def test_a_040_resume_takes_only_the_model_keys_beside_it(run_copy):
    result = invoke(["train", "--resume", str(run_copy), "--set", "train.model_name=tiny",
                     "--set", "train.batch_size=2"])
    assert result.exit_code == 64
    assert "takes only train.model_name and train.renderer_name" in result.output
    assert "train.batch_size=2" in result.output
    result = invoke(["train", "--resume", str(run_copy)])  # 0.4.0's model is on Tinker, not here
    assert result.exit_code == 78 and "train.model_name" in result.output


def test_simulate_does_not_resume_a_040_run(run_copy):
    result = invoke(["simulate", "--resume", str(run_copy)])
    assert result.exit_code == 64 and "platoon train --resume" in result.output
