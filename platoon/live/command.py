"""The bodies of ``platoon train`` and ``platoon eval`` (the CLI parses arguments and maps errors to exit codes).

- ``train``: a new run of a config (no config: the embedded default, ``build.EMBEDDED_DEFAULT`` over the config
  defaults) into a new run directory, or ``--resume RUN``: RUN's newest full checkpoint that reads back, a new start
  number, the statistics' snapshot, the dispatcher resumed by reissue (``dispatch_state.resume``: kept groups first),
  the trainer's state, both logs cut back to the checkpoint, the run's clock going on from the checkpoint's
  ``clock_s``, then on to the planned steps (``--steps`` sets a new total). A rich progress bar and a line per step
  (reward, pass rate, informative share, staleness, permits busy). The run's writer lock is held from the first
  look at the directory to the end (platoon.runs.writer).
- ``evaluate``: held-out pass@1, with its 95% interval, of a config's initial policy or a run's last checkpoint.
- ``prestage``: the harness toolchains of a config's environments staged on this node ahead of a run
  (``platoon.live.toolchain``); ``train`` and ``evaluate`` stage them too, and start no rollout before that is done.

A resume decides before it changes anything (platoon.runs.resume): a finished run is left as it is, with a line
saying how to extend it; a run whose checkpoint has done every step but whose end was not written gets its end.

Errors: a configuration problem raises ``ConfigError`` (exit 78); a misused ``--resume`` (a simulated run, fewer
steps than done, a config or overrides beside it) raises ``TrainUsageError`` and a run directory another process
writes ``RunBusyError`` (exit 64); a run directory that cannot be used raises ``TrainError`` (exit 1) with a message
that names it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platoon.config.errors import ConfigError, ExtensionError
from platoon.config.loader import config_from_lock, load_config
from platoon.config.models import RunConfig
from platoon.config.resolve import resolve_components
from platoon.config.steps import check_plan, run_directory, with_steps
from platoon.live.build import EMBEDDED_DEFAULT, EVAL_EPISODES, LiveRun, build_live, pool_rows
from platoon.live.checkpoint import LiveRunDir
from platoon.live.runtime import LiveRuntime
from platoon.live.toolchain import Staging, run_toolchains
from platoon.live.workflow import GroupRolloutWorkflow, workflow_gives_verdicts
from platoon.policy import dispatch_state
from platoon.runs import CheckpointError, CorruptFileError, RunDir
from platoon.runs.checkpoints import stats_file_name
from platoon.runs.resume import (
    ResumeRefused,
    RunFinished,
    check_finished,
    check_logs,
    check_runtime,
    check_steps,
    planned_steps,
)
from platoon.runs.rundir import LOCK_BASE_KEYS
from platoon.runs.writer import stale_note

__all__ = ["EvalReport", "TrainError", "TrainUsageError", "evaluate", "load_train_config", "prestage", "resume_run",
           "start_run", "train"]


class TrainError(RuntimeError):
    """A run that cannot start or go on (exit 1)."""


class TrainUsageError(TrainError):
    """A ``--resume`` used as it cannot be (exit 64): the run directory was left as it was."""


def load_train_config(config: Path | None, overrides: Sequence[str] = (), steps: int | None = None, *,
                      out: Path | None = None) -> RunConfig:
    """``config`` with ``overrides`` (no config: the embedded default), resolved (stage 2), planning some steps;
    ConfigError if not. A config file needs ``log_path`` unless ``out`` names the run directory."""
    extra = list(EMBEDDED_DEFAULT) if config is None else []
    if steps is not None:
        extra += [f"train.max_training_steps={steps}", "train.num_epochs=null"]
    cfg = load_config(config, [*extra, *overrides], strict_resolve=True,
                      needs_log_path=config is not None and out is None)
    check_plan(cfg, str(config) if config is not None else "<default>")
    return cfg


def default_out(root: Path = Path("runs")) -> Path:
    """``runs/train-<n>``, the first that does not exist."""
    n = 1
    while (root / f"train-{n}").exists():
        n += 1
    return root / f"train-{n}"


# ----------------------------------------------------------------------------------------------------- console
class Console:
    """A rich progress bar over the run's steps and a line per step; warnings and infos above the bar."""

    def __init__(self, total: int, done: int = 0, *, enabled: bool = True) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from platoon.console import make_console

        self.console = make_console(highlight=False)
        self.progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=self.console, disable=not enabled, transient=False)
        self.task = self.progress.add_task("train", total=total, completed=done)

    def __enter__(self) -> Console:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def log(self, level: str, message: str) -> None:
        style = "yellow" if level == "warning" else "dim"
        self.progress.console.print(f"[{style}]{level}: {message}[/{style}]", markup=True, highlight=False)

    def step(self, row: dict) -> None:
        self.progress.console.print(step_line(row), highlight=False)
        if "trainer/datums" in row or "train/reward_mean" in row:
            self.progress.advance(self.task)


def step_line(row: dict) -> str:
    """The per-step line: step, reward, pass rate, informative share, staleness, permits busy (and eval)."""
    def get(key: str) -> str:
        value = row.get(key)
        return "-" if value is None else f"{value:.3f}"

    if "train/reward_mean" not in row:
        return f"step {row['step']:>4}  eval/pass@1 {get('eval/pass@1')}"
    line = (f"step {row['step']:>4}  reward {get('train/reward_mean')}  pass {get('train/pass_rate')}  "
            f"informative {get('train/informative_share')}  staleness {get('train/staleness_mean')}  "
            f"permits busy {get('rollout_client/permit_busy_share')}")
    if "eval/pass@1" in row:
        line += f"  eval/pass@1 {get('eval/pass@1')}"
    return line


# ------------------------------------------------------------------------------------------------------- train
def _runtime(live: LiveRun, run_dir: LiveRunDir, console: Console | None, checkpoint: str | None) -> LiveRuntime:
    if console is not None and hasattr(live.workflow, "warn"):
        live.workflow.warn = lambda message: console.log("warning", message)
    log = console.log if console is not None else (lambda level, message: None)
    # staged since the start was built, on while the runtime saves at launch; no rollout starts before it is done
    staging = (live.staging or Staging([]).start()).attach(log)
    return LiveRuntime(live.policy.driver, live.workflow, live.trainer, live.service, run_dir=run_dir,
                       evaluate=live.evaluate_in_training, trainer_state=live.trainer_state,
                       log=console.log if console is not None else None,
                       on_step=console.step if console is not None else None, checkpoint_name=checkpoint,
                       clock_start_s=live.clock_start_s, state_lost=live.state_lost, trace=_trace(live, run_dir),
                       staging=staging)


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
        raise TrainError(f"{exc}; pass --resume {out} to go on with it, or another --out") from None
    return live, run_dir


def resume_run(path: Path, *, steps: int | None = None, log: Any = None,
               **build: Any) -> tuple[LiveRun, LiveRunDir, str]:
    """Set up the next start of the run in ``path`` from its newest checkpoint that reads back, holding the run's
    writer lock (the caller releases it: ``LiveRunDir.release``).

    Everything is checked before anything is written (platoon.runs.resume): RunBusyError (another writer),
    TrainUsageError (a simulated run, ``steps`` below the checkpoint's), RunFinished (nothing to do), TrainError (no
    checkpoint, a log shorter than its checkpoint recorded, a trainer state that does not load) leave the run as
    it was and the lock released.
    """
    log = log or (lambda level, message: None)
    try:
        run_dir = LiveRunDir.claim(path)
    except CorruptFileError as exc:
        raise TrainError(f"cannot resume {path}: {exc}") from None
    try:
        return _resume(run_dir, Path(path), steps, log, build)
    except BaseException:
        run_dir.release()
        raise


def _resume(run_dir: LiveRunDir, path: Path, steps: int | None, log: Any,
            build: dict[str, Any]) -> tuple[LiveRun, LiveRunDir, str]:
    try:
        lock = run_dir.rd.read_lock()
        check_runtime(lock, "live", path)
    except CorruptFileError as exc:
        raise TrainError(f"cannot resume {path}: {exc}") from None
    except ResumeRefused as exc:
        raise TrainUsageError(str(exc)) from None
    cfg = config_from_lock(lock, str(run_dir.rd.lock_path))
    try:
        point = run_dir.resume_point()
    except CheckpointError as exc:
        raise TrainError(f"cannot resume {path}: {exc}") from None
    try:
        check_steps(steps, point.step, point.name)
    except ResumeRefused as exc:
        raise TrainUsageError(str(exc)) from None
    check_finished(lock, steps, "live", path)
    if point.trainer_state is None:
        raise TrainError(f"cannot resume {path}: checkpoint {point.name} holds no trainer state (trainer.pt)")
    try:
        check_logs(run_dir.rd, point.row)
    except CheckpointError as exc:
        raise TrainError(f"cannot resume {path}: {exc}") from None
    if steps is not None:
        cfg = with_steps(cfg, steps)
    try:
        live = build_live(cfg, start=point.start, trainer_state=point.trainer_state, version=point.version,
                          clock_start_s=point.clock_s, **build)
    except (ConfigError, ExtensionError):
        raise
    except (RuntimeError, ValueError, KeyError) as exc:  # torch.load's or load_state_dict's refusal
        raise TrainError(f"cannot resume {path}: checkpoint {point.name}'s trainer state does not load: "
                         f"{exc}") from None

    # decided: from here on the resume changes the run
    run_dir.keep = cfg.checkpoint.keep_recovery
    if steps is not None and steps != planned_steps(lock):
        run_dir.rd.write_lock(cfg.model_dump(mode="json"), lock.get("components", []),
                              {"runtime": "live", "steps": steps})
    for note in point.notes:
        log("warning", note)
    if run_dir.rd.writer is not None and (note := stale_note(run_dir.rd.writer)):
        log("info", note)
    run_dir.cut_logs(point.row)
    d = live.dispatcher
    if point.step >= live.policy.driver.steps:  # every step done, the end not written: the runtime writes only the end
        dispatch_state.resume_finished(d, step=point.step)
        return live, run_dir, point.name
    live.state_lost = _load_statistics(live, run_dir, point, log)
    if point.dispatch is not None:
        changes = dispatch_state.sampling_changes(d, point.dispatch)
        if changes:
            log("warning", f"the sampling changed since checkpoint {point.name}, so the draws that follow are not "
                           f"the ones the run would have made: {'; '.join(changes)}")
            run_dir.rd.append_lock_list("sampling_changed", {"start": point.start, "checkpoint": point.name,
                                                             "changes": changes})
        for warning in dispatch_state.resume(d, point.dispatch, step=point.step):
            log("warning", warning)
    else:
        dispatch_file = f"tasks/dispatch-{point.name}.json"
        problem = point.state_lost.get(dispatch_file, f"checkpoint {point.name} holds no dispatcher state")
        log("warning", f"the dispatcher state of checkpoint {point.name} does not read back ({problem}): its "
                       "outstanding draws are lost")
        live.state_lost = "; ".join(p for p in (live.state_lost, problem) if p)
        lost = d.recorder.lose_outstanding()
        if lost:
            log("warning", f"{len(lost)} outstanding draw(s) of checkpoint {point.name} get fate lost")
        for warning in dispatch_state.resume_without_state(d, step=point.step, version=point.version,
                                                           next_position=point.row.get("next_position")):
            log("warning", warning)
    return live, run_dir, point.name


#: The keys a resume of a platoon 0.4.0 run may set beside ``--resume``: where the weights are and how they are
#: prompted (the Tinker service's part); everything else is the run's own config.
V040_RESUME_KEYS = ("train.model_name", "train.renderer_name")


def _is_v040(path: Path) -> bool:
    from platoon.runs.v040 import is_v040_run

    return Path(path).is_dir() and is_v040_run(path)


def resume_v040_run(path: Path, overrides: Sequence[str] = (), *, steps: int | None = None, log: Any = None,
                    **build: Any) -> tuple[LiveRun, LiveRunDir, None]:
    """Set up a start of this platoon that goes on from the run platoon 0.4.0 wrote in ``path``
    (docs/migrating-from-0.4.md, "Resuming a 0.4.0 run"), holding its writer lock (the caller releases it).

    The config is 0.4.0's ``config.resolved.yaml`` with ``overrides`` of :data:`V040_RESUME_KEYS` only (others:
    TrainUsageError); the start number is one more than the largest its rows name; the dispatcher goes on from the
    newest dispatch state that reads (``v040_resume``: samplers where they stood, outstanding draws drawn again, kept
    groups trained first when the model reads 0.4.0's token ids, else drawn again). The weights 0.4.0 trained live on
    the Tinker service: training goes on from ``train.model_name``'s, at 0.4.0's policy version, and a warning
    says so. ``lock.json`` gets this platoon's keys beside 0.4.0's (every one of 0.4.0's kept as it was); 0.4.0's
    other files are left as they are; the run's checkpoints, ``metrics.jsonl`` and events are this platoon's from
    here on."""
    from platoon.runs.v040 import V040_CONFIG, tokenizer_matches, v040_model_name, v040_resume

    log = log or (lambda level, message: None)
    bad = [o for o in overrides if o.split("=", 1)[0].strip() not in V040_RESUME_KEYS]
    if bad:
        raise TrainUsageError(f"--resume of a platoon 0.4.0 run takes only {' and '.join(V040_RESUME_KEYS)} beside "
                              f"it (the rest is the run's own config, {V040_CONFIG}), not: {', '.join(bad)}")
    cfg = load_train_config(Path(path) / V040_CONFIG, overrides, steps, out=Path(path))
    try:
        run_dir = LiveRunDir.claim(path)
    except CorruptFileError as exc:
        raise TrainError(f"cannot resume {path}: {exc}") from None
    try:
        return _resume_v040(run_dir, Path(path), cfg, log, build, v040_resume=v040_resume,
                            same=tokenizer_matches(v040_model_name(path), cfg.train.model_name))
    except BaseException:
        run_dir.release()
        raise


def _resume_v040(run_dir: LiveRunDir, path: Path, cfg: RunConfig, log: Any, build: dict[str, Any], *,
                 v040_resume: Any, same: bool) -> tuple[LiveRun, LiveRunDir, None]:
    from platoon.live.checkpoint import next_start_number
    from platoon.runs import read_checkpoint_rows

    try:
        taken = v040_resume(run_dir.rd, same_tokenizer=same)
    except CheckpointError as exc:
        raise TrainError(f"cannot resume {path}: {exc}") from None
    step = int(taken.row.get("batch") or 0)
    version = int(taken.state.get("policy_version") or 0)
    start = next_start_number(read_checkpoint_rows(run_dir.rd))
    live = build_live(cfg, start=start, version=version, **build)
    if step >= live.policy.driver.steps:
        raise TrainUsageError(f"checkpoint {taken.row.get('name')} of {path} has done {step} steps, all its config "
                              f"plans: give a larger total with --steps N")
    if same and (vocab := getattr(live.model, "vocab_size", None)) is not None:
        taken = v040_resume(run_dir.rd, same_tokenizer=True, vocab_size=int(vocab))

    # decided: from here on the resume changes the run
    records = resolve_components(cfg, workflow_gives_verdicts=workflow_gives_verdicts(
        build.get("workflow_cls", GroupRolloutWorkflow)))
    v040_lock = {k: v for k, v in run_dir.rd.read_lock().items() if k not in LOCK_BASE_KEYS}
    run_dir.rd.write_lock(cfg.model_dump(mode="json"), [r.to_json() for r in records],
                          {**v040_lock, "runtime": "live", "steps": live.policy.driver.steps})
    run_dir.keep = cfg.checkpoint.keep_recovery
    log("warning", f"resuming platoon 0.4.0's run {path} from checkpoint {taken.row.get('name')} (step {step}): "
                   f"its weights live on the Tinker service ({taken.row.get('state_path')}), so training goes on "
                   f"from {cfg.train.model_name}'s weights, as policy version {version}")
    for note in taken.warnings:
        log("warning", note)
    d = live.dispatcher
    if taken.snapshot is not None:
        try:
            d.recorder.load_snapshot(dict(taken.snapshot))
        except ValueError as exc:
            log("warning", f"the per-task statistics of checkpoint {taken.row.get('name')} do not load ({exc}); "
                           "they start empty")
            d.recorder.replace_outstanding([tuple(o) for o in taken.state.get("outstanding", [])])
    for warning in dispatch_state.sampling_changes(d, taken.state):
        log("warning", f"the sampling changed since checkpoint {taken.row.get('name')}: {warning}")
    for warning in dispatch_state.resume(d, taken.state, step=step):
        log("warning", warning)
    if taken.kept:
        log("info", f"{taken.kept} group(s) that 0.4.0 kept train first")
    return live, run_dir, None


def _load_statistics(live: LiveRun, run_dir: LiveRunDir, point: Any, log: Any) -> str | None:
    """Load the checkpoint's statistics (or an older checkpoint's, or none) into the fresh dispatcher's recorder;
    what was lost goes to the log and lock.json's ``tasks_state_lost``. Returns the problem (None: nothing lost).

    Statistics that are not the checkpoint's own get its outstanding draws (from its dispatch state, else from the
    event log up to the checkpoint), so that the resume's reissues and fates are recorded."""
    d = live.dispatcher
    state_file = stats_file_name(point.row, point.name)
    problem = point.state_lost.get(state_file)
    loaded = point.snapshot_from
    if problem is None and point.snapshot is None:
        problem = f"checkpoint {point.name} holds no per-task statistics"
    if point.snapshot is not None:
        try:
            d.recorder.load_snapshot(dict(point.snapshot))
        except ValueError as exc:
            problem = f"{problem}; " if problem else ""
            problem += f"the statistics of checkpoint {loaded} do not load ({exc})"
            loaded = None
    if problem is None:
        return None
    log("warning", f"the per-task statistics of checkpoint {point.name} are lost ({problem}); "
                   + (f"they come from checkpoint {loaded}" if loaded else "they start empty"))
    run_dir.rd.append_lock_list("tasks_state_lost", {"start": point.start, "checkpoint": point.name,
                                                     "problem": problem, "loaded": loaded})
    if point.dispatch is not None:
        draws = [(s, q, t, p) for s, q, t, p in point.dispatch.get("outstanding", [])]
    else:
        draws = run_dir.open_draws(point.row)
    d.recorder.replace_outstanding(draws)
    return problem


def train(config: Path | None = None, overrides: Sequence[str] = (), *, out: Path | None = None,
          resume: Path | None = None, steps: int | None = None, progress: bool = True, **build: Any) -> Path:
    """``platoon train``: a new run (or ``resume``) to the end of its plan; returns the run directory. A resume of
    a finished run prints so and returns at once."""
    notes: list[tuple[str, str]] = []
    if resume is not None and _is_v040(resume):
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
            from platoon.console import make_console

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

    def line(self) -> str:
        m = self.metrics
        return (f"held-out pass@1 {m['eval/pass@1']:.3f} (95% CI {m['eval/pass@1_ci_low']:.3f}-"
                f"{m['eval/pass@1_ci_high']:.3f}, {int(m['eval/episodes'])} episodes) of {self.what}")


def evaluate(target: str | os.PathLike[str], *, n: int = EVAL_EPISODES) -> EvalReport:
    """``platoon eval``: a run directory (its last full checkpoint's policy) or a config (its initial policy)."""
    from platoon.live.build import build_environments, build_model, build_renderer, evaluate_policy
    from platoon.live.trainer import loads_state

    path = Path(target)
    if path.is_dir():
        rd = RunDir(path)
        try:
            cfg = config_from_lock(rd.read_lock(), str(rd.lock_path))
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
        what = f"{path}'s initial policy (seed {cfg.train.seed})"
    staging.wait_blocking()
    return EvalReport(what, evaluate_policy(model, cfg, envs, n, renderer=renderer))


def _stage_for_eval(envs: dict[str, Any]) -> Staging:
    """``platoon eval`` stages the environments' toolchains while it builds the model and lists its tasks."""
    from platoon.console import make_console

    console = make_console(highlight=False, stderr=True)
    return Staging(run_toolchains(envs.values()),
                   log=lambda level, message: console.print(f"{level}: {message}", markup=False)).start()


def prestage(config: Path, overrides: Sequence[str] = ()) -> list[Any]:
    """``platoon prestage``: stage the toolchains of ``config``'s environments now, ahead of a run on this node
    (docs/toolchains.md); what each staging found (``platoon.live.toolchain.Staged``)."""
    from platoon.live.build import build_environments
    from platoon.live.toolchain import prestage as stage_all

    cfg = load_config(config, list(overrides), strict_resolve=True)
    return stage_all(run_toolchains(build_environments(cfg).values()))
