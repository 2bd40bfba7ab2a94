"""The ``platoon`` command line: simulate, train, eval, config, tasks, report.

Exit codes: 0 ok, 1 runtime failure, 64 usage error, 78 configuration error (every problem in one report, no
traceback). Each command's body lives in the layer that owns it; this module parses arguments and maps errors to
exit codes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from platoon.config.errors import EXIT_CONFIG, EXIT_RUNTIME, EXIT_USAGE, ConfigError, ExtensionError

app = typer.Typer(
    name="platoon",
    help="Asynchronous RL training of LLM agents, with a dispatch policy you can simulate before you train.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Validate and print configs.", no_args_is_help=True)
tasks_app = typer.Typer(help="Per-task statistics of a run.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(tasks_app, name="tasks")

SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a key: dotted.key=value (YAML-typed), list indices allowed: a.0.b=1."),
]


def fail(message: str, code: int) -> NoReturn:
    """Print ``platoon: message`` to stderr and exit with ``code``."""
    typer.echo(f"platoon: {message}", err=True)
    raise typer.Exit(code)


def not_built(command: str, issue: str) -> NoReturn:
    fail(f"'{command}' is not built yet ({issue}); see the README for what works today", EXIT_RUNTIME)


@app.command()
def simulate(
    config: Annotated[Path | None, typer.Argument(help="A run config (YAML); none: a preset.")] = None,
    overrides: SetOption = None,
) -> None:
    """Run the dispatch policy in the SimPy simulator and print a summary table."""
    not_built("platoon simulate", "the simulator issue")


@app.command()
def train(
    config: Annotated[Path | None, typer.Argument(help="A run config (YAML); none: the embedded default.")] = None,
    overrides: SetOption = None,
) -> None:
    """Train a policy with the live asyncio + PyTorch backend."""
    not_built("platoon train", "the live backend issue")


@app.command("eval")
def evaluate(target: Annotated[str, typer.Argument(help="A config or a run directory.")]) -> None:
    """Held-out pass@1 of the initial or a trained policy."""
    not_built("platoon eval", "the live backend issue")


@app.command()
def report(runs: Annotated[list[Path], typer.Argument(help="One or more run directories.")]) -> None:
    """Plots and a side-by-side table of one or more runs (simulated or live)."""
    not_built("platoon report", "the simulator issue")


@config_app.command("validate")
def config_validate(
    configs: Annotated[list[Path] | None, typer.Argument(help="Run configs (YAML) to check.", show_default=False)] = None,
    overrides: SetOption = None,
    no_resolve: Annotated[
        bool, typer.Option("--no-resolve", help="Check the file only: import no package, resolve no component.")
    ] = False,
) -> None:
    """Check configs: each one's every problem with its key path; exit 78 if any fails, 64 if none is given."""
    from platoon.config.loader import load_config, load_config_warnings

    if not configs:
        fail("config validate needs at least one CONFIG", EXIT_USAGE)
    failed = False
    for path in configs:
        try:
            cfg = load_config(path, overrides or (), strict_resolve=not no_resolve)
        except (ConfigError, ExtensionError) as exc:
            failed = True
            typer.echo(f"FAIL {path}")
            for line in getattr(exc, "problems", None) or [str(exc)]:
                typer.echo(f"  {line}")
            continue
        typer.echo(f"ok   {path}")
        for warning in load_config_warnings(cfg):
            typer.echo(f"  warning: {warning}")
    if failed:
        raise typer.Exit(EXIT_CONFIG)


@config_app.command("show")
def config_show(
    config: Annotated[Path | None, typer.Argument(help="A run config (YAML); none: the embedded default.")] = None,
    overrides: SetOption = None,
    defaults: Annotated[
        bool, typer.Option("--defaults", help="Every field with its description as a comment (loads back as is).")
    ] = False,
) -> None:
    """Print a config as it loads (overrides applied, every default filled in) as YAML."""
    from platoon import __version__
    from platoon.config.loader import load_config, to_yaml
    from platoon.config.resolve import entry_summary

    try:
        cfg = load_config(config, overrides or ())
    except (ConfigError, ExtensionError) as exc:
        fail(str(exc), EXIT_CONFIG)
    if defaults:
        typer.echo(f"# platoon {__version__} run config: every field, each with its description")
    typer.echo(to_yaml(cfg, comments=defaults), nl=False)
    if not defaults:
        typer.echo("# each entry's effective settings:")
        for i in range(len(cfg.environments)):
            typer.echo(f"#   {entry_summary(cfg, i)}")


def main() -> None:
    """Console entry point: run the app and turn its outcome into an exit code.

    Usage errors (an unknown option or command, a bad value, no arguments) print their message and exit 64; config
    and extension errors print their report and exit 78; ``typer.Exit`` exits with its code; an abort exits 1.
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
    # without standalone mode, click returns an Exit's code instead of raising it; a command's return is ignored
    sys.exit(result if isinstance(result, int) and not isinstance(result, bool) else 0)


__all__ = ["app", "main", "fail", "EXIT_USAGE"]
