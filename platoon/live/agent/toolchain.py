"""Harness toolchains staged on node-local disk, with a stamp that says what each copy was checked against.

A toolchain is a directory tree an environment's harness needs on node-local disk (an agent's binaries, a
sandbox's tools). An environment declares its own with an optional ``toolchains()`` method returning
``Toolchain``\\ s (``run_toolchains``); ``platoon train`` stages them in a thread while it opens the run and saves at
launch, and starts no rollout before that is done (``Staging``; docs/toolchains.md).

Where a copy lives: ``<cache>/<name>-<first 16 hex of its tree hash>``, the cache being ``$PLATOON_TOOLCHAIN_CACHE``,
else ``platoon-toolchains-<uid>`` under node scratch (``$PLATOON_NODE_SCRATCH``, ``$PBS_LOCALDIR``,
``$SLURM_TMPDIR``, ``$TMPDIR``, then ``/tmp``). Beside it:

- ``.<copy>.staged``: the stamp, JSON ``{tree_hash, files, bytes, sessions (the last 32), checked_at}``, written
  to ``.<copy>.staged.<hex>.tmp`` and renamed into place;
- ``.<copy>.lock``: the ``flock`` that one stager at a time holds;
- ``.<copy>.<hex>.partial``: a copy being made (a leftover one is removed by the next stager);
- ``.<copy>.<8 hex>.stale``: a copy that no longer matched its manifest, set aside whole and never removed, since
  rollouts of another job may still run from it.

Rules (``stage``): a copy is current when it exists and this process served it already in this session, or its
stamp has the manifest's tree hash and lists this session (``boot=<boot id> job=<batch job id>``). Otherwise, under
the lock, a kept copy is hashed again: a match adds this session to its stamp (``verified``), a mismatch copies the
source afresh beside it, sets the old one aside and warns (``replaced``); no copy: one is made (``copied``). A cache
platoon cannot write to (read-only, another user's, a full disk) records no check: its kept copy is used unchecked,
with one warning per process (``unchecked``). A toolchain without a tree hash is current whenever its copy exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from platoon.runs.atomic import fsync_dir, json_bytes, write_atomic

log = logging.getLogger("platoon.live")

STAGING_WAIT_S = 600.0
"""The longest a start waits for its toolchains before its rollouts start (they then stage for themselves)."""
KEPT_SESSIONS = 32
"""Sessions a stamp remembers."""
SCRATCH_VARS = ("PLATOON_NODE_SCRATCH", "PBS_LOCALDIR", "SLURM_TMPDIR", "TMPDIR")
JOB_VARS = ("PBS_JOBID", "SLURM_JOB_ID", "LSB_JOBID", "JOB_ID")

__all__ = ["STAGING_WAIT_S", "Staged", "Staging", "Toolchain", "ToolchainError", "cache_dir", "prestage",
           "run_toolchains", "session_id", "stage", "tree_hash"]


class ToolchainError(RuntimeError):
    """A toolchain that cannot be staged (its source is missing, its fresh copy does not match its manifest, a cache
    that cannot hold a copy it lacks)."""


@dataclass(frozen=True)
class Toolchain:
    """A directory tree a harness needs on node-local disk. ``tree_hash``: the manifest's (``tree_hash(source)``);
    None computes it from ``source`` once per process; ``""`` stages without a check (current whenever the copy
    exists)."""

    name: str
    source: Path
    tree_hash: str | None = None

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise ValueError(f"a toolchain's name must be a plain file name, got {self.name!r}")
        object.__setattr__(self, "source", Path(self.source))


@dataclass(frozen=True)
class Staged:
    """Where a toolchain's copy is and how staging found it: ``current``, ``verified``, ``copied``, ``replaced`` or
    ``unchecked`` (``stale``: where a replaced copy was set aside)."""

    toolchain: str
    path: Path
    outcome: str
    stale: Path | None = None


@dataclass(frozen=True)
class TreeDigest:
    hash: str
    files: int
    bytes: int


def tree_hash(root: Path) -> TreeDigest:
    """The SHA-256 of a directory tree: each entry's relative path, kind, executable bit and content (a symlink's
    target), in sorted order; with its file count and bytes."""
    digest = hashlib.sha256()
    files = size = 0
    for rel, path in _walk(Path(root)):
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            digest.update(b"L\0" + rel.encode() + b"\0" + os.readlink(path).encode() + b"\0")
        elif stat.S_ISDIR(st.st_mode):
            digest.update(b"D\0" + rel.encode() + b"\0")
        else:
            files += 1
            size += st.st_size
            digest.update(b"F\0" + rel.encode() + (b"\0x\0" if st.st_mode & 0o111 else b"\0-\0"))
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
            digest.update(b"\0")
    return TreeDigest(digest.hexdigest(), files, size)


def _walk(root: Path) -> Iterator[tuple[str, Path]]:
    if not root.is_dir():
        raise ToolchainError(f"toolchain source {root} is not a directory")
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        for name in sorted(dirnames + filenames):
            path = base / name
            yield path.relative_to(root).as_posix(), path


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$PLATOON_TOOLCHAIN_CACHE``, else ``platoon-toolchains-<uid>`` under the first node scratch set."""
    env = os.environ if environ is None else environ
    if env.get("PLATOON_TOOLCHAIN_CACHE"):
        return Path(env["PLATOON_TOOLCHAIN_CACHE"])
    scratch = next((env[v] for v in SCRATCH_VARS if env.get(v)), "/tmp")
    return Path(scratch) / f"platoon-toolchains-{os.getuid()}"


def session_id(environ: Mapping[str, str] | None = None) -> str:
    """``boot=<boot id> job=<first of PBS_JOBID, SLURM_JOB_ID, LSB_JOBID, JOB_ID>``: one job on one boot of a node."""
    env = os.environ if environ is None else environ
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "unknown"
    job = next((env[v] for v in JOB_VARS if env.get(v)), "")
    return f"boot={boot} job={job}"


def run_toolchains(envs: Iterable[Any]) -> list[Toolchain]:
    """The toolchains the environments declare (an optional ``toolchains()`` method), each name once."""
    seen: dict[str, Toolchain] = {}
    for env in envs:
        declare = getattr(env, "toolchains", None)
        for tc in (declare() if callable(declare) else ()):
            if not isinstance(tc, Toolchain):
                raise TypeError(f"{type(env).__name__}.toolchains() gave {tc!r}, not a platoon Toolchain")
            if seen.get(tc.name, tc) != tc:
                raise ValueError(f"two environments declare different toolchains named {tc.name!r}")
            seen[tc.name] = tc
    return list(seen.values())


# ------------------------------------------------------------------------------------------------------ staging
_SERVED: set[tuple[str, str]] = set()  # (copy path, session) this process staged or found current
_WARNED_UNCHECKED: set[str] = set()
_MANIFESTS: dict[Path, TreeDigest] = {}
_LOCK = threading.Lock()


def _manifest(tc: Toolchain) -> TreeDigest | None:
    if tc.tree_hash == "":
        return None
    if tc.tree_hash is not None:
        return TreeDigest(tc.tree_hash, -1, -1)
    with _LOCK:
        if tc.source not in _MANIFESTS:
            _MANIFESTS[tc.source] = tree_hash(tc.source)
        return _MANIFESTS[tc.source]


def stage(tc: Toolchain, *, cache: Path | None = None, session: str | None = None,
          warn: Callable[[str], None] | None = None) -> Staged:
    """Make sure ``tc``'s copy in ``cache`` is there and checked for this ``session`` (see the module docstring)."""
    warn = warn or log.warning
    cache = Path(cache) if cache is not None else cache_dir()
    session = session if session is not None else session_id()
    manifest = _manifest(tc)
    copy = cache / (f"{tc.name}-{manifest.hash[:16]}" if manifest is not None else tc.name)
    if _current(copy, manifest, session):
        return Staged(tc.name, copy, "current")
    try:
        cache.mkdir(parents=True, exist_ok=True)
        lock = open(cache / f".{copy.name}.lock", "a+b")  # noqa: SIM115 - held across the staging below
    except OSError as exc:
        if copy.is_dir():
            return _unchecked(tc, copy, session, warn, f"its lock file cannot be opened ({exc.strerror})")
        raise ToolchainError(f"cannot stage toolchain {tc.name} in {cache}: {exc.strerror}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _stage_locked(tc, copy, manifest, session, warn)


def _stage_locked(tc: Toolchain, copy: Path, manifest: TreeDigest | None, session: str,
                  warn: Callable[[str], None]) -> Staged:
    cache = copy.parent
    for leftover in [*cache.glob(f".{copy.name}.*.partial"), *cache.glob(f".{copy.name}.staged.*.tmp")]:
        with contextlib.suppress(OSError):
            shutil.rmtree(leftover) if leftover.is_dir() and not leftover.is_symlink() else leftover.unlink()
    if _current(copy, manifest, session):
        return Staged(tc.name, copy, "current")
    if copy.is_dir():
        if manifest is None:
            _serve(copy, session)
            return Staged(tc.name, copy, "current")
        probe = _probe_writable(cache)
        if probe is not None:
            return _unchecked(tc, copy, session, warn, probe)
        found = tree_hash(copy)
        if found.hash == manifest.hash:
            _write_stamp(copy, found, session)
            return Staged(tc.name, copy, "verified")
        fresh = _fresh_copy(tc, copy, manifest)
        stale = cache / f".{copy.name}.{secrets.token_hex(4)}.stale"
        os.rename(copy, stale)
        os.rename(fresh, copy)
        fsync_dir(cache)
        _write_stamp(copy, tree_hash(copy), session)
        warn(f"toolchain {tc.name}: the kept copy {copy} no longer matched its manifest (tree hash {found.hash[:16]}, "
             f"not {manifest.hash[:16]}): it was copied again, and the old copy set aside as {stale.name}")
        return Staged(tc.name, copy, "replaced", stale)
    fresh = _fresh_copy(tc, copy, manifest)
    os.rename(fresh, copy)
    fsync_dir(cache)
    if manifest is not None:
        _write_stamp(copy, tree_hash(copy), session)
    else:
        _serve(copy, session)
    return Staged(tc.name, copy, "copied")


def _current(copy: Path, manifest: TreeDigest | None, session: str) -> bool:
    if not copy.is_dir():
        return False
    if manifest is None or (str(copy), session) in _SERVED:
        return True
    stamp = _read_stamp(copy)
    if stamp is not None and stamp.get("tree_hash") == manifest.hash and session in stamp.get("sessions", ()):
        _serve(copy, session)
        return True
    return False


def _serve(copy: Path, session: str) -> None:
    with _LOCK:
        _SERVED.add((str(copy), session))


def _stamp_path(copy: Path) -> Path:
    return copy.parent / f".{copy.name}.staged"


def _read_stamp(copy: Path) -> dict | None:
    try:
        stamp = json.loads(_stamp_path(copy).read_bytes())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


def _write_stamp(copy: Path, digest: TreeDigest, session: str) -> None:
    """Add ``session`` to the stamp of ``copy`` (hashed to ``digest``), written to a temporary file and renamed."""
    old = _read_stamp(copy) or {}
    sessions = [s for s in old.get("sessions", []) if s != session] if old.get("tree_hash") == digest.hash else []
    stamp = {"tree_hash": digest.hash, "files": digest.files, "bytes": digest.bytes,
             "sessions": [*sessions, session][-KEPT_SESSIONS:], "checked_at": time.time()}
    target = _stamp_path(copy)
    write_atomic(target, json_bytes(stamp), partial=copy.parent / f"{target.name}.{secrets.token_hex(4)}.tmp")
    _serve(copy, session)


def _probe_writable(cache: Path) -> str | None:
    """None when a stamp can be written in ``cache``; else why not."""
    probe = cache / f".platoon-probe.{secrets.token_hex(4)}.tmp"
    try:
        with open(probe, "wb") as f:
            f.write(b"{}\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        return "the disk is full" if exc.errno == errno.ENOSPC else f"no stamp can be written ({exc.strerror})"
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return None


def _unchecked(tc: Toolchain, copy: Path, session: str, warn: Callable[[str], None], why: str) -> Staged:
    with _LOCK:
        first = str(copy) not in _WARNED_UNCHECKED
        _WARNED_UNCHECKED.add(str(copy))
        _SERVED.add((str(copy), session))
    if first:
        warn(f"toolchain {tc.name}: the cache {copy.parent} cannot record a check ({why}), so its kept copy {copy} "
             "is used unchecked")
    return Staged(tc.name, copy, "unchecked")


def _fresh_copy(tc: Toolchain, copy: Path, manifest: TreeDigest | None) -> Path:
    """Copy ``tc``'s source to a partial directory beside ``copy`` and check it against the manifest."""
    if not tc.source.is_dir():
        raise ToolchainError(f"toolchain {tc.name}: its source {tc.source} is not a directory")
    partial = copy.parent / f".{copy.name}.{secrets.token_hex(4)}.partial"
    try:
        shutil.copytree(tc.source, partial, symlinks=True)
        if manifest is not None:
            found = tree_hash(partial).hash
            if found != manifest.hash:
                raise ToolchainError(f"toolchain {tc.name}: a fresh copy of {tc.source} hashes to {found}, not its "
                                     f"manifest's {manifest.hash}")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return partial


def prestage(toolchains: Sequence[Toolchain], *, cache: Path | None = None, session: str | None = None,
             warn: Callable[[str], None] | None = None) -> list[Staged]:
    """Stage every toolchain (ahead of a run: ``platoon prestage CONFIG``); raises the first ToolchainError."""
    return [stage(tc, cache=cache, session=session, warn=warn) for tc in toolchains]


# ------------------------------------------------------------------------------------------- in the background
@dataclass
class Staging:
    """Toolchains staged in a thread while a run opens (``start``); rollouts wait for it (``wait``).

    A failure is logged as a warning (rollouts then stage for themselves); ``results`` holds what was staged. What it
    logs before a logger is attached (``log`` None, a run whose console is not open yet) is kept for ``attach``."""

    toolchains: Sequence[Toolchain]
    log: Callable[[str, str], None] | None = None
    cache: Path | None = None
    results: list[Staged] = field(default_factory=list)
    _done: threading.Event = field(default_factory=threading.Event)
    _began: float = 0.0
    _held: list[tuple[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, log: Callable[[str, str], None]) -> Staging:
        """Log through ``log`` from now on, first what was logged before."""
        with self._lock:
            self.log, held, self._held = log, self._held, []
        for level, message in held:
            log(level, message)
        return self

    def _log(self, level: str, message: str) -> None:
        with self._lock:
            log = self.log
            if log is None:
                self._held.append((level, message))
                return
        log(level, message)

    def start(self) -> Staging:
        self._began = time.monotonic()
        if not self.toolchains:
            self._done.set()
            return self
        threading.Thread(target=self._run, name="platoon-toolchain-staging", daemon=True).start()
        return self

    def _run(self) -> None:
        try:
            for tc in self.toolchains:
                self.results.append(stage(tc, cache=self.cache, warn=lambda m: self._log("warning", m)))
        except (ToolchainError, OSError) as exc:
            self._log("warning", f"toolchain staging failed ({exc}); rollouts stage for themselves")
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait_blocking(self, timeout_s: float = STAGING_WAIT_S) -> bool:
        """Wait (a thread) at most ``timeout_s``; True when staging is done."""
        return self._done.wait(timeout_s)

    async def wait(self, timeout_s: float = STAGING_WAIT_S, poll_s: float = 1.0) -> bool:
        """Wait on the event loop, polling every ``poll_s``, at most ``timeout_s`` of the loop's time; a cancellation
        (a stop) ends the wait. True when staging is done; after a timeout a warning says rollouts start anyway."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while not self._done.is_set():
            left = end - loop.time()
            if left <= 0:
                self._log("warning", f"toolchain staging is not done after {timeout_s:g} s: rollouts start, and "
                                     "stage for themselves")
                return False
            await asyncio.sleep(min(poll_s, left))
        staged = ", ".join(f"{s.toolchain} ({s.outcome})" for s in self.results)
        if staged:
            self._log("info", f"toolchains staged: {staged}, {time.monotonic() - self._began:.1f}s after the start")
        return True
