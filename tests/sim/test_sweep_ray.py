"""``platoon simulate --sweep ... --ray``: a sweep's points as Ray tasks, to the process pool's run directories."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from simkit import differing
from typer.testing import CliRunner

from platoon.cli import app, main
from platoon.runs.shipped import unpack
from platoon.sim.ray_sweep import MISSING, init_options, run_shipped
from platoon.sim.run import run_point_config
from platoon.sim.setup import load_sim_config

runner = CliRunner()
SMALL = ["--preset", "textcraft-synth", "--set", "train.batch_size=4", "--set", "train.max_concurrent_rollouts=32"]
# teardowns that outlast their 60 s wait: every rollout's permit comes back with a warning, which the point sends back
TEARDOWNS = ["--set", "sim.rollout.teardown_s={dist: fixed, value_s: 90}"]
SWEEP = [*SMALL, *TEARDOWNS, "--steps", "2", "--sweep", "train.permit_release=rollout,group"]


def tree(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def warnings(output: str) -> list[str]:
    return sorted(line for line in output.splitlines() if line.startswith("warning: "))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray (pip install 'platoon[ray]')")
def test_a_ray_sweep_writes_the_process_pools_runs(tmp_path):
    """On a local Ray instance, the same run directories, logs, sweep.md and warnings as the process pool's."""
    pool, on_ray = tmp_path / "pool", tmp_path / "ray"
    by_pool = runner.invoke(app, ["simulate", *SWEEP, "--out", str(pool)])
    by_ray = runner.invoke(app, ["simulate", *SWEEP, "--out", str(on_ray), "--ray"])
    assert by_pool.exit_code == 0, by_pool.output
    assert by_ray.exit_code == 0, by_ray.output
    assert tree(on_ray) == tree(pool)
    points = sorted(p.name for p in pool.iterdir() if p.is_dir())
    assert points == ["00-permit_release=rollout", "01-permit_release=group"]
    for name in points:
        assert differing(pool / name, on_ray / name) == []  # the simulator is deterministic: the same logs
        assert (on_ray / name / "tasks/pool.json").read_bytes() == (pool / name / "tasks/pool.json").read_bytes()
    assert (on_ray / "sweep.md").read_text() == (pool / "sweep.md").read_text()
    assert warnings(by_ray.output) == warnings(by_pool.output) != []
    assert "platoon simulate --sweep" in by_ray.output


def test_a_shipped_point_is_the_point_run_in_place(tmp_path):
    """What a Ray task sends back, unpacked, is the run directory a point writes in place (no Ray needed)."""
    cfg = load_sim_config(None, preset="textcraft-synth",
                          overrides=["train.batch_size=4", "train.max_concurrent_rollouts=32",
                                     "train.max_training_steps=2", "train.num_epochs=null",
                                     "sim.rollout.teardown_s={dist: fixed, value_s: 90}"])
    said = run_point_config(cfg, tmp_path / "here" / "00-p")
    sent, packed = run_shipped(cfg, "00-p")
    unpack(packed, tmp_path / "back" / "00-p")
    here, back = tmp_path / "here" / "00-p", tmp_path / "back" / "00-p"
    assert tree(back) == tree(here)
    assert differing(here, back) == []
    assert sent == said != []


def test_without_ray_installed_ray_exits_64(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # ``import ray`` raises ImportError
    monkeypatch.setattr(sys, "argv", ["platoon", "simulate", *SWEEP, "--out", str(tmp_path / "s"), "--ray"])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 64
    assert MISSING in capsys.readouterr().err and "pip install 'platoon[ray]'" in MISSING
    assert not (tmp_path / "s").exists()


def test_ray_needs_a_sweep_and_a_resume_refuses_it(tmp_path):
    result = runner.invoke(app, ["simulate", *SMALL, "--steps", "1", "--out", str(tmp_path / "r"), "--ray"])
    assert result.exit_code == 64 and "give --sweep" in result.output
    result = runner.invoke(app, ["simulate", "--resume", str(tmp_path / "r"), "--ray-address", "auto"])
    assert result.exit_code == 64 and "drop --ray" in result.output
    assert not (tmp_path / "r").exists()


def test_ray_init_options(monkeypatch):
    """A local instance of this machine's CPUs, quiet; a cluster's address (given, or RAY_ADDRESS) as it is."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    local = init_options(None)
    assert local["address"] == "local" and local["num_cpus"] >= 1 and local["include_dashboard"] is False
    assert local["logging_level"] == 30 and local["log_to_driver"] is False
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert init_options(None)["address"] == "10.0.0.1:6379" and "num_cpus" not in init_options(None)
    assert init_options("ray://head:10001")["address"] == "ray://head:10001"


LONG_SWEEP = [*SMALL, "--steps", "60", "--sweep", "train.permit_release=rollout,group"]


def ray_point_workers() -> list[int]:
    """Ray workers running a point now (Ray titles a worker by the task it runs)."""
    import os

    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if cmdline.startswith(b"ray::run_shipped"):
            pids.append(int(pid))
    return pids


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray (pip install 'platoon[ray]')")
def test_a_ray_worker_killed_mid_sweep_has_its_point_run_again_and_the_sweep_ends_whole(tmp_path):
    """SIGKILL of the Ray worker running a point: the point runs again from its start (it wrote only into its
    node's temporary directory), and the sweep ends with every point whole: the same runs as the process pool's."""
    import os
    import signal
    import subprocess
    import time

    pool, on_ray = tmp_path / "pool", tmp_path / "ray"
    assert runner.invoke(app, ["simulate", *LONG_SWEEP, "--out", str(pool)]).exit_code == 0
    proc = subprocess.Popen([sys.executable, "-m", "platoon", "simulate", *LONG_SWEEP, "--out", str(on_ray), "--ray"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline, killed = time.monotonic() + 120, None
    while killed is None and proc.poll() is None and time.monotonic() < deadline:
        if workers := ray_point_workers():
            time.sleep(0.3)  # into the point's run
            os.kill(workers[0], signal.SIGKILL)
            killed = workers[0]
        time.sleep(0.02)
    _, stderr = proc.communicate(timeout=300)
    assert killed is not None, "no Ray worker ran a point"
    assert proc.returncode == 0, stderr[-3000:]
    assert tree(on_ray) == tree(pool)
    for name in sorted(p.name for p in pool.iterdir() if p.is_dir()):
        assert differing(pool / name, on_ray / name) == []


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray (pip install 'platoon[ray]')")
def test_a_sigkilled_ray_sweep_leaves_no_process_of_its_local_instance(tmp_path):
    """The local instance's GCS server, raylet, agents and workers, and the reaper, end once the driver is
    SIGKILLed (Ray alone left its dashboard and runtime-env agents running: ``platoon.reaper``)."""
    import os
    import signal
    import subprocess
    import time

    from process_tree import tree_of, wait_gone

    proc = subprocess.Popen([sys.executable, "-m", "platoon", "simulate", *LONG_SWEEP, "--out", str(tmp_path / "r"),
                             "--ray"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not ray_point_workers() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    started = tree_of(proc.pid)
    assert any("raylet" in cmd for cmd in started.values()), started
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    left, _ = wait_gone(started, within_s=20)
    assert left == [], {pid: started[pid] for pid in left}
