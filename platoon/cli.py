"""The ``platoon`` command line: simulate, calibrate, train, eval, prestage, config, tasks, env, report.

Exit codes: 0 ok, 1 runtime failure, 64 usage error, 78 configuration error (every problem in one report, no
traceback). Each command's body lives in the layer that owns it; this module parses arguments, calls that body,
prints what it returns and maps its errors to exit codes (``exits``). Nothing here writes a file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

import typer

from platoon.config.errors import (
    EXIT_CONFIG,
    EXIT_INTERRUPTED,
    EXIT_RUNTIME,
    EXIT_USAGE,
    ConfigError,
    ExtensionError,
    UsageError,
)
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


def _version(shown: bool) -> None:
    if shown:
        from platoon import __version__

        typer.echo(f"platoon {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print platoon's version and exit.")] = False,
) -> None:
    """Asynchronous RL training of LLM agents, with a dispatch policy you can simulate before you train."""


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


Errors = type[BaseException] | tuple[type[BaseException], ...]
Rule = tuple[Errors, int] | tuple[Errors, int, Callable[[Any], str]]
CONFIG: Rule = ((ConfigError, ExtensionError), EXIT_CONFIG)
"""A config or an extension that does not load: its report, exit 78 (every command that reads a config)."""
USAGE: Rule = (UsageError, EXIT_USAGE)
"""A command's arguments that the layer below refused before it read anything: exit 64."""


@contextmanager
def exits(*rules: Rule) -> Iterator[None]:
    """Turn what the block raises into an exit: the first rule ``(errors, code[, message])`` that matches prints
    ``platoon: <message(error)>`` (default: the error's own text) and exits with ``code``; anything else goes on
    to ``main``."""
    try:
        yield
    except Exception as exc:
        for errors, code, *message in rules:
            if isinstance(exc, errors):
                fail(message[0](exc) if message else str(exc), code)
        raise


def _note(line: str) -> None:
    """A checkpoint a reader passed over: one ``platoon:`` line on stderr."""
    typer.echo(f"platoon: {line}", err=True)


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
    similar_by: Annotated[
        str | None, typer.Option("--similar-by", help="With --like: the task columns, comma-separated, of the "
                                 "learning model's similarity groups (platoon calibrate --similar-by).")
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
    from platoon.report import show_simulated
    from platoon.runs.rundir import NotARunDirectory
    from platoon.sim import command

    config, overrides = config_and_overrides(arguments, config, overrides)
    request = command.Request(config=config, preset=preset, permit_release=permit_release,
                              overrides=tuple(overrides), steps=steps, seed=seed, out=out, resume=resume,
                              sweep=tuple(sweep or ()), jobs=jobs, workload=workload, like=like, ray=ray,
                              ray_address=ray_address,
                              similar_by=tuple(c.strip() for c in similar_by.split(",") if c.strip())
                              if similar_by else ())
    console = make_console()
    with exits((command.USAGE_ERRORS, EXIT_USAGE), CONFIG,
               (FileExistsError, EXIT_USAGE, lambda exc: f"{exc}; give another --out"),
               (NotARunDirectory, EXIT_USAGE, lambda exc: f"--resume {exc}"),
               (command.RUNTIME_ERRORS, EXIT_RUNTIME)):
        outcome = command.simulate(request, console)
    show_simulated(outcome, console)


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
    from platoon.live.launch.command import TrainError, TrainUsageError
    from platoon.live.launch.command import train as run_train
    from platoon.runs.writer import RunBusyError

    config, overrides = config_and_overrides(arguments, config, overrides)
    if resume is not None and out is not None:
        fail("--resume writes to the run it resumes: give --out or --resume, not both", EXIT_USAGE)
    with exits(CONFIG, ((TrainUsageError, RunBusyError), EXIT_USAGE), (TrainError, EXIT_RUNTIME)):
        path = run_train(config, overrides, out=out, resume=resume, steps=steps)
    typer.echo(f"run directory: {path}")


@app.command()
def sft(
    arguments: Annotated[list[str] | None, config_arguments("the embedded default")] = None,
    config: ConfigOption = None,
    overrides: SetOption = None,
    out: Annotated[Path | None, typer.Option("--out", help="The run directory (default: runs/sft-<n>).")] = None,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="Go on from this SFT run's newest checkpoint.")
    ] = None,
    steps: Annotated[int | None, typer.Option("--steps", min=1, help="sft.steps (with --resume: the new total).")] = None,
) -> None:
    """Fine-tune the policy on demonstrations (an environment's, or a JSONL file's); train.init_from: the run
    directory starts platoon train from its weights (docs/warm-start.md)."""
    from platoon.live.launch.command import TrainError, TrainUsageError
    from platoon.live.sft.command import sft as run_sft
    from platoon.runs.writer import RunBusyError

    config, overrides = config_and_overrides(arguments, config, overrides)
    if resume is not None and out is not None:
        fail("--resume writes to the run it resumes: give --out or --resume, not both", EXIT_USAGE)
    if resume is not None and (config is not None or overrides):
        fail("--resume takes the run's own config: give no CONFIG or overrides (--set, KEY=VALUE) with it", EXIT_USAGE)
    with exits(CONFIG, ((TrainUsageError, RunBusyError), EXIT_USAGE), (TrainError, EXIT_RUNTIME)):
        path = run_sft(config, overrides, out=out, resume=resume, steps=steps)
    typer.echo(f"run directory: {path}")


@app.command("eval")
def evaluate(
    target: Annotated[str, typer.Argument(help="A config (its initial policy) or a run directory (its last checkpoint).")],
    n: Annotated[int, typer.Option("--n", min=1, help="Held-out episodes to play.")] = 1024,
    by_task: Annotated[Path | None, typer.Option(
        "--by-task", help="Also write each held-out task's episodes, passes, pass@1 and columns here (.csv or "
                          ".jsonl).")] = None,
) -> None:
    """Held-out pass@1, with a 95% confidence interval, of the initial or a trained policy."""
    from platoon.live.launch.command import TrainError, TrainUsageError
    from platoon.live.launch.command import evaluate as run_eval
    from platoon.runs.export import write_csv, write_jsonl

    if by_task is not None and by_task.suffix not in (".csv", ".jsonl"):
        fail(f"--by-task writes .csv or .jsonl, got {by_task}", EXIT_USAGE)
    with exits(CONFIG, (TrainUsageError, EXIT_USAGE), (TrainError, EXIT_RUNTIME)):
        report = run_eval(target, n=n)
    typer.echo(report.line())
    if by_task is not None:
        try:
            if by_task.suffix == ".jsonl":
                write_jsonl(by_task, report.by_task)
            else:
                write_csv(by_task, report.by_task, list(dict.fromkeys(k for r in report.by_task for k in r)))
        except OSError as exc:
            fail(f"cannot write {by_task}: {exc.strerror or exc}", EXIT_RUNTIME)
        typer.echo(f"wrote {len(report.by_task)} held-out tasks to {by_task}")


@app.command()
def prestage(
    arguments: Annotated[list[str] | None, config_arguments("none: a config is needed")] = None,
    config: ConfigOption = None,
    overrides: SetOption = None,
) -> None:
    """Stage the harness toolchains of a config's environments on this node, ahead of a run (docs/toolchains.md)."""
    from platoon.live.agent.toolchain import ToolchainError
    from platoon.live.launch.command import prestage as run_prestage

    config, overrides = config_and_overrides(arguments, config, overrides)
    if config is None:
        fail("prestage needs a CONFIG", EXIT_USAGE)
    with exits(CONFIG, ((ToolchainError, OSError), EXIT_RUNTIME)):
        staged = run_prestage(config, overrides)
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

    with exits(((FileNotFoundError, CorruptFileError), EXIT_RUNTIME),
               (OSError, EXIT_RUNTIME, lambda exc: f"cannot write the report: {exc.strerror or exc} "
                                                   f"({exc.filename or out})")):
        written = write_report(runs, out)
    for path in written:
        typer.echo(str(path))


@app.command()
def trace(
    run: Annotated[Path, typer.Argument(help="A run directory (its trace.json), or a trace.json file.")],
    out: Annotated[Path | None, typer.Option("-o", "--out", help="Where to write it (default: RUN-NAME.trace.json "
                                                                 "in the current directory).")] = None,
) -> None:
    """Write a run's trace.json as a closed, valid JSON array (the live file leaves its ] off, so that it loads at any
    moment), for tools that want strict JSON; open it in Perfetto (https://ui.perfetto.dev) or chrome://tracing."""
    from platoon.runs.atomic import write_atomic
    from platoon.runs.trace import closed_trace

    source = run / "trace.json" if run.is_dir() else run
    if not source.is_file():
        fail(f"{run}: no trace.json there (a run with trace.enabled: false, or no run)", EXIT_USAGE)
    target = out if out is not None else Path(f"{run.resolve().name if run.is_dir() else run.stem}.trace.json")
    with exits((OSError, EXIT_RUNTIME)):
        write_atomic(target, closed_trace(source))
    typer.echo(str(target))


@app.command()
def calibrate(
    run: Annotated[Path, typer.Argument(help="A live run directory (trained with the trace on).")],
    out: Annotated[Path | None, typer.Option("-o", "--out", help="Write the workload here (YAML); default: print it.")] = None,
    similar_by: Annotated[str | None, typer.Option(
        "--similar-by", help="Task columns, comma-separated, that name the learning model's similarity groups "
                             "(default: the run's train.label_by, else none).")] = None,
) -> None:
    """Fit the simulator's workload (its sim block) from a live run's trace and logs, and say how well each fit holds."""
    from platoon.runs.atomic import CorruptFileError
    from platoon.sim.calibrate import CalibrationError, calibrate_to

    columns = [c.strip() for c in similar_by.split(",") if c.strip()] if similar_by else None
    with exits(((CalibrationError, ConfigError, CorruptFileError), EXIT_RUNTIME)):
        text = calibrate_to(run, out, similar_by=columns)
    typer.echo(text, nl=False)


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
    from platoon.config.validate import check_files

    files, positional = split_arguments(arguments or ())
    lister = None
    if tasks:  # the live layer builds each environment to list its tasks: imported only when asked
        from platoon.live.launch.build import listed_tasks as lister
    with exits(USAGE):
        checked = check_files([*(configs or ()), *map(Path, files)], [*(overrides or ()), *positional], kind=kind,
                              schema=schema, resolve=resolve, strict=strict, list_tasks=lister)
    failed = False
    for verdict in checked:
        typer.echo(verdict.text)
        failed |= verdict.failed
    if failed:
        raise typer.Exit(EXIT_CONFIG)


@config_app.command("show")
def config_show(
    arguments: Annotated[list[str] | None, config_arguments("the embedded default")] = None,
    config: ConfigOption = None,
    overrides: SetOption = None,
    defaults: Annotated[
        bool, typer.Option("--defaults", help="Every field with its description as a comment, the keys with no effect in this release "
                                       "commented out (loads back as is).")
    ] = False,
) -> None:
    """Print a config as it loads (overrides applied, every default filled in) as YAML: with no CONFIG, what train,
    simulate and sft run without one, as a file to copy (its runs go to log_path: runs)."""
    from platoon.config.loader import load_config
    from platoon.config.show import shown

    config, overrides = config_and_overrides(arguments, config, overrides)
    as_file = ["log_path=runs"] if config is None else []  # a config file names where its runs go
    with exits(CONFIG):
        cfg = load_config(config, [*as_file, *overrides])
    typer.echo(shown(cfg, defaults=defaults), nl=False)


@tasks_app.command("show")
def tasks_show(
    run: Annotated[Path, typer.Argument(help="A run directory.")],
    label: Annotated[str | None, typer.Option(help="Only the tasks of this label.")] = None,
    sort: Annotated[str, typer.Option(help="informative | pass_rate | groups")] = "informative",
    top: Annotated[int | None, typer.Option(help="Show at most this many tasks.")] = None,
) -> None:
    """The per-task statistics of a run's newest readable checkpoint, for tasks with a settled group."""
    from platoon import tasks

    with exits(USAGE, (tasks.ERRORS, EXIT_RUNTIME)):
        text = tasks.show(run, label=label, sort=sort, top=top, note=_note)
    typer.echo(text)


@tasks_app.command("export")
def tasks_export(
    run: Annotated[Path, typer.Argument(help="A run directory.")],
    out: Annotated[Path, typer.Option("-o", "--out", help="The file to write (.csv, .jsonl or .parquet).")],
    fmt: Annotated[str | None, typer.Option("--format", help="csv | jsonl | parquet (default: from -o).")] = None,
) -> None:
    """Every task of the pool, in pool order, with its statistics (CSV, JSONL or Parquet)."""
    from platoon import tasks

    with exits(USAGE, (tasks.ERRORS, EXIT_RUNTIME)):
        tasks.export(run, out, fmt, note=_note)


@env_app.command("list")
def env_list() -> None:
    """Every environment by name (the built-in and installed extensions'), with its distribution and version."""
    from platoon.live.envs.catalog import list_environments, listing_table

    typer.echo(listing_table(list_environments()))


class Terminated(SystemExit):
    """SIGTERM reached the process: it unwinds (every ``finally`` runs: logs closed, the run's lock given back) as
    a ``SystemExit``, which no ``except Exception`` stops and the event loop lets through."""


def _how_to_go_on() -> str:
    """What the run this process wrote has saved and the command that goes on with it."""
    from platoon.runs.resume import go_on_note
    from platoon.runs.writer import last_written_run

    run = last_written_run()
    note = go_on_note(run) if run is not None else None
    return note or "a run goes on from its last checkpoint with --resume"


def _interrupted() -> NoReturn:
    """Ctrl-C: what was saved, how to go on, and exit 130 (the shell's code for an interrupt)."""
    typer.echo(f"platoon: interrupted; {_how_to_go_on()}", err=True)
    sys.exit(EXIT_INTERRUPTED)


def _terminated(signum: int, frame: object) -> None:
    sys.unraisablehook = _left_by_the_termination
    raise Terminated(EXIT_RUNTIME)


def _left_by_the_termination(unraisable: object) -> None:
    """An object the unwinding left half-built (a zip whose buffer went first) may fail in its ``__del__``: the
    termination's doing, already said in one line, so not printed as a traceback."""


def _run_app() -> object:
    """The app's outcome, an error raised while SIGTERM unwound being the ``Terminated`` it hides: a cleanup that
    fails half-way (a zip closed with a member still open) must not turn a termination into an internal error."""
    try:
        return app(standalone_mode=False)
    except Exception as exc:
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, Terminated):
            cause = cause.__context__
        if cause is not None:
            raise Terminated(EXIT_RUNTIME) from exc
        raise


def disk_words(exc: OSError) -> str:
    """A file that could not be written or read, in words: the file, the system's reason, and (a full disk) how a
    run goes on. Every write of a run's state is atomic, so nothing past its last checkpoint is lost."""
    said = f"{exc.filename}: {exc.strerror or exc}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return (f"the disk is full, writing {said}; the run's last checkpoint stands: free some space, then go on "
                "with --resume")
    return said


def internal_error(exc: Exception) -> NoReturn:
    """An error no user can cause: one line and exit 1 (its traceback under ``PLATOON_TRACEBACK=1``)."""
    if os.environ.get("PLATOON_TRACEBACK") == "1":
        raise exc
    typer.echo(f"platoon: internal error: {type(exc).__name__}: {exc} (a bug in platoon; run again with "
               "PLATOON_TRACEBACK=1 to see where)", err=True)
    sys.exit(EXIT_RUNTIME)


def main() -> None:
    """Console entry point: run the app and turn its outcome into an exit code.

    Usage errors (an unknown option or command, a bad value, no arguments) print their message and exit 64; config
    and extension errors print their report and exit 78; ``typer.Exit`` exits with its code; an abort, an interrupt
    (SIGINT: exit 130, saying what was saved and how to go on; SIGTERM unwinds too, saying the same),
    running out of memory and any other error exit 1 with one line: a user never sees a traceback (unless
    ``PLATOON_TRACEBACK=1``, for a bug report).
    """
    # typer raises click's exceptions; from typer 0.2x on it vendors click, so the class is found through
    # typer's public BadParameter (a UsageError) rather than by importing click
    usage_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
    with contextlib.suppress(ValueError):  # only the main thread may (a caller's other thread keeps its handler)
        signal.signal(signal.SIGTERM, _terminated)  # unwind: logs closed, the run's lock given back
    from platoon.runs.writer import forget_last_run

    forget_last_run()  # what an interruption reports is this command's run
    try:
        result = _run_app()
    except Terminated:
        typer.echo(f"platoon: terminated (SIGTERM); {_how_to_go_on()}", err=True)
        sys.exit(EXIT_RUNTIME)
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
        _interrupted()
    except MemoryError:
        typer.echo("platoon: out of memory", err=True)
        sys.exit(EXIT_RUNTIME)
    except OSError as exc:
        if exc.filename is None:  # not a file's: a bug, as below
            internal_error(exc)
        typer.echo(f"platoon: {disk_words(exc)}", err=True)
        sys.exit(EXIT_RUNTIME)
    except Exception as exc:  # the last resort: every error a user can cause has its own message above
        internal_error(exc)
    # without standalone mode, click returns an Exit's code instead of raising it; a command's return is ignored
    if result == EXIT_INTERRUPTED:  # typer's word for Ctrl-C (KeyboardInterrupt becomes Exit(130), returned)
        _interrupted()
    sys.exit(result if isinstance(result, int) and not isinstance(result, bool) else 0)


__all__ = ["app", "main", "fail", "EXIT_USAGE"]
