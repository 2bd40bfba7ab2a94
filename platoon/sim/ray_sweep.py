"""A sweep's points as Ray tasks (``platoon simulate --sweep ... --ray [--ray-address ADDR]``).

- Ray is imported only here, and only for ``--ray``: without it installed, ``import_ray`` raises UsageError naming
  ``pip install 'platoon[ray]'`` (exit 64).
- Where: ``--ray-address ADDR`` (``auto``, ``HOST:PORT``, ``ray://HOST:10001``) connects to that cluster; without
  it, the cluster ``RAY_ADDRESS`` names (as ``ray job submit`` sets it), else a local instance of this machine's
  CPUs, quiet (no dashboard, Ray's own logging at WARNING) and shut down when the sweep ends (``platoon.ray_connect``). A process already
  connected (``ray.init`` called by a caller of ``sweep``) keeps its connection, and it is left open.
- Each point is one task of one CPU, given its config as loaded and checked by the driver (a config file is not
  read again on another node; files the config names must be at the same paths there). It runs in a temporary
  directory of its node and sends the run directory back whole (a gzipped tar), which the driver unpacks into the
  sweep's directory (``platoon.runs.shipped``: a point appears there whole or not at all): the run directories are
  the process pool's, with no file system shared between the nodes. Every node needs this platoon installed.
- Points are yielded as they finish (``ray.wait``), at most ``jobs`` running at once when given. A point that
  fails raises its own exception here (not Ray's wrapper), as the process pool does, and the points still running
  are cancelled; a point that raised is not run again. Unlike the pool's, a failed point leaves no directory: it
  wrote into its node's temporary directory, removed when the task ends.
- A point whose Ray worker dies (killed, out of memory, its node lost) is run again from its start, up to
  ``POINT_RETRIES`` times: it wrote only into its node's temporary directory and comes back whole or not at all, so
  a point is never half-run into the sweep. One that dies every time ends the sweep with ``PointLost`` (exit 1),
  naming it; the points that finished stay in the sweep's directory.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from platoon.config.models import RunConfig
from platoon.ray_connect import connect, init_options
from platoon.runs.shipped import pack, unpack
from platoon.sim.run import UsageError, run_point_config

MISSING = "--ray runs the sweep on Ray, which is not installed: pip install 'platoon[ray]'"
POINT_RETRIES = 2
"""The times a point whose worker died is run again (Ray's ``max_retries``, which counts system failures only)."""


class PointLost(RuntimeError):
    """A point's Ray worker died on every try (exit 1)."""


def import_ray() -> ModuleType:
    """The ``ray`` module; raises UsageError (exit 64) when it is not installed."""
    try:
        import ray
    except ImportError:
        raise UsageError(MISSING) from None
    return ray


@contextlib.contextmanager
def connected(ray: ModuleType, address: str | None) -> Iterator[None]:
    """Ray connected for the sweep and disconnected after it (``platoon.ray_connect``: a local instance ends with
    it, however the sweep ends), unless the process was connected already."""
    disconnect = connect(ray, address)
    try:
        yield
    finally:
        if disconnect is not None:
            disconnect()


def ray_points(cfgs: Sequence[RunConfig], dirs: Sequence[Path], *, address: str | None = None,
               jobs: int | None = None) -> Generator[tuple[Path, list[str]], None, None]:
    """Run each ``cfgs[i]`` into the new directory ``dirs[i]`` as a Ray task; yield ``(dir, warnings)`` as each
    finishes. Raises UsageError without Ray, and a failed point's own exception."""
    ray = import_ray()
    with connected(ray, address):
        task = ray.remote(num_cpus=1, max_retries=POINT_RETRIES, retry_exceptions=False)(run_shipped)
        waiting = list(zip(cfgs, dirs, strict=True))
        running: dict[Any, Path] = {}
        try:
            while waiting or running:
                while waiting and (jobs is None or len(running) < jobs):
                    cfg, out = waiting.pop(0)
                    running[task.remote(cfg, out.name)] = out
                [ref], _ = ray.wait(list(running), num_returns=1)
                out = running.pop(ref)
                warnings, packed = _result(ray, ref, out)
                unpack(packed, out)
                yield out, warnings
        finally:  # a failed or interrupted sweep stops its other points (on a cluster, they would run on)
            for ref in running:
                ray.cancel(ref)


def _result(ray: ModuleType, ref: Any, out: Path) -> tuple[list[str], bytes]:
    try:
        return ray.get(ref)
    except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.OwnerDiedError) as err:
        raise PointLost(f"sweep point {out.name} was lost: its Ray worker died on each of its {POINT_RETRIES + 1} "
                        f"tries ({type(err).__name__}); the points that finished are in {out.parent}") from None
    except ray.exceptions.RayTaskError as err:
        # Ray's wrapper carries the remote traceback in its message; the point's own exception is what the command
        # line maps to an exit code and a one-line message
        if err.cause is None:
            raise
        raise err.cause from err


def run_shipped(cfg: RunConfig, name: str) -> tuple[list[str], bytes]:
    """A point on any node: run ``cfg`` into a temporary directory ``name``; return its warnings and the directory
    packed (``unpack``)."""
    with tempfile.TemporaryDirectory(prefix="platoon-sweep-") as tmp:
        out = Path(tmp) / name
        warnings = run_point_config(cfg, out)
        return warnings, pack(out)


__all__ = ["MISSING", "POINT_RETRIES", "PointLost", "connected", "import_ray", "init_options", "ray_points", "run_shipped"]
