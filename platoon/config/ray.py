"""``train.ray``: the Ray cluster rollouts run on under ``rollout_isolation: ray`` (this project's own section).

``address`` (or ``RAY_ADDRESS``) names a running cluster; without either a local instance starts for the run, quiet,
and stops with it. Each rollout runs in a long-lived actor of a pool spread over the cluster's nodes, each actor
holding ``actor_cpus``, ``actor_memory_bytes`` and ``actor_resources`` (docs/scale-out.md).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from platoon.config.base import ConfigModel


class RayConfig(ConfigModel):
    """Where rollout actors run and what each holds (``rollout_isolation: ray``)."""

    address: str | None = Field(
        None, min_length=1,
        description="A running Ray cluster's address (ray://host:10001 or host:6379); unset: RAY_ADDRESS, else a "
        "local instance that starts and stops with the run.",
    )
    actor_cpus: float = Field(1.0, ge=0, le=1024, description="CPUs each rollout actor holds on its node.")
    actor_memory_bytes: int | None = Field(
        None, ge=1, description="Memory each rollout actor holds on its node (Ray's memory resource); unset: none.",
    )
    actor_resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom resources each rollout actor holds, e.g. {sandbox: 1} for nodes that offer sandboxes.",
    )
    max_actors: int | None = Field(
        None, ge=1, le=100_000,
        description="The most rollout actors alive at once (each runs one rollout at a time and is reused); unset: "
        "max_concurrent_rollouts, the most rollouts that can run at once.",
    )
    start_timeout_seconds: float = Field(
        300.0, gt=0, le=86_400,
        description="How long a rollout waits for an actor that no node can host yet before it fails (the run "
        "stops at its checkpoint once groups fail in a row).",
    )
    runtime_env: dict[str, Any] = Field(
        default_factory=dict,
        description="Ray's runtime_env for the run's actors (env_vars, working_dir, py_modules): how a module of "
        "your own reaches every node.",
    )
