"""A tool call's time limit (``train.workflow_config.rollout_config.step_timeout``): a call that runs past it raises
``ToolTimeout`` where it stands, and its rollout fails as if the tool had raised.

An environment may answer a call with an awaitable (it does I/O the asyncio way): the awaitable is cancelled at the
limit. Or it may block (a ``requests`` call, a subprocess wait, a game engine's loop): a blocking call holds the
event loop, so nothing else can time it; on the main thread of its process (the trainer's, a rollout worker's) an
interval timer's ``SIGALRM`` raises ``ToolTimeout`` inside the blocked call. Python runs a signal's handler between
bytecodes and interrupts the system calls it waits in (PEP 475: a handler that raises ends the wait), so a sleep, a
socket read or a pure-Python loop stops at the limit; C code that never returns to the interpreter stops when it
does. Off the main thread, or where the process has a ``SIGALRM`` handler or timer of its own, a blocking call is
not bounded (the awaitable part still is).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class ToolTimeout(TimeoutError):
    """A tool call ran past ``rollout_config.step_timeout``."""


def tool_timeout(name: str, seconds: float) -> ToolTimeout:
    return ToolTimeout(f"tool {name!r} ran past rollout_config.step_timeout ({seconds:g} s)")


def _alarm_usable() -> bool:
    return (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
            and signal.getitimer(signal.ITIMER_REAL)[0] == 0.0)


@contextmanager
def blocking_deadline(name: str, seconds: float | None) -> Iterator[None]:
    """Run the block with ``seconds`` to finish (None: no limit), else ``ToolTimeout`` naming tool ``name``."""
    if seconds is None or not _alarm_usable():
        yield
        return
    armed = True

    def ring(signum: int, frame: Any) -> None:
        if armed:  # the timer can ring between the block's end and its disarming: that ring is not a timeout
            raise tool_timeout(name, seconds)

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)
