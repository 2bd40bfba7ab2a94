"""A process platoon starts ends when the process that started it does, however that one ends.

Every such process (a rollout worker under either start method, the fork server, the screening interpreter and its
children, a simulator sweep's pool process) calls ``die_with_parent(parent)`` first thing, ``parent`` being the pid that started it, as its starter
knew it. Rules it keeps:

- **Linux**: the kernel kills the process (``SIGKILL``) when its parent ends: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``
  through ctypes. The kernel ties the signal to the *thread* that created the child, so a starter must create it from
  a thread that lives as long as the process does (the pool's start threads; the fork server's opener);
- **the race**: a parent that ended before the ``prctl`` took effect sends nothing, so the process then checks
  ``os.getppid()``: a parent other than ``parent`` (re-parented already) means it ends at once (exit code 1);
- **elsewhere, and as a fallback** (``watch_parent``): a daemon thread polls whether the trainer is alive (its pid,
  and the direct parent); once it is gone, the process may outlive it ``grace_s`` (``worker_parent_grace_seconds``:
  time to unwind, as its channel's EOF already asks a worker to), then it ends (``os._exit``), removing the files
  it names first.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["die_with_parent", "parent_alive", "watch_parent"]

_PR_SET_PDEATHSIG = 1
POLL_S = 0.5
"""How often ``watch_parent`` looks (at most; a shorter grace looks more often)."""


def die_with_parent(parent: int | None) -> bool:
    """Have the kernel kill this process when its parent ends (Linux), and end it now if ``parent`` (the pid that
    started it) is not its parent any more. Whether the kernel took the request (False off Linux: rely on
    ``watch_parent``)."""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            # the process's own symbols (libc's among them): find_library would run ldconfig in every worker
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if parent is not None and os.getppid() != parent:  # it ended before the prctl: no signal will come
        os._exit(1)
    return armed


def parent_alive(pid: int) -> bool:
    """Whether process ``pid`` still exists (a zombie counts as gone only once reaped; its parent is dead then)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, someone else's (the pid was reused): not ours any more
        return False
    return True


def watch_parent(parent: int, trainer: int, grace_s: float, files: Sequence[str] = ()) -> threading.Thread:
    """Start a daemon thread that ends this process ``grace_s`` after its parent (``parent``, the pid that started
    it) or its trainer (``trainer``) is gone, removing ``files`` first; the thread."""

    def watching() -> None:
        poll = max(0.05, min(POLL_S, grace_s / 4 if grace_s else POLL_S))
        while os.getppid() == parent and parent_alive(trainer):
            time.sleep(poll)
        time.sleep(grace_s)  # what the channel's EOF started (a cancelled rollout unwinding) may end it first
        for path in files:
            Path(path).unlink(missing_ok=True)
        os._exit(1)

    thread = threading.Thread(target=watching, name="platoon-parent-watch", daemon=True)
    thread.start()
    return thread
