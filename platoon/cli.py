"""The ``platoon`` command line: simulate, calibrate, train, eval, prestage, config, tasks, env, report.

Exit codes: 0 ok, 1 runtime failure, 64 usage error, 78 configuration error (every problem in one report, no
traceback). Each command's body lives in the layer that owns it; this module parses arguments and maps errors to
exit codes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

import typer

from platoon.config.errors import EXIT_CONFIG, EXIT_RUNTIME, EXIT_USAGE, ConfigError, ExtensionError
from platoon.config.overrides import split_arguments

app = typer.Typer(
    name="platoon",
    help="Asynchronous RL training of LLM agents, with a dispatch policy you can simulate before you train.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Validate and print configs.", no_args_is_help=True)
tasks_app = typer.Typer(help="Per-task statistics of a run.", no_args_is_help=True)
env_app = typer.Typer(help="The environments platoon can open by name.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(tasks_app, name="tasks")
app.add_typer(env_app, name="env")

SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a key: dotted.key=value (YAML-typed), list indices allowed: a.0.b=1; "
                 "dotted.key+=value appends to a list. Also given bare, after CONFIG."),
]
ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", help="The run config (YAML), instead of CONFIG.", show_default=False)
]


def config_arguments(default: str) -> Any:
    """The positional arguments of a command that reads one config: CONFIG and overrides, in any order."""
    return typer.Argument(
        metavar="CONFIG KEY=VALUE", show_default=False,
        help=f"A run config (YAML; none: {default}) and overrides: dotted.key=value or dotted.key+=value "
             "(an argument is an override when it holds = after a dotted key and is no existing file).",
    )


def config_and_overrides(
    arguments: list[str] | None, config: Path | None, sets: list[str] | None
) -> tuple[Path | None, list[str]]:
    """The config file (``--config`` or the one positional file) and the overrides (``--set``'s, then the
    positional ones); two config files exit 64."""
    files, overrides = split_arguments(arguments or ())
    named = [str(config)] if config is not None else []
    if len(named + files) > 1:
        fail(f"one CONFIG at most, got {', '.join(named + files)} (an override is dotted.key=value)", EXIT_USAGE)
    path = (named + files)[0] if named + files else None
    return (Path(path) if path is not None else None), [*(sets or ()), *overrides]


def fail(message: str, code: int) -> NoReturn:
    """Print ``platoon: message`` to stderr and exit with ``code``."""
    typer.echo(f"platoon: {message}", err=True)
    raise typer.Exit(code)


def _notes(passed_over: Sequence[str]) -> None:
    """The checkpoints a reader passed over, one ``platoon:`` line each on stderr."""
    for note in passed_over:
        typer.echo(f"platoon: {note}", err=True)


def not_built(command: str, issue: str) -> NoReturn:
    fail(f"'{command}' is not built yet ({issue}); see the README for what works today", EXIT_RUNTIME)


@app.command()
def simulate(
    arguments: Annotated[list[str] | None, config_arguments("a preset")] = None,
    config: ConfigOption = None,
    preset: Annotated[
        str | None,
        typer.Option("--preset", help="A shipped workload (long-agentic, textcraft-synth, math): alone, its whole run; "
                     "beside CONFIG, its sim block under the config's own sim keys. Default: long-agentic."),
    ] = None,
    permit_release: Annotated[
        str | None, typer.Option("--permit-release", help="rollout | group (train.permit_release).")
    ] = None,
    overrides: SetOption = None,
    steps: Annotated[int | None, typer.Option("--steps", min=1, help="train.max_training_steps (with --resume: the new total).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="train.seed.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="The run directory (default: runs/sim-<name>-<n>).")] = None,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="Go on from this run's newest checkpoint, exactly.")
    ] = None,
    sweep: Annotated[
        list[str] | None,
        typer.Option("--sweep", help="KEY=V1,V2,...: run every combination in parallel processes, or on Ray with "
                     "--ray (repeatable)."),
    ] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", min=1, help="Points of a sweep run at once (default: CPUs; with --ray: "
                                            "as many as Ray schedules).")] = None,
    workload: Annotated[
        Path | None, typer.Option("--workload", help="A workload file (platoon calibrate -o): its sim block replaces "
                                  "the config's.")
    ] = None,
    like: Annotated[
        Path | None, typer.Option("--like", help="A live run: calibrate it and simulate its own config (its twin).")
    ] = None,
    ray: Annotated[
        bool, typer.Option("--ray", help="Run the sweep's points as Ray tasks: on a local Ray instance, or the "
                           "cluster of --ray-address (or RAY_ADDRESS). Needs the ray extra: pip install platoon\\[ray].")
    ] = False,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", metavar="ADDR", help="The Ray cluster of --ray (implies it): "
                                 "auto, HOST:PORT or ray://HOST:10001.")
    ] = None,
) -> None:
    """Run the dispatch policy in the SimPy simulator and print a summary table."""
    from platoon.console import make_console
    from platoon.report import summary_table, sweep_markdown, sweep_table
    from platoon.runs.atomic import CorruptFileError
    from platoon.runs.checkpoints import CheckpointError
    from platoon.runs.resume import ResumeRefused
    from platoon.runs.writer import RunBusyError
    from platoon.sim.calibrate import CalibrationError
    from platoon.sim.command import Request, UsageError
    from platoon.sim.command import simulate as run_simulate
    from platoon.sim.runtime import SimulationStalled

    config, overrides = config_and_overrides(arguments, config, overrides)
    request = Request(config=config, preset=preset, permit_release=permit_release,
                      overrides=tuple(overrides), steps=steps, seed=seed, out=out, resume=resume,
                      sweep=tuple(sweep or ()), jobs=jobs, workload=workload, like=like, ray=ray,
                      ray_address=ray_address)
    console = make_console()
    try:
        outcome = run_simulate(request, console)
    except (UsageError, ResumeRefused, RunBusyError) as exc:
        fail(str(exc), EXIT_USAGE)
    except (ConfigError, ExtensionError) as exc:
        fail(str(exc), EXIT_CONFIG)
    except FileExistsError as exc:
        fail(f"{exc}; give another --out", EXIT_USAGE)
    except (CheckpointError, CorruptFileError, SimulationStalled, CalibrationError) as exc:
        fail(str(exc), EXIT_RUNTIME)
    if not outcome.points:
        console.print(summary_table(outcome.path))
        return
    console.print(sweep_table(f"platoon simulate --sweep: {outcome.path}", outcome.points, outcome.runs))
    (outcome.path / "sweep.md").write_text(sweep_markdown(outcome.points, outcome.runs), encoding="utf-8")


@app.command()
def train(
    arguments: Annotated[list[str] | None, config_arguments("the embedded default")] = None,
    config: ConfigOption = None,
    overrides: SetOption = None,
    out: Annotated[Path | None, typer.Option("--out", help="The run directory (default: runs/train-<n>).")] = None,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="Go on from this run's newest full checkpoint.")
    ] = None,
    steps: Annotated[int | None, typer.Option("--steps", min=1, help="train.max_training_steps (with --resume: the new total).")] = None,
) -> None:
    """Train a policy with the live asyncio + PyTorch backend (no CONFIG: the small model on platoon-number-search)."""
    from platoon.live.command import TrainError, TrainUsageError
    from platoon.live.command import train as run_train
    from platoon.runs.writer import RunBusyError

    config, overrides = config_and_overrides(arguments, config, overrides)
    if resume is not None and out is not None:
        fail("--resume writes to the run it resumes: give --out or --resume, not both", EXIT_USAGE)
    try:
        path = run_train(config, overrides, out=out, resume=resume, steps=steps)
    except (ConfigError, ExtensionError) as exc:
        fail(str(exc), EXIT_CONFIG)
    except (TrainUsageError, RunBusyError) as exc:
        fail(str(exc), EXIT_USAGE)
    except TrainError as exc:
        fail(str(exc), EXIT_RUNTIME)
    typer.echo(f"run directory: {path}")


@app.command("eval")
def evaluate(
    target: Annotated[str, typer.Argument(help="A config (its initial policy) or a run directory (its last checkpoint).")],
    n: Annotated[int, typer.Option("--n", min=1, help="Held-out episodes to play.")] = 1024,
) -> None:
    """Held-out pass@1, with a 95% confidence interval, of the initial or a trained policy."""
    from platoon.live.command import TrainError
    from platoon.live.command import evaluate as run_eval

    try:
        report = run_eval(target, n=n)
    except (ConfigError, ExtensionError) as exc:
        fail(str(exc), EXIT_CONFIG)
    except TrainError as exc:
        fail(str(exc), EXIT_RUNTIME)
    typer.echo(report.line())


@app.command()
def prestage(
    arguments: Annotated[list[str] | None, config_arguments("none: a config is needed")] = None,
    config: ConfigOption = None,
    overrides: SetOption = None,
) -> None:
    """Stage the harness toolchains of a config's environments on this node, ahead of a run (docs/toolchains.md)."""
    from platoon.live.command import prestage as run_prestage
    from platoon.live.toolchain import ToolchainError

    config, overrides = config_and_overrides(arguments, config, overrides)
    if config is None:
        fail("prestage needs a CONFIG", EXIT_USAGE)
    try:
        staged = run_prestage(config, overrides)
    except (ConfigError, ExtensionError) as exc:
        fail(str(exc), EXIT_CONFIG)
    except (ToolchainError, OSError) as exc:
        fail(str(exc), EXIT_RUNTIME)
    if not staged:
        typer.echo("no toolchain to stage: the environments declare none")
    for s in staged:
        typer.echo(f"{s.toolchain}: {s.outcome} at {s.path}" + (f" (old copy set aside as {s.stale})" if s.stale else ""))


@app.command()
def report(
    runs: Annotated[list[Path], typer.Argument(help="One or more run directories.")],
    out: Annotated[Path | None, typer.Option("--out", help="Where to write (default: the first run's report/).")] = None,
) -> None:
    """Plots and a side-by-side table of one or more runs (simulated or live)."""
    from platoon.report import report as write_report
    from platoon.runs.atomic import CorruptFileError

    try:
        written = write_report(runs, out)
    except (FileNotFoundError, CorruptFileError) as exc:
        fail(str(exc), EXIT_RUNTIME)
    except OSError as exc:
        fail(f"cannot write the report: {exc.strerror or exc} ({exc.filename or out})", EXIT_RUNTIME)
    for path in written:
        typer.echo(str(path))


@app.command()
def calibrate(
    run: Annotated[Path, typer.Argument(help="A live run directory (trained with the trace on).")],
    out: Annotated[Path | None, typer.Option("-o", "--out", help="Write the workload here (YAML); default: print it.")] = None,
) -> None:
    """Fit the simulator's workload (its sim block) from a live run's trace and logs, and say how well each fit holds."""
    from rich.table import Table

    from platoon.console import make_console
    from platoon.runs.atomic import write_atomic
    from platoon.sim.calibrate import CalibrationError, workload_text
    from platoon.sim.calibrate import calibrate as fit_workload

    try:
        cal = fit_workload(run)
    except (CalibrationError, ConfigError) as exc:
        fail(str(exc), EXIT_RUNTIME)
    text = workload_text(cal, run)
    if out is None:
        typer.echo(text, nl=False)
        return
    table = Table(title=f"platoon calibrate: {run}")
    for column in ("sim key", "fitted", "samples", "how well it holds"):
        table.add_column(column, justify="right" if column == "samples" else "left")
    for fit in cal.fits:
        table.add_row(fit.key, fit.value, str(fit.samples), fit.quality)
    console = make_console()
    console.print(table)
    for note in cal.notes:
        console.print(f"note: {note}", highlight=False)
    write_atomic(out, text)
    typer.echo(f"workload: {out} (platoon simulate CONFIG --workload {out})")


@config_app.command("validate")
def config_validate(
    arguments: Annotated[
        list[str] | None,
        typer.Argument(metavar="CONFIG KEY=VALUE", show_default=False,
                       help="Run configs (YAML) to check, and overrides (dotted.key=value or dotted.key+=value) "
                            "that apply to each."),
    ] = None,
    configs: Annotated[
        list[Path] | None, typer.Option("--config", "-c", help="A config to check, as CONFIG (repeatable).",
                                        show_default=False)
    ] = None,
    overrides: SetOption = None,
    kind: Annotated[
        Literal["auto", "train", "eval", "none"], typer.Option("--kind",
                          help="Schema to check against: auto or train (the run config), none (the YAML and the "
                               "overrides only); eval is refused: this platoon has no evaluation config.")
    ] = "auto",
    schema: Annotated[
        str | None, typer.Option("--schema", help="Check against this class instead, as module:Class (a pydantic "
                                                   "model or a dataclass).", show_default=False)
    ] = None,
    resolve: Annotated[
        bool, typer.Option("--resolve/--no-resolve", help="Stage 2: import each entry's package, resolve every "
                                                          "component and check its options, as a run does when it "
                                                          "starts. --no-resolve checks the file only.")
    ] = True,
    strict: Annotated[
        bool, typer.Option("--strict/--no-strict", help="Also fail (exit 78) on warnings, for CI.")
    ] = False,
    tasks: Annotated[
        bool, typer.Option("--tasks/--no-tasks", help="Also list the training tasks as platoon train lists them "
                                                      "(building each environment) and print how the run draws "
                                                      "them: each environment's share and how often each task is "
                                                      "drawn over the planned steps, with a warning for a "
                                                      "mixture's weights that leave tasks out or draw some far "
                                                      "more often than others.")
    ] = False,
) -> None:
    """Check configs: each one's every problem with its key path; exit 78 if any fails, 64 if none is given."""
    from platoon.config.validate import EVAL_KIND_REFUSED, validate_file

    files, positional = split_arguments(arguments or ())
    paths = [*(configs or ()), *map(Path, files)]
    if kind == "eval":
        fail(EVAL_KIND_REFUSED, EXIT_USAGE)
    if not paths:
        fail("config validate needs at least one CONFIG", EXIT_USAGE)
    failed = False
    for path in paths:
        verdict = validate_file(path, [*(overrides or ()), *positional], kind=kind, schema=schema, resolve=resolve)
        listed: list[str] = []
        if tasks and not verdict.problems:
            listed = _listed_tasks(verdict.cfg) if verdict.cfg is not None else ["tasks: only a run config's tasks "
                                                                                 "are listed"]
        problems = [*verdict.problems, *(line.removeprefix("problem: ") for line in listed
                                        if line.startswith("problem: "))]
        warned = bool(verdict.warnings) or any(line.startswith("warning: ") for line in listed)
        if problems or (strict and warned):
            failed = True
            typer.echo(f"FAIL {path}" + ("" if problems else " (--strict: its warnings fail it)"))
        else:
            typer.echo(f"ok   {path}" + (f" ({verdict.schema})" if verdict.schema else ""))
        for line in [*problems, *(f"warning: {w}" for w in verdict.warnings),
                     *(line for line in listed if not line.startswith("problem: "))]:
            typer.echo(f"  {line}")
    if failed:
        raise typer.Exit(EXIT_CONFIG)


def _listed_tasks(cfg: Any) -> list[str]:
    """``config validate --tasks``: the run's plan and its warnings (``warning: ...``), from the training tasks
    ``platoon train`` lists (each entry's environment built, its split and ``tasks`` read); what listing them
    finds wrong comes back as ``problem: <key path>: ...`` lines, which fail the file."""
    from platoon.config.plan import sampling_plan
    from platoon.live.build import build_environments, build_pool

    try:
        pool = build_pool(cfg, build_environments(cfg))
    except (ConfigError, ExtensionError) as exc:
        return [f"problem: {line}" for line in getattr(exc, "problems", None) or [str(exc)]]
    plan = sampling_plan(cfg, {label: len(info.task_ids) for label, info in pool.entries.items()})
    return [*plan.describe(), *(f"warning: {line}" for line in plan.warnings())]


@config_app.command("show")
def config_show(
    arguments: Annotated[list[str] | None, config_arguments("the embedded default")] = None,
    config: ConfigOption = None,
    overrides: SetOption = None,
    defaults: Annotated[
        bool, typer.Option("--defaults", help="Every field with its description as a comment (loads back as is).")
    ] = False,
) -> None:
    """Print a config as it loads (overrides applied, every default filled in) as YAML."""
    from platoon import __version__
    from platoon.config.effective import entry_summary
    from platoon.config.loader import load_config, to_yaml

    config, overrides = config_and_overrides(arguments, config, overrides)
    try:
        cfg = load_config(config, overrides)
    except (ConfigError, ExtensionError) as exc:
        fail(str(exc), EXIT_CONFIG)
    if defaults:
        typer.echo(f"# platoon {__version__} run config: every field, each with its description")
    typer.echo(to_yaml(cfg, comments=defaults), nl=False)
    if not defaults:
        typer.echo("# each entry's effective settings:")
        for i in range(len(cfg.environments)):
            typer.echo(f"#   {entry_summary(cfg, i)}")


def _latest_snapshot(run: Path) -> tuple[dict, dict, list | None]:
    """(checkpoint row, statistics snapshot, pool) of the newest checkpoint whose snapshot reads back; notes on
    stderr for every newer one passed over; exit 1 when none reads."""
    from platoon.runs.checkpoints import CheckpointError, load_latest_checkpoint
    from platoon.runs.rundir import RunDir
    from platoon.runs.v040 import is_v040_run, latest_v040_snapshot

    if not run.is_dir():
        fail(f"{run}: not a run directory", EXIT_RUNTIME)
    if is_v040_run(run):  # platoon 0.4.0's layout: the snapshot lists every task of its pool
        try:
            found = latest_v040_snapshot(run)
        except CheckpointError as exc:
            fail(str(exc), EXIT_RUNTIME)
        _notes(found.passed_over)
        return found.row, found.snapshot, None
    try:
        loaded = load_latest_checkpoint(run)
    except CheckpointError as exc:
        fail(str(exc), EXIT_RUNTIME)
    _notes(loaded.passed_over)
    snapshot = next((v for k, v in loaded.files.items() if k.startswith("tasks/state-")), None)
    if not isinstance(snapshot, dict):
        fail(f"{run}: checkpoint {loaded.row.get('name')} holds no statistics snapshot", EXIT_RUNTIME)
    return loaded.row, snapshot, RunDir(run).read_pool()


def _task_rows(run: Path) -> tuple[dict, int, list[dict]]:
    from platoon.policy.task_table import store_from_snapshot, task_rows

    row, snapshot, pool = _latest_snapshot(run)
    version = row.get("policy_version", row.get("step", row.get("batch", 0))) or 0
    return row, version, task_rows(store_from_snapshot(snapshot, pool), version)


@tasks_app.command("show")
def tasks_show(
    run: Annotated[Path, typer.Argument(help="A run directory.")],
    label: Annotated[str | None, typer.Option(help="Only the tasks of this label.")] = None,
    sort: Annotated[str, typer.Option(help="informative | pass_rate | groups")] = "informative",
    top: Annotated[int | None, typer.Option(help="Show at most this many tasks.")] = None,
) -> None:
    """The per-task statistics of a run's newest readable checkpoint, for tasks with a settled group."""
    from platoon.policy.task_table import SORTS, show_table, sort_rows

    if sort not in SORTS:
        fail(f"--sort must be one of {', '.join(SORTS)}, got {sort!r}", EXIT_USAGE)
    row, version, rows = _task_rows(run)
    pool = [r for r in rows if label is None or r["label"] == label]
    shown = sort_rows([r for r in pool if r["groups"] > 0], sort)
    of_label = f" of label {label}" if label is not None else ""
    typer.echo(f"{run}: checkpoint {row.get('name')}, policy version {version}: {len(shown)} of {len(pool)} "
               f"tasks{of_label} have a settled group")
    typer.echo(show_table(shown[:top] if top is not None else shown))


@tasks_app.command("export")
def tasks_export(
    run: Annotated[Path, typer.Argument(help="A run directory.")],
    out: Annotated[Path, typer.Option("-o", "--out", help="The file to write (.csv, .jsonl or .parquet).")],
    fmt: Annotated[str | None, typer.Option("--format", help="csv | jsonl | parquet (default: from -o).")] = None,
) -> None:
    """Every task of the pool, in pool order, with its statistics (CSV, JSONL or Parquet)."""
    from platoon.policy.task_table import TASK_COLUMNS
    from platoon.runs.atomic import write_atomic

    fmt = fmt or {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}.get(out.suffix, "")
    if fmt not in ("csv", "jsonl", "parquet"):
        fail(f"cannot tell the format of {out}: give --format csv|jsonl|parquet", EXIT_USAGE)
    _, _, rows = _task_rows(run)
    try:
        if fmt == "parquet":
            import pandas as pd

            try:
                pd.DataFrame(rows, columns=list(TASK_COLUMNS)).to_parquet(out, index=False)
            except ImportError as exc:
                fail(f"Parquet needs pyarrow (pip install 'platoon[parquet]'): {exc}", EXIT_RUNTIME)
            return
        if fmt == "jsonl":
            import json

            write_atomic(out, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
            return
        import csv
        import io

        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(TASK_COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        write_atomic(out, buffer.getvalue())
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}", EXIT_RUNTIME)


@env_app.command("list")
def env_list() -> None:
    """Every environment by name (the built-in and installed extensions'), with its distribution and version."""
    from platoon.live.envs.catalog import list_environments, listing_table

    typer.echo(listing_table(list_environments()))


def main() -> None:
    """Console entry point: run the app and turn its outcome into an exit code.

    Usage errors (an unknown option or command, a bad value, no arguments) print their message and exit 64; config
    and extension errors print their report and exit 78; ``typer.Exit`` exits with its code; an abort, an interrupt,
    running out of memory and any other error exit 1 with one line: a user never sees a traceback (unless
    ``PLATOON_TRACEBACK=1``, for a bug report).
    """
    # typer raises click's exceptions; from typer 0.2x on it vendors click, so the class is found through
    # typer's public BadParameter (a UsageError) rather than by importing click
    usage_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
    try:
        result = app(standalone_mode=False)
    except usage_error as exc:
        exc.show()
        sys.exit(EXIT_USAGE)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("platoon: aborted", err=True)
        sys.exit(EXIT_RUNTIME)
    except (ConfigError, ExtensionError) as exc:
        typer.echo(f"platoon: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    except typer.TyperException as exc:  # click's other errors (a file that cannot be opened): already worded
        typer.echo(f"platoon: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        typer.echo("platoon: interrupted", err=True)
        sys.exit(EXIT_RUNTIME)
    except MemoryError:
        typer.echo("platoon: out of memory", err=True)
        sys.exit(EXIT_RUNTIME)
    except Exception as exc:  # the last resort: every error a user can cause has its own message above
        if os.environ.get("PLATOON_TRACEBACK") == "1":
            raise
        typer.echo(f"platoon: internal error: {type(exc).__name__}: {exc} (a bug in platoon; run again with "
                   "PLATOON_TRACEBACK=1 to see where)", err=True)
        sys.exit(EXIT_RUNTIME)
    # without standalone mode, click returns an Exit's code instead of raising it; a command's return is ignored
    sys.exit(result if isinstance(result, int) and not isinstance(result, bool) else 0)


__all__ = ["app", "main", "fail", "EXIT_USAGE"]
