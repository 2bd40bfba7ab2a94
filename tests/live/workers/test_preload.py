"""The rollout workers' fork server: what it imports ahead, what screening leaves out and why, and what a forked
worker inherits."""

from __future__ import annotations

import asyncio
import json
import textwrap

import pytest
from live_harness import FakeService
from workers_harness import ProbeWorkflow

from platoon.live.rollouts.workflow import GroupRow
from platoon.live.workers import EnvSpec, PreloadPlan, WorkerPool, preload_plan
from platoon.live.workers.screen import screen

pytestmark = pytest.mark.live

MODULES = {
    "starts_a_thread": """
        import threading, time
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    """,
    "opens_a_socket": """
        import socket
        SOCK = socket.socket()
    """,
    "opens_a_file": """
        import os, tempfile
        FILE = open(os.path.join(tempfile.gettempdir(), "platoon-screen-test.log"), "w")
    """,
    "opens_an_event_loop": """
        import asyncio
        LOOP = asyncio.new_event_loop()
    """,
    "seeds_numpy": """
        import numpy
        RNG = numpy.random.default_rng()
    """,
    "sets_a_variable": """
        import os, json
        os.environ["PLATOON_TEST_PRELOADED"] = "yes"
    """,
}


@pytest.fixture
def modules(tmp_path, monkeypatch):
    for name, text in MODULES.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{__import__('os').environ.get('PYTHONPATH', '')}")
    return tmp_path


def play_one(workflow: ProbeWorkflow, workers: WorkerPool, task: str = "t", entry: str | None = None) -> None:
    """One episode of ``workflow``'s task in ``workers``, which close after it (whatever it raised)."""
    workflow.rollout_workers = workers

    async def run():
        try:
            return await workflow.arun_episode(GroupRow((1, 0), task, entry, 1))
        finally:
            await workers.aclose()

    asyncio.run(run())


def test_screening_names_what_each_unsafe_module_left(modules):
    verdicts = screen([{"kind": "module", "name": m} for m in [*MODULES, "no_such_module", "json"]])
    left = {name: v["left"] for name, v in verdicts.items()}
    assert left["starts_a_thread"] == ["started 1 thread(s)"]
    assert left["opens_a_socket"] == ["left 1 socket(s) open"]
    assert left["opens_a_file"][0].startswith("left 1 file(s) open (") and "platoon-screen-test.log" in \
        left["opens_a_file"][0]
    assert "left 1 event loop (epoll)(s) open" in left["opens_an_event_loop"]
    assert left["seeds_numpy"] == ["seeded a numpy generator from the OS"]
    assert left["sets_a_variable"] == [] and left["json"] == []
    assert left["no_such_module"][0].startswith("failed: ModuleNotFoundError")


def test_the_fork_server_leaves_out_what_is_unsafe_and_its_workers_inherit_the_rest(modules, tmp_path):
    plan = PreloadPlan(("starts_a_thread", "opens_a_socket", "sets_a_variable"))
    workers = WorkerPool(plan=plan, scratch=tmp_path / "scratch")
    said = []
    workflow = ProbeWorkflow(["starts_a_thread", "opens_a_socket", "sets_a_variable"], envs={},
                             service=FakeService(), warn=said.append)
    play_one(workflow, workers)
    warnings = [m for level, m in workers.messages if level == "warning"]
    assert warnings == [
        "the rollout workers' fork server leaves out module starts_a_thread: importing it started 1 thread(s), "
        "which is not fork-safe; each worker imports it itself",
        "the rollout workers' fork server leaves out module opens_a_socket: importing it left 1 socket(s) open, "
        "which is not fork-safe; each worker imports it itself",
    ]
    (info,) = [m for level, m in workers.messages if level == "info"]
    assert info.startswith("rollout worker fork server ") and "imported the worker's stack and " in info
    seen = json.loads(said[0])
    assert seen["env"] == "yes"  # set by a preloaded import, so set in the worker
    assert seen["imported"] == ["sets_a_variable"]  # the unsafe ones were not imported ahead


def test_under_env_isolation_the_fork_server_imports_nothing(tmp_path):
    workers = WorkerPool(plan=None, scratch=tmp_path / "scratch")
    said = []
    workflow = ProbeWorkflow(["platoon.live.workers.screen", "torch"], envs={}, service=FakeService(),
                             warn=said.append)
    play_one(workflow, workers)
    (info,) = [m for level, m in workers.messages if level == "info"]
    assert info.startswith("rollout worker fork server ") and " imported nothing in " in info
    assert "torch" in json.loads(said[0])["imported"]  # the worker's own import of the workflow's stack


def test_the_fork_server_builds_the_entries_environments_and_lists_their_tasks(tmp_path):
    from platoon.live.envs import NumberSearch

    specs = {"e": EnvSpec("platoon-number-search", {"ranges": [4, 8]}, None, ("train", "val"))}
    env = NumberSearch(ranges=[4, 8])
    plan = preload_plan(specs, {"e": env}, ["json.decoder"])
    assert plan.modules == ("platoon.live.envs.number_search", "json.decoder")
    workers = WorkerPool(plan=plan, env_specs=specs, scratch=tmp_path / "scratch")
    said = []
    workflow = ProbeWorkflow(["json.decoder"], envs={"e": env}, service=FakeService(), warn=said.append)
    play_one(workflow, workers, "n4-g3-t1", "e")
    seen = json.loads(said[0])
    assert seen["built"] == ["e"] and seen["imported"] == ["json.decoder"]


def test_a_fork_server_whose_imports_started_cuda_refuses_to_serve(tmp_path, monkeypatch):
    from platoon.live.workers.preload import ForkServerRefused

    # what torch.cuda.init() leaves on a GPU node, set by hand (these machines have none)
    (tmp_path / "starts_cuda.py").write_text("import torch\ntorch.cuda._initialized = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    workers = WorkerPool(plan=PreloadPlan(("starts_cuda",)), scratch=tmp_path / "scratch")
    workflow = ProbeWorkflow(envs={}, service=FakeService(), warn=lambda message: None)
    with pytest.raises(ForkServerRefused, match="refuses to serve: what it imported or built ahead started the CUDA"):
        play_one(workflow, workers)
    import multiprocessing.forkserver

    assert multiprocessing.forkserver._forkserver._forkserver_pid is None  # stopped: it forks no one
    assert not any(level == "info" for level, _ in workers.messages)  # no first line: it never served
