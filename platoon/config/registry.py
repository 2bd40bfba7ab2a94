"""The component registry: task samplers, group admission rules and environments, by name.

Rules it keeps:
- a name matches ``[^\\s:@]+`` and may not read as a core name after casefolding and ``-`` -> ``_``;
- a name registers once; registering it again is an error;
- ``module:Class`` references are imported on demand; an import failure names the exception;
- installed extensions are found through the ``platoon.extensions`` entry-point group and refused when their
  requirement on platoon excludes the running version, unless ``PLATOON_IGNORE_EXTENSION_REQUIREMENTS`` is set;
- a component registered while an entry point loads has that entry point's origin (its distribution, version and
  ``group:name``, as platoon 0.4.0 records it); any other's origin is its module's (``module_origin``): core's
  (``platoon``), the one distribution that installs the module's top-level package, the editable install whose
  directory holds its file, or none (code that no installed distribution holds).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata as md
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from platoon.config.components import CORE_GROUP_ADMISSIONS, CORE_TASK_SAMPLERS
from platoon.config.errors import ExtensionError

log = logging.getLogger(__name__)

KINDS = ("task_sampler", "group_admission", "environment")
ENTRY_POINT_GROUP = "platoon.extensions"
_NAME = re.compile(r"[^\s:@]+")
_RESERVED = {"task_sampler": CORE_TASK_SAMPLERS, "group_admission": CORE_GROUP_ADMISSIONS, "environment": ()}
_CORE_SENTENCE = {
    "task_sampler": "Core's: auto, weighted, uniform and pass_rate.",
    "group_admission": "Core's: all and informative.",
    "environment": "",
}

_registry: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS}

CORE_DISTRIBUTION = "platoon"


@dataclass(frozen=True)
class Origin:
    """Where a component came from, as lock.json records it: the distribution that provides it and its version, and
    the entry point (``group:name``) whose loading registered it. Each is None when unknown."""

    distribution: str | None = None
    version: str | None = None
    entry_point: str | None = None


_origins: dict[tuple[str, str], Origin] = {}
_loading: Origin | None = None
"""The origin of the entry point being loaded now (``load_extensions``): what registers meanwhile has it."""


def _canonical(name: str) -> str:
    return name.casefold().replace("-", "_")


def register(kind: str, name: str, obj: Any, *, options: Any = None, check: Callable | None = None) -> Any:
    """Register ``obj`` as component ``name`` of ``kind``; sets ``options_schema`` and ``check`` when given."""
    if kind not in KINDS:
        raise ValueError(f"unknown component kind {kind!r}; one of {', '.join(KINDS)}")
    if not isinstance(obj, type):
        raise TypeError(f"@{kind}({name!r}) decorates a class, not {type(obj).__name__}")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{kind} name {name!r} must be non-empty, without whitespace, ':' or '@'")
    if _canonical(name) in {_canonical(n) for n in _RESERVED[kind]}:
        raise ValueError(f"{kind} name {name!r} is core's; choose another name")
    if name in _registry[kind]:
        raise ValueError(f"{kind} {name!r} is registered twice ({_registry[kind][name].__module__} first)")
    if options is not None:
        obj.options_schema = options
    if check is not None:
        obj.check = staticmethod(check)
    _registry[kind][name] = obj
    if _loading is not None:
        _origins[(kind, name)] = _loading
    return obj


def task_sampler(name: str, options: Any = None, check: Callable | None = None) -> Callable[[type], type]:
    """Class decorator: register a task sampler under ``name`` with an options schema."""
    return lambda cls: register("task_sampler", name, cls, options=options, check=check)


def group_admission(name: str, options: Any = None, check: Callable | None = None) -> Callable[[type], type]:
    """Class decorator: register a group admission rule under ``name`` with an options schema."""
    return lambda cls: register("group_admission", name, cls, options=options, check=check)


def environment(name: str) -> Callable[[type], type]:
    """Class decorator: register an environment under ``name``."""
    return lambda cls: register("environment", name, cls)


def lookup(kind: str, name: str) -> Any | None:
    """The class registered under ``name``, or None."""
    load_extensions()
    return _registry[kind].get(name)


def is_registered(kind: str, name: str) -> bool:
    """Whether ``name`` is registered now; unlike ``lookup`` it imports no extension (load-time checks use it)."""
    return name in _registry[kind]


def registered_names(kind: str, *, load: bool = True) -> list[str]:
    """The names registered under ``kind``, sorted; ``load=False`` imports no extension first."""
    if load:
        load_extensions()
    return sorted(_registry[kind])


def unregister(kind: str, name: str) -> None:
    """Forget a registration (tests use it to keep the registry clean)."""
    _registry[kind].pop(name, None)
    _origins.pop((kind, name), None)


def unknown_name_message(kind: str, name: str, *, known: list[str] | None = None) -> str:
    """``unknown <kind> 'x'`` with a did-you-mean suggestion and the sentence naming core's components."""
    pool = list(_RESERVED[kind]) + (known if known is not None else registered_names(kind))
    label = kind.replace("_", " ")
    msg = f"unknown {label} {name!r}"
    close = difflib.get_close_matches(name, pool, n=1, cutoff=0.6)
    if close:
        msg += f"; did you mean {close[0]!r}?"
    sentence = _CORE_SENTENCE[kind]
    if not sentence:
        return msg
    return f"{msg} {sentence}" if msg.endswith("?") else f"{msg}. {sentence}"


def import_ref(ref: str) -> Any:
    """Import ``module:Qualname`` and return the object; failures raise ExtensionError naming the exception."""
    module_name, _, qualname = ref.partition(":")
    if not module_name or not qualname:
        raise ExtensionError(f"{ref!r} is not module:Class")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see
        raise ExtensionError(f"cannot import {module_name!r} for {ref!r}: {type(exc).__name__}: {exc}") from exc
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise ExtensionError(f"{module_name!r} has no {qualname!r} (for {ref!r})") from exc
    return obj


def import_package(package: str) -> None:
    """Import an environment entry's ``package`` so that it registers its components."""
    try:
        importlib.import_module(package)
    except Exception as exc:  # noqa: BLE001
        raise ExtensionError(f"cannot import package {package!r}: {type(exc).__name__}: {exc}") from exc


_extensions_loaded = False


def load_extensions(*, force: bool = False) -> None:
    """Import every installed extension's entry point once, refusing those that exclude this platoon; what each
    registers records the entry point as its origin."""
    global _extensions_loaded, _loading
    if _extensions_loaded and not force:
        return
    _extensions_loaded = True
    for ep in md.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist
        if dist is not None:
            check_extension_requirement(
                dist.metadata["Name"],
                dist.version,
                dist.requires or [],
                extras=dist.metadata.get_all("Provides-Extra") or [],
            )
        _loading = Origin(
            dist.metadata["Name"] if dist is not None else None,
            dist.version if dist is not None else None,
            f"{ep.group}:{ep.name}",
        )
        try:
            ep.load()
        finally:
            _loading = None


def component_origin(kind: str, name: str, module: str | None) -> Origin:
    """The origin of component ``name`` of ``kind`` whose class lives in ``module`` (see the module doc)."""
    return _origins.get((kind, name)) or module_origin(module)


def module_origin(module: str | None) -> Origin:
    """The distribution that holds ``module`` and its version, from installed metadata; ``Origin()`` when none
    does. Core's modules are core's (``platoon``, the running version)."""
    if not module:
        return Origin()
    if module == CORE_DISTRIBUTION or module.startswith(CORE_DISTRIBUTION + "."):
        return Origin(CORE_DISTRIBUTION, running_version())
    names = set(md.packages_distributions().get(module.partition(".")[0], ()))
    if len(names) == 1:
        name = names.pop()
        try:
            return Origin(name, md.version(name))
        except md.PackageNotFoundError:
            return Origin(name)
    return _editable_origin(getattr(sys.modules.get(module), "__file__", None))


def _editable_origin(file: str | None) -> Origin:
    """The editable install (PEP 610 ``dir_info``) whose directory holds ``file``, the innermost one."""
    if file is None:
        return Origin()
    target = Path(file).resolve()
    best: tuple[int, Origin] | None = None
    for dist in md.distributions():
        try:
            info = json.loads(dist.read_text("direct_url.json") or "null")
        except ValueError:
            continue
        if not isinstance(info, dict) or "dir_info" not in info or not str(info.get("url", "")).startswith("file:"):
            continue
        directory = Path(unquote(urlparse(info["url"]).path)).resolve()
        if target.is_relative_to(directory) and (best is None or len(directory.parts) > best[0]):
            best = (len(directory.parts), Origin(dist.metadata["Name"], dist.version))
    return best[1] if best is not None else Origin()


def running_version() -> str:
    from platoon import __version__

    return __version__


def _ignore_requirements() -> bool:
    flag = os.environ.get("PLATOON_IGNORE_EXTENSION_REQUIREMENTS", "").strip().casefold()
    return flag in {"1", "true", "yes", "on"}


def check_extension_requirement(
    dist: str, dist_version: str, requires: list[str], *, extras: Sequence[str] | None = None
) -> None:
    """Refuse an extension whose requirement on platoon excludes the running version (see the module doc).

    A requirement counts when its marker holds with no extra or with any of ``extras`` (the extras the
    distribution provides; None: read them from its installed metadata), so an extension installed without its
    ``platoon`` extra is refused too. Raises ExtensionError naming both versions, unless
    ``PLATOON_IGNORE_EXTENSION_REQUIREMENTS`` is 1/true/yes/on (then it logs a warning and loads it anyway).
    """
    try:
        from packaging.requirements import Requirement
        from packaging.version import Version
    except ImportError:  # pragma: no cover - packaging comes with matplotlib
        return
    running = running_version()
    for line in requires:
        try:
            req = Requirement(line)
        except Exception:  # noqa: BLE001 - an unparseable requirement is not ours to judge
            continue
        if req.name.casefold() != "platoon" or not str(req.specifier):
            continue
        if req.marker is not None and not any(
            req.marker.evaluate({"extra": extra})
            for extra in ["", *(_provided_extras(dist) if extras is None else extras)]
        ):
            continue
        if req.specifier.contains(Version(running), prereleases=True):
            continue
        msg = (
            f"{dist} {dist_version} requires {req}, but platoon {running} is running: install a version of "
            f"{dist} that supports this platoon, or set PLATOON_IGNORE_EXTENSION_REQUIREMENTS=1 to load it anyway"
        )
        if _ignore_requirements():
            log.warning("%s; loading it anyway, since PLATOON_IGNORE_EXTENSION_REQUIREMENTS is set", msg)
            continue
        raise ExtensionError(msg)


def _provided_extras(dist: str) -> list[str]:
    try:
        return md.metadata(dist).get_all("Provides-Extra") or []
    except md.PackageNotFoundError:
        return []
