"""The body of ``platoon sft``: supervised fine-tuning of the run's policy on demonstrations (docs/warm-start.md).

A run of ``platoon sft CONFIG`` takes the config ``platoon train`` takes (the same model, renderer, environments,
evaluation, checkpoints and trackers) and its ``sft`` section:

- the demonstrations (``platoon.live.sft.demonstrations``): each training task's from its environment, or a JSONL
  file's, laid out as rollouts are and cut to the context window (a cut one trains on what fits);
- ``sft.steps`` updates of ``sft.batch_size`` demonstrations (``platoon.live.sft.trainer``), a row of
  ``metrics.jsonl`` each (``sft/loss``, ``sft/tokens``, ``sft/grad_norm``, ``sft/epoch``), held-out pass@1 as
  ``platoon train`` measures it (``eval.at_start``, every ``eval.every`` steps and after the last);
- checkpoints every ``checkpoint.recovery_every`` steps (the newest ``keep_recovery`` kept) and after the last (kept
  for good), each ``trainer.pt`` holding the weights where ``platoon eval`` and ``train.init_from`` read them;
- ``--resume RUN`` goes on from the newest checkpoint that reads back, its logs cut back to it, and trains on as the
  run that never stopped would have (same demonstrations, same order).

Its run directory is a run like the others (``lock.json`` with ``runtime: sft``, ``metrics.jsonl``,
``checkpoints.jsonl``), so ``platoon report`` and pandas read it beside a training run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platoon.config.errors import ConfigError
from platoon.config.loader import config_from_lock, load_config
from platoon.config.models import RunConfig
from platoon.config.steps import run_directory
from platoon.live.launch.build import (
    EVAL_EPISODES,
    build_environments,
    build_model,
    build_renderer,
    context_window,
    entry_tasks,
    evaluate_policy,
    load_init_from,
)
from platoon.live.launch.errors import TrainError, TrainUsageError
from platoon.live.sft.demonstrations import (
    Conversation,
    conversation_tokens,
    environment_demonstrations,
    read_demonstrations,
)
from platoon.live.sft.trainer import SFTTrainer, batch_indices
from platoon.live.training.checkpoint import TRAINER_FILE, LiveRunDir
from platoon.runs import CheckpointError, CorruptFileError, RunDir, save_checkpoint
from platoon.runs.resume import resume_note
from platoon.runs.trackers import open_trackers

__all__ = ["Demonstrations", "sft", "sft_line"]

Log = Callable[[str, str], None]


@dataclass(frozen=True)
class Demonstrations:
    """The run's demonstrations as token rows (``(ids, mask)``), with what was left out or cut on the way."""

    rows: list[tuple[list[int], list[int]]]
    left_out: list[str]
    cut: int

    @classmethod
    def of(cls, cfg: RunConfig, envs: dict[str, Any], renderer: Any, window: int | None) -> Demonstrations:
        """``cfg``'s demonstrations (``sft.demonstrations``), at most ``sft.max_demonstrations``, tokenized by
        ``renderer`` and cut to ``window`` tokens; ConfigError when there are none or the renderer cannot write a
        completion."""
        if not callable(getattr(renderer, "completion", None)):
            raise ConfigError([f"train.renderer_name: {cfg.train.renderer_name}'s renderer cannot write an "
                               "assistant's message as ids (a method completion), which platoon sft trains on"])
        conversations, left_out = _conversations(cfg, envs)
        conversations = conversations[: cfg.sft.max_demonstrations]
        rows, cut = [], 0
        for c in conversations:
            ids, mask = conversation_tokens(renderer, c)
            if window is not None and len(ids) > window:
                ids, mask, cut = ids[:window], mask[:window], cut + 1
            if any(mask):
                rows.append((ids, mask))
            else:
                left_out.append(f"{c.source}: no assistant token fits the context window of {window}")
        if not rows:
            raise ConfigError([f"sft.demonstrations: no demonstration to train on ({len(left_out)} left out"
                               + (f"; the first: {left_out[0]})" if left_out else ")")])
        return cls(rows, left_out, cut)


def _conversations(cfg: RunConfig, envs: dict[str, Any]) -> tuple[list[Conversation], list[str]]:
    source = cfg.sft.demonstrations
    if source != "environment":
        return read_demonstrations(source), []
    conversations: list[Conversation] = []
    left_out: list[str] = []
    problems: list[str] = []
    step_timeout = cfg.train.workflow_config.rollout_config.step_timeout
    for i, e in enumerate(cfg.environments):
        env = envs[e.label]
        try:
            kept, lost = environment_demonstrations(env, entry_tasks(e, env, training=True), entry=e.label,
                                                    step_timeout=step_timeout)
        except TypeError as exc:
            problems.append(f"environments.{i}.env: {exc}")
            continue
        conversations += kept
        left_out += lost
    if problems:
        raise ConfigError([*problems, "sft.demonstrations: environment takes each entry's demonstrations"])
    return conversations, left_out


def sft_line(row: dict) -> str:
    """The per-step line: step, loss, assistant tokens (and held-out pass@1 when measured)."""
    line = f"step {row['step']:>4}"
    if "sft/loss" in row:
        line += f"  loss {row['sft/loss']:.4f}  tokens {int(row['sft/tokens'])}"
    if "eval/pass@1" in row:
        line += (f"  eval/pass@1 {row['eval/pass@1']:.3f} ({row['eval/pass@1_ci_low']:.3f}-"
                 f"{row['eval/pass@1_ci_high']:.3f})")
    return line


# ---------------------------------------------------------------------------------------------------------- run
@dataclass
class _Start:
    """One start of an SFT run: its config, objects, directory and where it begins."""

    cfg: RunConfig
    envs: dict[str, Any]
    renderer: Any
    model: Any
    trainer: SFTTrainer
    rd: RunDir
    step: int
    steps: int
    clock_s: float = 0.0


def sft(config: Path | None = None, overrides: Sequence[str] = (), *, out: Path | None = None,
        resume: Path | None = None, steps: int | None = None, progress: bool = True,
        eval_episodes: int = EVAL_EPISODES) -> Path:
    """``platoon sft``: a new run (or ``resume``) to its last step; returns the run directory."""
    from platoon.live.launch.progress import Console

    notes: list[tuple[str, str]] = []
    start = _resume(resume, steps, notes) if resume is not None else _new(config, overrides, out, steps)
    try:
        with Console(start.steps, start.step, enabled=progress, title="sft", line=sft_line) as console:
            for level, message in notes:
                console.log(level, message)
            _train(start, console, eval_episodes)
    finally:
        start.rd.release()
    return start.rd.path


def _new(config: Path | None, overrides: Sequence[str], out: Path | None, steps: int | None) -> _Start:
    extra: list[str] = []
    if steps is not None:
        extra.append(f"sft.steps={steps}")
    cfg = load_config(config, [*extra, *overrides], strict_resolve=True,
                      needs_log_path=config is not None and out is None)
    path = out or run_directory(cfg) or _default_out()
    envs = build_environments(cfg)
    renderer = build_renderer(cfg, envs)
    model = build_model(cfg, envs, renderer)
    load_init_from(model, cfg)
    try:
        rd = RunDir.create(path, command="platoon sft")
    except FileExistsError as exc:
        raise TrainUsageError(f"{exc}; pass --resume {path} to go on with it, or another --out") from None
    with rd.undone_on_failure():
        rd.write_lock(cfg.model_dump(mode="json"), [], {"runtime": "sft", "steps": cfg.sft.steps})
    return _Start(cfg, envs, renderer, model, SFTTrainer.from_config(model, cfg), rd, 0, cfg.sft.steps)


def _default_out(root: Path = Path("runs")) -> Path:
    n = 1
    while (root / f"sft-{n}").exists():
        n += 1
    return root / f"sft-{n}"


def _resume(path: Path, steps: int | None, notes: list[tuple[str, str]]) -> _Start:
    from platoon.live.training.trainer import loads_state

    rd = RunDir(path)
    if not rd.lock_path.is_file():
        raise TrainUsageError(f"--resume {path}: not a run directory (no lock.json)")
    try:
        lock = rd.read_lock()
        if lock.get("runtime") != "sft":
            raise TrainUsageError(f"--resume {path}: a {lock.get('runtime')} run, not an SFT run (platoon "
                                  f"{'train' if lock.get('runtime') == 'live' else 'simulate'} --resume goes on with it)")
        cfg = config_from_lock(lock, str(rd.lock_path))
        rd = RunDir.claim(path, command="platoon sft --resume")
    except CorruptFileError as exc:
        raise TrainError(f"cannot resume {path}: {exc}") from None
    try:
        point = LiveRunDir(rd).resume_point()
        envs = build_environments(cfg)
        renderer = build_renderer(cfg, envs)
        model = build_model(cfg, envs, renderer)
        trainer = SFTTrainer.from_config(model, cfg)
        trainer.load_state_dict(loads_state(point.trainer_state or b""))
    except (CheckpointError, CorruptFileError, ValueError, RuntimeError) as exc:
        rd.release()
        raise TrainError(f"cannot resume {path}: {exc}") from None
    except BaseException:
        rd.release()
        raise
    notes += [("warning", note) for note in point.notes]
    notes.append(("info", resume_note(rd, point.row)))
    rd.cut_logs(point.row.get("logs") or {})
    total = steps if steps is not None else int(lock.get("steps") or cfg.sft.steps)
    return _Start(cfg, envs, renderer, model, trainer, rd, point.step, max(total, point.step), point.clock_s)


def _train(start: _Start, console: Any, eval_episodes: int) -> None:
    cfg, log = start.cfg, console.log
    demos = Demonstrations.of(cfg, start.envs, start.renderer, context_window(cfg, start.model))
    _say_demonstrations(demos, log)
    trackers = open_trackers(start.rd, cfg.stats, runtime="sft", log=log)
    began = time.monotonic() - start.clock_s
    every, n = cfg.eval.every or 0, len(demos.rows)

    def evaluate() -> dict[str, float]:
        start.model.module.eval()
        return evaluate_policy(start.model, cfg, start.envs, eval_episodes, renderer=start.renderer)

    try:
        with start.rd.metrics_writer() as metrics:
            def write(row: dict[str, Any]) -> None:
                metrics.write(row)
                console.step(row)
                if trackers is not None:
                    trackers.write(row)

            if start.step == 0:
                if cfg.eval.at_start:
                    write({"step": 0, "time": time.monotonic() - began, **evaluate()})
                _checkpoint(start, time.monotonic() - began, permanent=True)
            for step in range(start.step, start.steps):
                batch = [demos.rows[i] for i in batch_indices(cfg.train.seed, step, cfg.sft.batch_size, n)]
                row = {"step": step + 1, "time": 0.0, **start.trainer.step(batch),
                       "sft/epoch": (step + 1) * cfg.sft.batch_size / n}
                last = step + 1 == start.steps
                if every and ((step + 1) % every == 0 or last):
                    row.update(evaluate())
                row["time"] = time.monotonic() - began
                write(row)
                recovery = cfg.checkpoint.recovery_every
                if last or (recovery and (step + 1) % recovery == 0):
                    _checkpoint(start, row["time"], step=step + 1, permanent=last)
    finally:
        if trackers is not None:
            trackers.close()
    start.rd.mark_finished(start.steps)


def _checkpoint(start: _Start, clock_s: float, *, step: int = 0, permanent: bool) -> None:
    """A full checkpoint of ``step`` (its row records the logs' lengths, so a resume cuts them back to it)."""
    from platoon.live.training.trainer import dumps_state

    save_checkpoint(start.rd, step, {TRAINER_FILE: dumps_state(start.trainer.state_dict())},
                    {"policy_version": step, "clock_s": clock_s, "logs": start.rd.log_lengths()},
                    keep=start.cfg.checkpoint.keep_recovery, permanent=permanent)


def _say_demonstrations(demos: Demonstrations, log: Log) -> None:
    tokens = sum(sum(mask) for _, mask in demos.rows)
    log("info", f"{len(demos.rows)} demonstrations, {tokens} assistant tokens"
                + (f"; {demos.cut} cut to the context window" if demos.cut else ""))
    if demos.left_out:
        log("warning", f"{len(demos.left_out)} demonstration(s) left out; the first: {demos.left_out[0]}")

