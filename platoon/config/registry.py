"""The component registry: task samplers, group admission rules and environments, by name.

Rules it keeps:
- a name matches ``[^\\s:@]+`` and may not read as a core name after casefolding and ``-`` -> ``_``;
- a name registers once; registering it again is an error;
- ``module:Class`` references are imported on demand; an import failure names the exception;
- installed extensions are found through the ``platoon.extensions`` entry-point group and refused when their
  requirement on platoon excludes the running version, unless ``PLATOON_IGNORE_EXTENSION_REQUIREMENTS`` is set.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata as md
import logging
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

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
    """Import every installed extension's entry point once, refusing those that exclude this platoon."""
    global _extensions_loaded
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
        ep.load()


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
