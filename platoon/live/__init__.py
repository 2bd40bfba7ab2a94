"""The live backend: ``platoon train`` and ``platoon eval`` on a real policy, with asyncio rollouts.

Public names (imported lazily, so that ``platoon.experimental``'s ``rollout_lease`` and a config check import no
torch): ``GroupRolloutWorkflow`` and what it runs on (``GroupRow``, ``Rollout``), the lease face
(``rollout_lease``, ``RolloutLease``, ``background_teardown``, ``first_model_call``), the runtime
(``LiveRuntime``) and the builder of a run from its config (``build_live``). See docs/live-runtime.md.

The rooms: ``runtime`` (the executor of the driver's decisions on the event loop), ``rollouts`` (group workflows,
leases, traced rollouts, held-out evaluation), ``inference`` (the policy model and the services that sample it),
``training`` (datums, the trainer, checkpoints), ``agent`` (renderers, the tool-calling harness, toolchains),
``envs`` (environments), ``workers`` (rollouts in processes or on Ray), ``sft`` (``platoon sft``), ``launch`` (the
commands' bodies, a run built from its config) and ``resume`` (``platoon train --resume``).

The modules that sat at the top of this package before it had rooms (``platoon.live.workflow``,
``platoon.live.model``, ``platoon.live.command``, ...) still import under their old paths, each as the very module
of its room (``_MOVED``), so that code written against them keeps working.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

_EXPORTS = {
    "GroupRolloutWorkflow": "platoon.live.rollouts.workflow",
    "GroupRow": "platoon.live.rollouts.workflow",
    "Rollout": "platoon.live.rollouts.workflow",
    "workflow_runs_on_lease": "platoon.live.rollouts.workflow",
    "workflow_gives_verdicts": "platoon.live.rollouts.workflow",
    "RolloutLease": "platoon.live.rollouts.lease",
    "rollout_lease": "platoon.live.rollouts.lease",
    "background_teardown": "platoon.live.rollouts.lease",
    "first_model_call": "platoon.live.rollouts.lease",
    "LiveRuntime": "platoon.live.runtime",
    "build_live": "platoon.live.launch.build",
}

__all__ = sorted(_EXPORTS)

#: A module's path before the rooms -> the module it is now.
_MOVED = {
    f"platoon.live.{name}": f"platoon.live.{room}.{name}"
    for room, names in {
        "training": ("trainer", "datums", "checkpoint"),
        "inference": ("model", "model_kinds", "hf", "service"),
        "agent": ("toolchain",),
        "rollouts": ("workflow", "lease", "lease_host", "rollout_trace", "evaluate"),
        "launch": ("command", "build", "progress", "errors", "train_config"),
    }.items()
    for name in names
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path of ``_MOVED`` as the module it moved to: the same object under both names, so that a
    patch through one is seen through the other. The module keeps its own ``__name__`` and ``__spec__`` (which
    the import system would otherwise overwrite with the old path's)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(fullname, self) if fullname in _MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(_MOVED[spec.name])
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'platoon.live' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
