"""What ``platoon train`` shows while it runs: a rich progress bar over the run's steps and a line per step (reward,
pass rate, informative share, staleness, permits busy, and held-out pass@1 when measured); warnings and infos above
the bar. All of it on stderr: what a command prints on stdout is its result (the run directory)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

__all__ = ["Console", "step_line"]


class Console:
    """A rich progress bar over the run's steps and a line per step; warnings and infos above the bar."""

    def __init__(self, total: int, done: int = 0, *, enabled: bool = True, title: str = "train",
                 line: Callable[[dict], str] | None = None) -> None:
        """A bar of ``total`` steps, ``done`` of them done, named ``title``; ``line`` writes a step's line (default
        ``step_line``, a training run's)."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from platoon.console import make_console

        self.console = make_console(highlight=False, stderr=True)  # messages: the results go to stdout
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=self.console, disable=not enabled, transient=False)
        self.task = self.progress.add_task(title, total=total, completed=done)
        self.line = line or step_line

    def __enter__(self) -> Console:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    @contextlib.contextmanager
    def activity(self, description: str) -> Iterator[Callable[[str], None]]:
        """A spinner with the time elapsed under the bar while long work runs (a server's start-up); what the
        context gives sets its status line."""
        task = self.progress.add_task(description, total=None)  # a pulsing bar: no total to count to
        try:
            yield lambda status: self.progress.update(task, description=f"{description}: {status}")
        finally:
            self.progress.remove_task(task)

    def log(self, level: str, message: str) -> None:
        from platoon.console import say

        say(self.progress.console, level, message)

    def step(self, row: dict) -> None:
        self.progress.console.print(self.line(row), highlight=False)
        if "trainer/datums" in row or "train/reward_mean" in row or "sft/loss" in row:
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
