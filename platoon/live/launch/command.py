"""The bodies of ``platoon train``, ``platoon eval`` and ``platoon prestage`` (the CLI parses arguments and maps errors
to exit codes).

- ``train``: a new run of a config (no config: the embedded default) into a new run directory, or ``--resume RUN``
  (``platoon.live.resume``), then on to the planned steps (``--steps`` sets a new total), with a progress bar and a
  line per step (``platoon.live.launch.progress``). The run's writer lock is held from the first look at the directory
  to the end (platoon.runs.writer); a new run that fails before its first step leaves nothing behind.
- ``evaluate``: held-out pass@1, with its 95% interval, of a config's initial policy or a run's last checkpoint.
- ``prestage``: the harness toolchains of a config's environments staged on this node ahead of a run
  (``platoon.live.agent.toolchain``); ``train`` and ``evaluate`` stage them too, and start no rollout before that is
  done.

Errors: a configuration problem raises ``ConfigError`` (exit 78); a misused ``--resume`` raises ``TrainUsageError``
and a run directory another process writes ``RunBusyError`` (exit 64); a run directory that cannot be used raises
``TrainError`` (exit 1) with a message that names it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from platoon.config.errors import ConfigError
from platoon.config.loader import config_from_lock, load_config
from platoon.config.models import RunConfig
from platoon.config.resolve import resolve_components
from platoon.config.steps import run_directory
from platoon.live.agent.toolchain import Staging, run_toolchains
from platoon.live.launch.build import EVAL_EPISODES, LiveRun, build_live, pool_rows
from platoon.live.launch.progress import Console, step_line
from platoon.live.launch.train_config import TrainError, TrainUsageError, load_train_config
from platoon.live.resume import is_v040, resume_run, resume_v040_run
from platoon.live.rollouts.workflow import GroupRolloutWorkflow, workflow_gives_verdicts
from platoon.live.runtime import LiveRuntime
from platoon.live.training.checkpoint import LiveRunDir
from platoon.runs import CheckpointError, CorruptFileError, RunDir
from platoon.runs.resume import (
    RunFinished,
)
from platoon.runs.session import python_log
from platoon.runs.trackers import open_trackers

__all__ = ["EvalReport", "TrainError", "TrainUsageError", "evaluate", "load_train_config", "prestage", "resume_run",
           "start_run", "step_line", "train"]


def default_out(root: Path = Path("runs")) -> Path:
    """``runs/train-<n>``, the first that does not exist."""
    n = 1
    while (root / f"train-{n}").exists():
        n += 1
    return root / f"train-{n}"


# ------------------------------------------------------------------------------------------------------- train
def _runtime(live: LiveRun, run_dir: LiveRunDir, console: Console | None, checkpoint: str | None) -> LiveRuntime:
    if console is not None and hasattr(live.workflow, "warn"):
        live.workflow.warn = lambda message: console.log("warning", message)
        live.workflow.inform = lambda message: console.log("info", message)
    log = console.log if console is not None else (lambda level, message: None)
    # staged since the start was built, on while the runtime saves at launch; no rollout starts before it is done
    staging = (live.staging or Staging([]).start()).attach(log)
    return LiveRuntime(live.policy.driver, live.workflow, live.trainer, live.service, run_dir=run_dir,
                       evaluate=live.evaluate_in_training, trainer_state=live.trainer_state,
                       log=console.log if console is not None else None,
                       on_step=console.step if console is not None else None, checkpoint_name=checkpoint,
                       clock_start_s=live.clock_start_s, state_lost=live.state_lost, trace=_trace(live, run_dir),
                       staging=staging, activity=console.activity if console is not None else None,
                       trackers=open_trackers(run_dir.rd, live.cfg.stats, runtime="live",
                                              log=console.log if console is not None else python_log("platoon.live")))


def _trace(live: LiveRun, run_dir: LiveRunDir) -> Any:
    """The writer of the run's ``trace.json`` (config section ``trace``); None when it is off. A resumed start's
    writer appends to the trace its resume cut back to the checkpoint (mending a torn last line first)."""
    t = live.cfg.trace
    if not t.enabled:
        return None
    return run_dir.rd.trace_writer(group_every=t.group_every, max_events=t.max_events)


def start_run(cfg: RunConfig, out: Path, **build: Any) -> tuple[LiveRun, LiveRunDir]:
    """Build a new run of ``cfg`` and create its directory ``out`` (lock.json, tasks/pool.json), holding its writer
    lock (RunBusyError while another process creates or writes it)."""
    workflow_cls = build.get("workflow_cls", GroupRolloutWorkflow)
    records = resolve_components(cfg, workflow_gives_verdicts=workflow_gives_verdicts(workflow_cls))
    live = build_live(cfg, start=1, **build)
    try:
        run_dir = LiveRunDir.create(out, config=cfg.model_dump(mode="json"), components=[r.to_json() for r in records],
                                    pool=pool_rows(live.policy.pool), keep=cfg.checkpoint.keep_recovery,
                                    steps=live.policy.driver.steps)
    except FileExistsError as exc:
        raise TrainUsageError(f"{exc}; pass --resume {out} to go on with it, or another --out") from None
    return live, run_dir


def train(config: Path | None = None, overrides: Sequence[str] = (), *, out: Path | None = None,
          resume: Path | None = None, steps: int | None = None, progress: bool = True, **build: Any) -> Path:
    """``platoon train``: a new run (or ``resume``) to the end of its plan; returns the run directory. A resume of
    a finished run prints so and returns at once."""
    notes: list[tuple[str, str]] = []
    if resume is not None and is_v040(resume):
        if config is not None:
            raise TrainUsageError("--resume takes the run's own config: give no CONFIG with it")
        live, run_dir, name = resume_v040_run(resume, overrides, steps=steps,
                                              log=lambda level, m: notes.append((level, m)), **build)
        path = resume
    elif resume is not None:
        if config is not None or overrides:
            raise TrainUsageError("--resume takes the run's own config: give no CONFIG or overrides (--set, KEY=VALUE) with it")
        try:
            live, run_dir, name = resume_run(resume, steps=steps, log=lambda level, m: notes.append((level, m)),
                                             **build)
        except RunFinished as done:
            from platoon.console import make_console, say

            messages = make_console(stderr=True)
            for level, message in notes:  # the trackers' catch-up (platoon.runs.trackers.catch_up)
                say(messages, level, message)
            make_console(highlight=False).print(str(done))
            return Path(resume)
        path = resume
    else:
        cfg = load_train_config(config, overrides, steps, out=out)
        path = out or run_directory(cfg) or default_out()
        live, run_dir = start_run(cfg, path, **build)
        name = None
    try:
        d = live.dispatcher
        with Console(d.config.steps, d.step, enabled=progress) as console:
            for level, message in notes:
                console.log(level, message)
            runtime = _runtime(live, run_dir, console, name)
            try:
                asyncio.run(runtime.run())
            except Exception:
                if resume is None and d.step == 0:
                    run_dir.rd.discard()  # a new run that fails before its first step leaves nothing behind
                raise
    finally:
        if live.workers is not None:
            live.workers.close()  # a worker the runtime's shutdown did not end (it ends them all when it runs)
        run_dir.release()
    return Path(path)


# -------------------------------------------------------------------------------------------------------- eval
@dataclass(frozen=True)
class EvalReport:
    """Held-out pass@1 of a policy: ``what`` it is (a config's initial policy, a run's checkpoint), the metrics."""

    what: str
    metrics: dict[str, float]
    by_task: list[dict[str, Any]] = field(default_factory=list)  # a row per held-out task (``eval --by-task``)

    def line(self) -> str:
        m = self.metrics
        return (f"held-out pass@1 {m['eval/pass@1']:.3f} (95% CI {m['eval/pass@1_ci_low']:.3f}-"
                f"{m['eval/pass@1_ci_high']:.3f}, {int(m['eval/episodes'])} episodes) of {self.what}")


def evaluate(target: str | os.PathLike[str], *, n: int = EVAL_EPISODES) -> EvalReport:
    """``platoon eval``: a run directory (its last full checkpoint's policy) or a config (its initial policy); the
    report holds each held-out task's passes too."""
    from platoon.live.launch.build import (
        build_environments,
        build_model,
        build_renderer,
        evaluate_policy,
        load_init_from,
    )
    from platoon.live.training.trainer import loads_state

    path = Path(target)
    if path.is_dir():
        rd = RunDir(path)
        if not rd.lock_path.exists():
            raise TrainUsageError(f"cannot evaluate {path}: not a run directory (no lock.json)")
        try:
            lock = rd.read_lock()
            if lock.get("runtime") == "sim":
                raise TrainUsageError(f"cannot evaluate {path}: a simulated run has no policy to play (its "
                                      "eval/pass@1 in metrics.jsonl is the learning model's estimate); evaluate a "
                                      "live run, an sft run or a config")
            cfg = config_from_lock(lock, str(rd.lock_path))
            point = LiveRunDir(path).resume_point()
        except (CorruptFileError, CheckpointError) as exc:
            raise TrainError(f"cannot evaluate {path}: {exc}") from None
        if point.trainer_state is None:
            raise TrainError(f"cannot evaluate {path}: checkpoint {point.name} holds no trainer state")
        envs = build_environments(cfg)
        staging = _stage_for_eval(envs)
        renderer = build_renderer(cfg, envs)
        model = build_model(cfg, envs, renderer)
        model.load_state_dict(loads_state(point.trainer_state)["model"])
        what = f"{path} at step {point.step} (checkpoint {point.name})"
    else:
        if not path.is_file():
            raise ConfigError([f"{path}: no such config file or run directory"])
        cfg = load_config(path, strict_resolve=True)
        envs = build_environments(cfg)
        staging = _stage_for_eval(envs)
        renderer = build_renderer(cfg, envs)
        model = build_model(cfg, envs, renderer)
        load_init_from(model, cfg)
        what = (f"{path}'s initial policy (seed {cfg.train.seed})" if cfg.train.init_from is None else
                f"{path}'s initial policy ({cfg.train.init_from}'s weights)")
    staging.wait_blocking()
    by_task: list[dict[str, Any]] = []
    return EvalReport(what, evaluate_policy(model, cfg, envs, n, renderer=renderer, by_task=by_task), by_task)


def _stage_for_eval(envs: dict[str, Any]) -> Staging:
    """``platoon eval`` stages the environments' toolchains while it builds the model and lists its tasks."""
    from platoon.console import make_console

    console = make_console(highlight=False, stderr=True)
    return Staging(run_toolchains(envs.values()),
                   log=lambda level, message: console.print(f"{level}: {message}", markup=False)).start()


def prestage(config: Path, overrides: Sequence[str] = ()) -> list[Any]:
    """``platoon prestage``: stage the toolchains of ``config``'s environments now, ahead of a run on this node
    (docs/toolchains.md); what each staging found (``platoon.live.agent.toolchain.Staged``)."""
    from platoon.live.agent.toolchain import prestage as stage_all
    from platoon.live.launch.build import build_environments

    cfg = load_config(config, list(overrides), strict_resolve=True)
    return stage_all(run_toolchains(build_environments(cfg).values()))
