"""vLLM servers that platoon starts with a run and stops with it (``train.inference.launch``).

``Launched.start(spec, model_dir, served_name, logs)`` starts ``spec.servers`` servers as
``PYTHON -m vllm.entrypoints.openai.api_server`` (the Python the user names: vLLM lives in an environment of its own),
each on ``spec.port + i`` with ``VLLM_SERVER_DEV_MODE=1`` (the weight-sync endpoints) and
``--logprobs-mode processed_logprobs``, its output written to ``logs/server-<i>.log``; ``wait_healthy`` waits for
each one's ``/health`` within ``spec.start_timeout_seconds`` (a server that exits meanwhile is named with the end of
its log); ``stop()`` ends them: SIGTERM to each server's process group, SIGKILL to what is left after a grace.

No server outlives the run, however the trainer ends: each server is its own process group (so a stop reaches the
engine processes it starts), and a reaper (``platoon.reaper``) SIGKILLs every process the trainer started once the
trainer is gone, SIGKILL included.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from platoon.live.inference.vllm import InferenceRefused

__all__ = ["Launched", "STOP_GRACE_S"]

STOP_GRACE_S = 20.0
"""How long a server may take to end after SIGTERM before it is SIGKILLed."""

LOG_TAIL_LINES = 8


class Launched:
    """The servers a run started (see the module's doc)."""

    def __init__(self, procs: list[subprocess.Popen], urls: list[str], logs: list[Path], reaper: Any) -> None:
        self.procs, self.urls, self.logs, self.reaper = procs, urls, logs, reaper

    @classmethod
    def start(cls, spec: Any, model_dir: Path, served_name: str, logs: Path) -> Launched:
        """Start the servers ``spec`` (a ``LaunchConfig``) describes; ``InferenceRefused`` when its Python is not
        there or a port is taken."""
        from platoon.reaper import start_reaper

        python = Path(spec.python).expanduser()
        if not (python.is_file() and os.access(python, os.X_OK)):
            raise InferenceRefused(f"train.inference.launch.python: {spec.python} is not an executable file (the "
                                   "Python of the environment vLLM is installed in)")
        ports = [spec.port + i for i in range(spec.servers)]
        for port in ports:
            if not _port_free(spec.host, port):
                raise InferenceRefused(f"train.inference.launch.port: {spec.host}:{port} is taken (another server "
                                       "or run?); choose another port")
        logs.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", **spec.env}
        reaper = start_reaper()
        procs, paths = [], []
        for i, port in enumerate(ports):
            path = logs / f"server-{i}.log"
            with open(path, "ab") as log:
                procs.append(subprocess.Popen(
                    [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                     "--served-model-name", served_name, "--host", spec.host, "--port", str(port),
                     "--logprobs-mode", "processed_logprobs", *spec.args],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
            paths.append(path)
        return cls(procs, [f"http://{spec.host}:{port}" for port in ports], paths, reaper)

    async def wait_healthy(self, timeout_s: float, *, on_wait: Callable[[int, float], None] | None = None) -> float:
        """Wait until every server answers ``/health`` (``on_wait(ready, elapsed_s)`` about once a second);
        the seconds it took. ``InferenceRefused`` when one exits first or ``timeout_s`` passes."""
        import httpx

        began = time.monotonic()
        ready: set[int] = set()
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0)) as client:
            while len(ready) < len(self.procs):
                elapsed = time.monotonic() - began
                for i, proc in enumerate(self.procs):
                    if proc.poll() is not None:
                        raise InferenceRefused(f"vLLM server {self.urls[i]} exited with code {proc.returncode} while "
                                               f"starting; the end of its log {self.logs[i]}:\n{self.tail(i)}")
                    if i not in ready and await _healthy(client, self.urls[i]):
                        ready.add(i)
                if on_wait is not None:
                    on_wait(len(ready), elapsed)
                if len(ready) == len(self.procs):
                    break
                if elapsed > timeout_s:
                    raise InferenceRefused(f"vLLM server(s) {', '.join(u for i, u in enumerate(self.urls) if i not in ready)} "
                                           f"did not answer /health within {timeout_s:g} s "
                                           "(train.inference.launch.start_timeout_seconds); the end of the first "
                                           f"one's log:\n{self.tail(min(set(range(len(self.procs))) - ready))}")
                await asyncio.sleep(1.0)
        return time.monotonic() - began

    def tail(self, i: int) -> str:
        try:
            lines = self.logs[i].read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-LOG_TAIL_LINES:]) or "(empty)"

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """End every server and the processes it started (SIGTERM, then SIGKILL after ``grace_s``)."""
        for proc in self.procs:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            _signal_group(proc, signal.SIGKILL)  # its engine processes too, whether or not it ended
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5.0)
        if self.reaper is not None:
            self.reaper.stop()
            self.reaper = None


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


async def _healthy(client: Any, url: str) -> bool:
    import httpx

    try:
        return (await client.get(f"{url}/health")).status_code == 200
    except httpx.TransportError:
        return False
