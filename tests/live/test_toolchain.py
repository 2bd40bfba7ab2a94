"""Toolchain staging: the stamp, the manifest check, ``.stale`` copies set aside, a cache that cannot be written."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from platoon.live.agent import toolchain as tcm
from platoon.live.agent.toolchain import (
    Staging,
    Toolchain,
    ToolchainError,
    cache_dir,
    run_toolchains,
    stage,
    tree_hash,
)


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch):
    """Each test is a fresh process: nothing served or warned yet."""
    monkeypatch.setattr(tcm, "_SERVED", set())
    monkeypatch.setattr(tcm, "_WARNED_UNCHECKED", set())
    monkeypatch.setattr(tcm, "_MANIFESTS", {})


def make_source(root):
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tool").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "bin" / "tool", 0o755)
    (root / "lib.txt").write_text("library\n")
    return root


def new_process():
    tcm._SERVED.clear()
    tcm._WARNED_UNCHECKED.clear()


def test_a_first_staging_copies_and_stamps(tmp_path):
    src = make_source(tmp_path / "src")
    tc = Toolchain("agent", src)
    got = stage(tc, cache=tmp_path / "cache", session="boot=b job=1")
    digest = tree_hash(src)
    assert got.outcome == "copied"
    assert got.path == tmp_path / "cache" / f"agent-{digest.hash[:16]}"
    assert tree_hash(got.path).hash == digest.hash
    stamp = json.loads((tmp_path / "cache" / f".{got.path.name}.staged").read_text())
    assert stamp["tree_hash"] == digest.hash and stamp["sessions"] == ["boot=b job=1"]
    assert (stamp["files"], stamp["bytes"]) == (2, digest.bytes)
    assert stage(tc, cache=tmp_path / "cache", session="boot=b job=1").outcome == "current"


def test_a_later_job_hashes_the_kept_copy_and_keeps_it_when_it_matches(tmp_path):
    src = make_source(tmp_path / "src")
    tc = Toolchain("agent", src)
    stage(tc, cache=tmp_path / "cache", session="job=1")
    new_process()
    assert stage(tc, cache=tmp_path / "cache", session="job=1").outcome == "current"  # the stamp lists this job
    new_process()
    got = stage(tc, cache=tmp_path / "cache", session="job=2")
    assert got.outcome == "verified"
    stamp = json.loads((tmp_path / "cache" / f".{got.path.name}.staged").read_text())
    assert stamp["sessions"] == ["job=1", "job=2"]


def test_a_copy_that_no_longer_matches_is_copied_again_and_the_old_one_set_aside(tmp_path):
    src = make_source(tmp_path / "src")
    tc = Toolchain("agent", src)
    cache = tmp_path / "cache"
    first = stage(tc, cache=cache, session="job=1")
    (first.path / "lib.txt").write_text("tampered\n")
    new_process()
    warnings = []
    got = stage(tc, cache=cache, session="job=2", warn=warnings.append)
    assert got.outcome == "replaced" and got.path == first.path
    assert tree_hash(got.path).hash == tree_hash(src).hash
    assert got.stale is not None and got.stale.name.startswith(f".{first.path.name}.") and got.stale.name.endswith(".stale")
    assert (got.stale / "lib.txt").read_text() == "tampered\n"  # set aside whole, never removed
    assert len(warnings) == 1 and "no longer matched its manifest" in warnings[0]
    new_process()
    assert stage(tc, cache=cache, session="job=3").outcome == "verified"
    assert got.stale.exists()


def test_a_copy_without_a_stamp_is_checked_once(tmp_path):
    src = make_source(tmp_path / "src")
    tc = Toolchain("agent", src)
    first = stage(tc, cache=tmp_path / "cache", session="job=1")
    (tmp_path / "cache" / f".{first.path.name}.staged").unlink()  # as an earlier platoon left it
    new_process()
    assert stage(tc, cache=tmp_path / "cache", session="job=1").outcome == "verified"
    new_process()
    assert stage(tc, cache=tmp_path / "cache", session="job=1").outcome == "current"


def test_leftover_partials_and_half_written_stamps_are_removed(tmp_path):
    src = make_source(tmp_path / "src")
    tc = Toolchain("agent", src)
    cache = tmp_path / "cache"
    name = f"agent-{tree_hash(src).hash[:16]}"
    cache.mkdir()
    (cache / f".{name}.dead.partial").mkdir()
    (cache / f".{name}.staged.beef.tmp").write_text("{")
    assert stage(tc, cache=cache, session="job=1").outcome == "copied"
    assert sorted(p.name for p in cache.iterdir()) == sorted([name, f".{name}.staged", f".{name}.lock"])


def test_a_fresh_copy_that_does_not_match_the_manifest_is_an_error_naming_both(tmp_path):
    src = make_source(tmp_path / "src")
    with pytest.raises(ToolchainError, match=f"{tree_hash(src).hash}, not its manifest's {'0' * 64}"):
        stage(Toolchain("agent", src, tree_hash="0" * 64), cache=tmp_path / "cache", session="job=1")
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [f".agent-{'0' * 16}.lock"]


def test_a_toolchain_without_a_tree_hash_is_current_once_its_copy_exists(tmp_path):
    src = make_source(tmp_path / "src")
    tc = Toolchain("agent", src, tree_hash="")
    got = stage(tc, cache=tmp_path / "cache", session="job=1")
    assert got.outcome == "copied" and got.path.name == "agent"
    (got.path / "lib.txt").write_text("changed\n")
    new_process()
    assert stage(tc, cache=tmp_path / "cache", session="job=2").outcome == "current"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod")
def test_a_read_only_cache_is_used_unchecked_with_one_warning(tmp_path):
    src = make_source(tmp_path / "src")
    tc = Toolchain("agent", src)
    cache = tmp_path / "cache"
    copy = stage(tc, cache=cache, session="job=1").path
    (copy / "lib.txt").chmod(0o644)
    (copy / "lib.txt").write_text("tampered\n")
    (cache / f".{copy.name}.lock").unlink()
    os.chmod(cache, 0o555)
    try:
        new_process()
        warnings = []
        got = stage(tc, cache=cache, session="job=2", warn=warnings.append)
        assert got.outcome == "unchecked" and got.path == copy
        assert (copy / "lib.txt").read_text() == "tampered\n"  # nothing replaced, nothing recorded
        assert stage(tc, cache=cache, session="job=2", warn=warnings.append).outcome == "current"
        assert len(warnings) == 1 and "used unchecked" in warnings[0]
        with pytest.raises(ToolchainError, match="cannot stage toolchain other"):
            stage(Toolchain("other", src), cache=cache, session="job=2")
    finally:
        os.chmod(cache, 0o755)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod")
def test_a_cache_whose_stamp_cannot_be_written_is_used_unchecked(tmp_path):
    # the lock file opens (it is there and writable) but no new file can be made in the directory
    src = make_source(tmp_path / "src")
    tc = Toolchain("agent", src)
    cache = tmp_path / "cache"
    copy = stage(tc, cache=cache, session="job=1").path
    os.chmod(cache, 0o555)
    try:
        new_process()
        warnings = []
        assert stage(tc, cache=cache, session="job=2", warn=warnings.append).outcome == "unchecked"
        assert "cannot record a check" in warnings[0]
        assert json.loads((cache / f".{copy.name}.staged").read_text())["sessions"] == ["job=1"]
    finally:
        os.chmod(cache, 0o755)


def test_the_cache_and_the_session_come_from_the_environment():
    uid = os.getuid()
    assert cache_dir({"PLATOON_TOOLCHAIN_CACHE": "/keep"}) == tcm.Path("/keep")
    assert cache_dir({"SLURM_TMPDIR": "/s", "TMPDIR": "/t"}) == tcm.Path(f"/s/platoon-toolchains-{uid}")
    assert cache_dir({}) == tcm.Path(f"/tmp/platoon-toolchains-{uid}")
    assert tcm.session_id({"SLURM_JOB_ID": "7", "JOB_ID": "9"}).endswith(" job=7")


def test_environments_declare_their_toolchains(tmp_path):
    a, b = Toolchain("a", tmp_path), Toolchain("b", tmp_path)

    class Env:
        def __init__(self, *tcs):
            self.tcs = tcs

        def toolchains(self):
            return self.tcs

    assert run_toolchains([Env(a), object(), Env(a, b)]) == [a, b]
    with pytest.raises(ValueError, match="different toolchains named 'a'"):
        run_toolchains([Env(a), Env(Toolchain("a", tmp_path / "x"))])


def test_staging_in_the_background_is_waited_for(tmp_path):
    src = make_source(tmp_path / "src")
    logged = []
    staging = Staging([Toolchain("agent", src)], log=lambda lv, m: logged.append((lv, m)), cache=tmp_path / "c")

    async def main():
        return await staging.start().wait(timeout_s=30, poll_s=0.01)

    assert asyncio.run(main()) is True
    assert [s.outcome for s in staging.results] == ["copied"]
    assert any("toolchains staged: agent (copied)" in m for lv, m in logged if lv == "info")


def test_a_wait_for_staging_gives_up_after_its_timeout(tmp_path):
    staging = Staging([Toolchain("agent", tmp_path)])
    logged = []
    staging.log = lambda lv, m: logged.append((lv, m))  # never started: never done

    async def main():
        return await staging.wait(timeout_s=0.05, poll_s=0.01)

    assert asyncio.run(main()) is False
    assert "not done after 0.05 s" in logged[0][1]


def refuse(monkeypatch, match, err):
    """Opening a path whose name contains ``match`` fails with ``err`` (a full disk, another user's file)."""
    real = open

    def fake(path, *args, **kwargs):
        if match in str(path):
            raise OSError(err, os.strerror(err))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(tcm, "open", fake, raising=False)


def test_a_full_cache_is_used_unchecked(tmp_path, monkeypatch):
    import errno

    src = make_source(tmp_path / "src")
    tc = Toolchain("agent", src)
    copy = stage(tc, cache=tmp_path / "cache", session="job=1").path
    new_process()
    refuse(monkeypatch, ".platoon-probe.", errno.ENOSPC)
    warnings = []
    assert stage(tc, cache=tmp_path / "cache", session="job=2", warn=warnings.append).outcome == "unchecked"
    assert "the disk is full" in warnings[0] and str(copy) in warnings[0]


def test_another_users_cache_is_used_unchecked(tmp_path, monkeypatch):
    import errno

    src = make_source(tmp_path / "src")
    tc = Toolchain("agent", src)
    stage(tc, cache=tmp_path / "cache", session="job=1")
    new_process()
    refuse(monkeypatch, ".lock", errno.EACCES)
    warnings = []
    assert stage(tc, cache=tmp_path / "cache", session="job=2", warn=warnings.append).outcome == "unchecked"
    assert "lock file cannot be opened" in warnings[0]


TOOLED_ENV = '''
import os
from pathlib import Path
from platoon.live.envs.number_search import NumberSearch
from platoon.live.agent.toolchain import Toolchain


class Tooled(NumberSearch):
    def toolchains(self):
        return [Toolchain("agent", Path(os.environ["TOOLED_SOURCE"]))]
'''


def tooled_env(tmp_path, monkeypatch):
    """``tooled_env:Tooled`` importable, its toolchain's source under ``tmp_path/src`` and the cache under
    ``tmp_path/cache``; returns the path the test writes its config to."""
    (tmp_path / "tooled_env.py").write_text(TOOLED_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TOOLED_SOURCE", str(make_source(tmp_path / "src")))
    monkeypatch.setenv("PLATOON_TOOLCHAIN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "run.yaml"


def test_platoon_prestage_stages_a_configs_toolchains(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from platoon.cli import app

    config = tooled_env(tmp_path, monkeypatch)
    config.write_text("train:\n  model_name: tiny\n  renderer_name: role_colon\n  max_training_steps: 2\n"
                      "environments:\n  - name: ns\n    env: tooled_env:Tooled\n")
    result = CliRunner().invoke(app, ["prestage", str(config)])
    assert result.exit_code == 0, result.output
    assert f"agent: copied at {tmp_path / 'cache'}/agent-" in result.output
    new_process()
    assert "agent: current at" in CliRunner().invoke(app, ["prestage", str(config)]).output  # same job: current
    config.write_text(config.read_text().replace("tooled_env:Tooled", "platoon-number-search"))
    assert "no toolchain to stage" in CliRunner().invoke(app, ["prestage", str(config)]).output


def test_no_rollout_and_no_evaluation_starts_before_staging_is_done():
    from live_harness import (
        FakeTrainer,
        Outcome,
        ScriptedWorkflow,
        SleepyService,
        dispatch_harness,
        live_runtime,
        run_virtual,
    )

    from platoon.policy.driver import Schedule

    class SlowStaging:
        async def wait(self):
            await asyncio.sleep(5.0)
            waited.append(asyncio.get_running_loop().time())

    waited, evaluated = [], []
    d = dispatch_harness.build(tasks=4, group_size=2, batch_size=2, steps=1, permits=4)
    wf = ScriptedWorkflow(lambda row: Outcome(1.0, reward=float(row.member % 2)))
    runtime = live_runtime(d, wf, FakeTrainer(), SleepyService(), staging=SlowStaging(),
                           schedule=Schedule(eval_every=1, eval_at_start=True),
                           evaluate=lambda: evaluated.append(runtime.now()) or {"eval/pass@1": 0.0})
    run_virtual(runtime.run())
    assert waited == [5.0]  # once
    assert min(t for t, what, _, _ in wf.log if what == "start") == 5.0
    assert evaluated and min(evaluated) >= 5.0


def test_what_staging_logs_before_a_logger_is_attached_is_kept_for_it(tmp_path):
    staging = Staging([Toolchain("agent", tmp_path / "missing")], cache=tmp_path / "c").start()
    assert staging.wait_blocking(30)
    logged = []
    staging.attach(lambda lv, m: logged.append((lv, m)))
    assert len(logged) == 1 and logged[0][0] == "warning" and "toolchain staging failed" in logged[0][1]


def test_platoon_train_stages_its_environments_toolchains(tmp_path, monkeypatch):
    from test_resume import fake_service

    from platoon.live.launch import command

    config = tooled_env(tmp_path, monkeypatch)
    config.write_text("train:\n  model_name: tiny\n  renderer_name: role_colon\n  max_training_steps: 1\n"
                      "  batch_size: 2\nmodel:\n  d_model: 16\n  n_layers: 1\n"
                      "environments:\n  - name: ns\n    env: tooled_env:Tooled\n    service_kwargs: {ranges: [4]}\n"
                      "    workflow_config: {group_size: 2}\n")
    command.train(config, out=tmp_path / "run", progress=False, service_factory=fake_service, eval_episodes=4)
    (copy,) = [p for p in (tmp_path / "cache").iterdir() if p.name.startswith("agent-")]
    stamp = json.loads((tmp_path / "cache" / f".{copy.name}.staged").read_text())
    assert stamp["tree_hash"] == tree_hash(tmp_path / "src").hash and len(stamp["sessions"]) == 1
