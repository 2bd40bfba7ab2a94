"""The environments a rollout worker plays: built from their entries' specs, or found built in its fork server.

An ``EnvSpec`` is what an entry says of its environment (``env``, ``service_kwargs``, ``package``): a worker builds
the same instance the trainer built from it (``resolve_environment``), unless its fork server built it before forking
(``run_plan``, from the preload plan; ``ENVIRONMENTS``, keyed by the spec), with the task lists of the run's splits
already listed. An environment the trainer did not build from a spec (handed to ``build_live`` as an object) travels
to each worker pickled instead.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ENVIRONMENTS", "PLAN_VARIABLE", "EnvSpec", "environment", "run_plan"]

PLAN_VARIABLE = "PLATOON_WORKER_PRELOAD_PLAN"
"""Where the trainer hands its fork server the preload plan (``platoon.live.workers._plan`` reads it)."""

ENVIRONMENTS: dict[str, Any] = {}
"""The environments this process's fork server built before forking it, by ``EnvSpec.key``."""


@dataclass(frozen=True)
class EnvSpec:
    """An entry's environment as its config names it; ``splits``: the splits whose task lists a fork server lists."""

    env: str
    options: Mapping[str, Any] = field(default_factory=dict)
    package: str | None = None
    splits: Sequence[str] = ()

    @property
    def key(self) -> str:
        return json.dumps([self.env, dict(self.options), self.package], sort_keys=True, default=repr)

    def build(self) -> Any:
        from platoon.live.envs.resolve import resolve_environment

        return resolve_environment(self.env, self.options, package=self.package)

    def to_json(self) -> dict[str, Any]:
        return {"env": self.env, "options": dict(self.options), "package": self.package, "splits": list(self.splits)}


def environment(spec: EnvSpec) -> Any:
    """The instance of ``spec``: the fork server's, else built here."""
    env = ENVIRONMENTS.get(spec.key)
    return spec.build() if env is None else env


def run_plan(builds: Sequence[Mapping[str, Any]]) -> None:
    """Build each environment of a preload plan and list its splits' tasks (in the fork server, before it forks).
    One that fails (screening built it, so it should not) is left to the workers, with its error on stderr."""
    for b in builds:
        spec = EnvSpec(b["env"], b.get("options") or {}, b.get("package"), tuple(b.get("splits") or ()))
        try:
            env = spec.build()
            for split in spec.splits:
                env.task_ids(split)
        except Exception as exc:  # noqa: BLE001 - the fork server must go on serving
            print(f"platoon: the rollout workers' fork server could not build {spec.env}: {exc}", file=sys.stderr)
            continue
        ENVIRONMENTS[spec.key] = env
