"""A reaper for processes that platoon starts but cannot arm (``platoon.lifeline`` arms its own): those a library
starts, such as a local Ray instance's GCS server, raylet and agents, which outlive a SIGKILLed driver (Ray 2.60's
dashboard and runtime-env agents were found running a minute after it).

``start_reaper()`` starts a small process of its own session that, while this process lives, notes this process's
descendants every ``POLL_S`` (pid and start time, from ``/proc``), and once this process ends however it ends (its
stdin's end of a pipe only this process holds closes), SIGKILLs every one of them still running, with their own
descendants. A normal end asks no more of it: ``stop()`` after the library's own shutdown kills what that left.
Linux only (``/proc``); elsewhere ``start_reaper`` answers None and the library's own cleanup is all there is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

__all__ = ["Reaper", "start_reaper"]

POLL_S = 0.25


def _start_time(pid: int) -> str | None:
    """Process ``pid``'s start time (field 22 of its stat): with the pid, it names one process, even after reuse."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            out += map(int, Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
    except OSError:
        pass
    return out


def _descendants(roots: list[int]) -> list[int]:
    seen: list[int] = []
    todo = list(roots)
    while todo:
        for child in _children(todo.pop()):
            if child not in seen:
                seen.append(child)
                todo.append(child)
    return seen


class Reaper:
    """The reaper process (``start_reaper``); ``stop()`` ends it, killing what is left."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_reaper() -> Reaper | None:
    """Start the reaper of this process's descendants (None off Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    proc = subprocess.Popen([sys.executable, "-m", "platoon.reaper", str(os.getpid())], stdin=subprocess.PIPE,
                            start_new_session=True, close_fds=True)  # its own session: a signal to ours spares it
    return Reaper(proc)


def reap(root: int) -> None:
    """Note ``root``'s descendants until stdin closes, then SIGKILL those still running (and theirs)."""
    ended = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.buffer.read(), ended.set()), daemon=True).start()
    me = os.getpid()
    noted: dict[int, str] = {}
    while not ended.wait(POLL_S):
        for pid in _descendants([root]):
            if pid != me and pid not in noted and (started := _start_time(pid)) is not None:
                noted[pid] = started
    left = [pid for pid, started in noted.items() if _start_time(pid) == started]
    for pid in left + [p for p in _descendants(left) if p != me]:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__":
    reap(int(sys.argv[1]))
