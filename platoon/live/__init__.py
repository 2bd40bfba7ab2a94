"""The live backend: ``platoon train`` and ``platoon eval`` on a real policy, with asyncio rollouts.

Public names (imported lazily, so that ``platoon.experimental``'s ``rollout_lease`` and a config check import no
torch): ``GroupRolloutWorkflow`` and what it runs on (``GroupRow``, ``Rollout``), the lease face
(``rollout_lease``, ``RolloutLease``, ``background_teardown``, ``first_model_call``), the runtime
(``LiveRuntime``) and the builder of a run from its config (``build_live``). See docs/live-runtime.md.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GroupRolloutWorkflow": "platoon.live.workflow",
    "GroupRow": "platoon.live.workflow",
    "Rollout": "platoon.live.workflow",
    "workflow_runs_on_lease": "platoon.live.workflow",
    "workflow_gives_verdicts": "platoon.live.workflow",
    "RolloutLease": "platoon.live.lease",
    "rollout_lease": "platoon.live.lease",
    "background_teardown": "platoon.live.lease",
    "first_model_call": "platoon.live.lease",
    "LiveRuntime": "platoon.live.runtime",
    "build_live": "platoon.live.build",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'platoon.live' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
