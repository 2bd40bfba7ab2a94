"""What ``platoon train --resume`` does that is a live run's own: its trainer and model state, and runs platoon 0.4.0
wrote.

The resume itself is both runtimes' (``platoon.runs.resume``): the checks in their order before anything is written,
then the logs cut back and the lock updated. What this module adds:

- the checkpoint a live run goes on from (``LiveRunDir.resume_point``: the newest whose trainer state reads back; its
  statistics or dispatch state may fall back alone) and the check that it holds a trainer state;
- the shared refusals in ``platoon train``'s words and exit codes (``TrainUsageError``: exit 64; ``TrainError``,
  ``cannot resume RUN: ...``: exit 1);
- the fresh start built with the trainer's state (a state that does not load is refused before anything is
  written), its start number, the run's clock from the checkpoint's ``clock_s``; its policy layer then goes on by
  reissue (``platoon.runs.reissue``), as a run whose rollouts ran for real must;
- a run platoon 0.4.0 wrote goes on from its config and dispatch state (docs/migrating-from-0.4.md, "Resuming a
  0.4.0 run"): only ``train`` resumes one, its weights being on the Tinker service.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from platoon.config.errors import ConfigError, ExtensionError
from platoon.config.models import RunConfig
from platoon.config.resolve import resolve_components
from platoon.live.launch.build import LiveRun, build_live
from platoon.live.launch.train_config import TrainError, TrainUsageError, load_train_config
from platoon.live.rollouts.workflow import GroupRolloutWorkflow, workflow_gives_verdicts
from platoon.live.training.checkpoint import LiveRunDir, ResumePoint
from platoon.policy import dispatch_state
from platoon.runs import CheckpointError, CorruptFileError
from platoon.runs.reissue import restore_by_reissue
from platoon.runs.resume import ResumeRefused, commit, decide, released_on_failure
from platoon.runs.rundir import LOCK_BASE_KEYS, NotARunDirectory

__all__ = ["V040_RESUME_KEYS", "is_v040", "resume_run", "resume_v040_run"]


def resume_run(path: Path, *, steps: int | None = None, log: Any = None,
               **build: Any) -> tuple[LiveRun, LiveRunDir, str]:
    """Set up the next start of the run in ``path`` from its newest checkpoint that reads back, holding the run's
    writer lock (the caller releases it: ``LiveRunDir.release``).

    Everything is checked before anything is written (``platoon.runs.resume.decide``): RunBusyError (another
    writer), TrainUsageError (a simulated run, ``steps`` below the checkpoint's), RunFinished (nothing to do),
    TrainError (no checkpoint, a log shorter than its checkpoint recorded, a trainer state that does not load) leave
    the run as it was and the lock released.
    """
    log = log or (lambda level, message: None)
    try:
        run_dir = LiveRunDir.claim(path)
    except NotARunDirectory as exc:
        raise TrainUsageError(f"--resume {exc}") from None
    except CorruptFileError as exc:
        raise TrainError(f"cannot resume {path}: {exc}") from None
    with released_on_failure(run_dir.rd):
        return _resume(run_dir, Path(path), steps, log, build)


def _has_trainer_state(path: Path) -> Any:
    def check(point: ResumePoint) -> None:
        if point.trainer_state is None:
            raise TrainError(f"cannot resume {path}: checkpoint {point.name} holds no trainer state (trainer.pt)")

    return check


def _resume(run_dir: LiveRunDir, path: Path, steps: int | None, log: Any,
            build: dict[str, Any]) -> tuple[LiveRun, LiveRunDir, str]:
    try:
        decided = decide(run_dir.rd, path, runtime="live", steps=steps, locate=lambda rd: run_dir.resume_point(),
                         check=_has_trainer_state(path), log=log)
    except CorruptFileError as exc:
        raise TrainError(f"cannot resume {path}: {exc}") from None
    except ResumeRefused as exc:
        raise TrainUsageError(str(exc)) from None
    except CheckpointError as exc:
        raise TrainError(f"cannot resume {path}: {exc}") from None
    cfg, point = decided.cfg, decided.point
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
    for note in point.notes:
        log("warning", note)
    commit(run_dir.rd, decided, runtime="live", log=log)
    live.state_lost = restore_by_reissue(live.policy, run_dir.rd, point, log=log)
    return live, run_dir, point.name


#: The keys a resume of a platoon 0.4.0 run may set beside ``--resume``: where the weights are and how they are
#: prompted (the Tinker service's part); everything else is the run's own config.
V040_RESUME_KEYS = ("train.model_name", "train.renderer_name")


def is_v040(path: Path) -> bool:
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
    from platoon.live.training.checkpoint import next_start_number
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
