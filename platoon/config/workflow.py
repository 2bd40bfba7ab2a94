"""``train.workflow_config`` and an entry's ``workflow_config``: how a group's rollouts run and what a group trains.

The names and defaults are platoon 0.4.0's (docs/configuration.md, "train.workflow_config"). What acts here:
``group_size``, the straggler keys (``straggler_timeout_seconds``, ``straggler_quorum``, ``straggler_policies`` by
label), ``min_successful_group_size``, ``leave_one_out_baseline``, ``filter_zero_advantage_datums`` and, of
``rollout_config.inference_params``, ``temperature`` and ``max_completion_tokens``, and ``rollout_config.max_steps``.
The rest are typed as 0.4.0
types them and marked ``NO_EFFECT`` (``platoon.config.base``): a config that sets them loads with one warning.

An entry's ``workflow_config`` holds only the keys a mixture may set per entry (0.4.0's ``EntryWorkflowSettings``);
each left null inherits ``train.workflow_config``'s (``platoon.config.effective.entry_workflow``).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from platoon.config.base import ConfigModel
from platoon.config.bounds import INT64_MAX, INT64_MIN, MAX_GROUP, MAX_SECONDS

_DOTTED_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")

_WORKERS = ("one pool of rollout workers runs every entry's rollouts: set it in train.workflow_config")


class StragglerPolicy(ConfigModel):
    """One label's straggler policy (``train.workflow_config.straggler_policies.<label>``)."""

    timeout_seconds: float | None = Field(
        None, gt=0, le=MAX_SECONDS,
        description="Once the quorum has settled, cut the rest this many seconds later (a late starter gets its "
        "start delay on top); null: no cutoff for this label.",
    )
    quorum: int | None = Field(
        None, ge=1, le=MAX_GROUP, description="Settled members that start the clock; null: group_size - 1."
    )


class InferenceParams(ConfigModel):
    """Sampling parameters of a rollout's model calls."""

    NO_EFFECT: ClassVar[frozenset[str]] = frozenset({"top_p", "top_k"})

    temperature: float | None = Field(
        None, gt=0, le=100, description="Sampling temperature of rollouts (and of the trainer's log-probabilities); "
        "null: 1.0.",
    )
    top_p: float | None = Field(None, description="Nucleus sampling (no effect here: the built-in sampler draws "
                                                  "from the whole distribution).")
    top_k: int | None = Field(None, description="Top-k sampling (no effect here).")
    max_completion_tokens: int | None = Field(
        None, ge=1, le=65_536,
        description="Tokens one model call may generate, capped by the environment's own limit; null: the "
        "environment's limit.",
    )


_ROLLOUT_NO_EFFECT = frozenset({
    "model_name", "train", "max_steps", "output_dir", "verbose", "timeout", "step_timeout", "return_dict",
    "propagate_root_success", "skip_subagent_reward_computation", "enable_subagent_verifiers", "sampling_precedence",
    "extra", "judges",
})


class RolloutConfig(ConfigModel):
    """``train.workflow_config.rollout_config``: how one rollout runs. Of it, ``inference_params``, ``max_steps``
    and ``step_timeout`` act here (the tool-calling harness's budgets); the rest steers 0.4.0's agent harnesses, which this
    backend does not have."""

    UNKNOWN_KEY_HINTS: ClassVar[dict[str, str]] = {
        "propogate_root_success": "unknown key; platoon 0.3.0 removed it; use propagate_root_success",
    }
    NO_EFFECT: ClassVar[frozenset[str]] = _ROLLOUT_NO_EFFECT - {"max_steps", "step_timeout"}

    model_name: str | None = Field(None, description="Set by the trainer (no effect here).")
    train: bool = Field(False, description="Set by the trainer (no effect here).")
    max_steps: int | None = Field(
        None, ge=1, le=1_000_000, description="The most turns (assistant messages) an episode may take, besides its "
        "task's own max_turns; null: the task's.",
    )
    output_dir: str = Field("rollout_results", description="Where a harness writes rollouts (no effect here).")
    verbose: bool = Field(True, description="Harness logging (no effect here).")
    timeout: float | None = Field(None, description="The root agent's time limit, seconds (no effect here).")
    step_timeout: float = Field(
        300, gt=0, description="The seconds one tool call may take; past them the call raises ToolTimeout where it "
        "stands and its rollout fails, as if the tool had raised (platoon.live.envs.deadline says how a blocking "
        "call is stopped).",
    )
    return_dict: bool = Field(False, description="No effect here.")
    propagate_root_success: bool | None = Field(None, description="Subagent rewards (no effect here).")
    skip_subagent_reward_computation: bool = Field(False, description="Subagent rewards (no effect here).")
    enable_subagent_verifiers: bool = Field(True, description="Subagent verifiers (no effect here).")
    inference_params: InferenceParams = Field(
        default_factory=InferenceParams, description="Sampling parameters of the rollouts' model calls."
    )
    sampling_precedence: Literal["request", "config"] = Field(
        "request", description="Whose sampling parameters win at the gateway (no effect here)."
    )
    extra: dict[str, Any] = Field(default_factory=dict, description="Harness extras (no effect here).")
    judges: bool = Field(True, description="LLM judges (no effect here).")


class EntryRolloutConfig(ConfigModel):
    """An entry's ``workflow_config.rollout_config``: the keys one entry may set. None acts here: the trainer reads
    log-probabilities at one temperature, so sampling parameters are the run's alone."""

    NO_EFFECT: ClassVar[frozenset[str]] = _ROLLOUT_NO_EFFECT | {"inference_params"}

    max_steps: int | None = Field(None, description="No effect here.")
    timeout: float | None = Field(None, description="No effect here.")
    step_timeout: float | None = Field(None, description="No effect here.")
    inference_params: InferenceParams | None = Field(
        None, description="This entry's sampling parameters (no effect here: the run's apply to every entry)."
    )
    sampling_precedence: Literal["request", "config"] | None = Field(None, description="No effect here.")
    extra: dict[str, Any] | None = Field(None, description="No effect here.")
    propagate_root_success: bool | None = Field(None, description="No effect here.")
    skip_subagent_reward_computation: bool | None = Field(None, description="No effect here.")
    enable_subagent_verifiers: bool | None = Field(None, description="No effect here.")


_WORKFLOW_NO_EFFECT = frozenset({
    "depth_level_weighting", "depth_level_discount_gamma", "subagent_datum_keep_probability",
    "subagent_datum_sampling_seed", "filter_errors", "filter_message_actions",
})

_WORKER_KEYS = frozenset({
    "rollout_isolation", "worker_start_method", "worker_preload", "worker_startup_budget_seconds",
    "worker_finalize_grace_seconds", "worker_parent_grace_seconds", "worker_termination_grace_seconds",
    "worker_launch_concurrent_groups", "worker_rss_soft_limit_bytes", "worker_mem_available_floor_bytes",
    "worker_binding_poll_seconds", "worker_unbounded_rollout_budget_seconds", "worker_python_env_isolation",
})
"""The rollout-worker keys. Of them ``rollout_isolation``, ``worker_start_method``, ``worker_preload``,
``worker_termination_grace_seconds``, ``worker_parent_grace_seconds`` and the launch gate's
``worker_launch_concurrent_groups``, ``worker_rss_soft_limit_bytes`` and ``worker_mem_available_floor_bytes`` act
(``platoon.live.workers``, docs/rollout-workers.md), and
``worker_startup_budget_seconds`` sets the start limit's timer (``platoon.policy.start_limit``); the rest are
``NO_EFFECT``."""

_WORKER_KEYS_ACTING = frozenset({
    "rollout_isolation", "worker_start_method", "worker_preload", "worker_termination_grace_seconds",
    "worker_startup_budget_seconds", "worker_parent_grace_seconds", "worker_launch_concurrent_groups",
    "worker_rss_soft_limit_bytes", "worker_mem_available_floor_bytes",
})


class WorkflowConfig(ConfigModel):
    """``train.workflow_config``: each group's rollouts, what a group needs to train, and the rollout workers."""

    UNKNOWN_KEY_HINTS: ClassVar[dict[str, str]] = {
        "max_starting_rollouts": "unknown key; platoon 0.4.0 moved it; use train.max_starting_rollouts",
        "straggler_policy_key": "unknown key; platoon 0.3.0 removed it; use train.label_by",
    }
    NO_EFFECT: ClassVar[frozenset[str]] = _WORKFLOW_NO_EFFECT | (_WORKER_KEYS - _WORKER_KEYS_ACTING)

    group_size: int = Field(8, ge=1, le=MAX_GROUP, description="Rollouts per task (a group); an entry may set its own.")
    rollout_config: RolloutConfig = Field(default_factory=RolloutConfig, description="How one rollout runs.")
    leave_one_out_baseline: bool = Field(
        False, description="A rollout's advantage is its reward minus the mean of the group's other rollouts "
        "(false: minus the group's mean).",
    )
    depth_level_weighting: bool = Field(False, description="Subagent datums (no effect here).")
    depth_level_discount_gamma: float | None = Field(None, description="Subagent datums (no effect here).")
    subagent_datum_keep_probability: float = Field(1.0, description="Subagent datums (no effect here).")
    subagent_datum_sampling_seed: int = Field(0, description="Subagent datums (no effect here).")
    filter_errors: bool = Field(True, description="Errored trajectories (no effect here: a rollout that raises "
                                                  "fails its group).")
    filter_message_actions: bool = Field(False, description="Message actions (no effect here).")
    filter_zero_advantage_datums: bool = Field(
        True, description="Leave datums whose advantage is exactly 0 out of the trainer's batch (they carry no "
        "policy gradient); a step whose every advantage is 0 takes no optimizer update.",
    )
    straggler_timeout_seconds: float | None = Field(
        None, gt=0, le=MAX_SECONDS,
        description="Once straggler_quorum members have settled, cut the rest this many seconds later (a member "
        "that started late gets its start delay on top); null: no cutoff. A deadline against runaway rollouts, not "
        "a throughput lever: cut members are censored.",
    )
    straggler_quorum: int | None = Field(
        None, ge=1, le=MAX_GROUP,
        description="Settled members that start the straggler clock; null: group_size - 1. Needs "
        "straggler_timeout_seconds.",
    )
    straggler_policies: dict[str, StragglerPolicy] = Field(
        default_factory=dict,
        description="Label -> its own {timeout_seconds, quorum}, replacing the keys above for that label's groups.",
    )
    min_successful_group_size: int = Field(
        1, ge=1, le=MAX_GROUP,
        description="Fewest scored rollouts a group needs to train (at most group_size); below it the group trains "
        "nothing.",
    )
    rollout_isolation: Literal["inprocess", "process", "ray"] = Field(
        "inprocess", description="inprocess: rollouts run in the trainer's process; process: each in a worker "
        "process of its own, its model calls served by the trainer's model service; ray: each in a Ray actor of a "
        "pool spread over a cluster's nodes (train.ray), its model calls served likewise.",
    )
    worker_start_method: Literal["forkserver", "exec"] = Field(
        "forkserver", description="How rollout workers start (rollout_isolation: process): forkserver forks each "
        "from a fork server that imported the worker's stack and what the environments open with, screened for "
        "fork safety; exec starts a fresh interpreter each, which imports everything itself.",
    )
    worker_preload: list[str] = Field(
        default_factory=list,
        description="Modules (dotted names) the workers' fork server also imports before it forks them (ones an "
        "environment imports only as it opens); screened for fork safety like the rest.",
    )
    worker_startup_budget_seconds: float = Field(
        300.0, gt=0, le=MAX_SECONDS,
        description="A worker's start-up budget; here it sets the start limit's timer (this plus 300 s) and bounds "
        "a launch's wait for memory (worker_mem_available_floor_bytes, worker_rss_soft_limit_bytes).",
    )
    worker_finalize_grace_seconds: float = Field(120.0, ge=0, le=MAX_SECONDS, description="Rollout workers.")
    worker_parent_grace_seconds: float = Field(
        60.0, ge=0, le=MAX_SECONDS,
        description="How long a rollout worker may outlive its trainer: where the kernel's parent-death signal "
        "(Linux) does not end it at once, a worker whose trainer is gone is ended this long after.",
    )
    worker_termination_grace_seconds: float = Field(
        10.0, ge=0, le=MAX_SECONDS,
        description="How long a cancelled rollout worker may take to unwind its rollout before it is killed.",
    )
    worker_launch_concurrent_groups: int = Field(
        2, ge=1, description="At most this many groups launch rollout workers at once (a launch: from its start "
        "to its worker being ready, its imports done); evaluation's episodes are one group.",
    )
    worker_rss_soft_limit_bytes: int = Field(
        24 * 1024**3, ge=0, le=INT64_MAX,
        description="A worker launch waits while the workers' resident memory in all (each one's PSS, else RSS; "
        "launches in flight at one worker's estimate) is over this; 0: no limit.",
    )
    worker_mem_available_floor_bytes: int = Field(
        0, ge=0, le=INT64_MAX,
        description="A worker launch waits while the memory available (the node's MemAvailable, or its memory "
        "cgroup's room where less), less the launches in flight at one worker's estimate, is under this; 0: keep "
        "1 GiB (or 5% of the node's memory, if less) free.",
    )
    worker_binding_poll_seconds: float = Field(5.0, gt=0, le=MAX_SECONDS, description="Rollout workers.")
    worker_unbounded_rollout_budget_seconds: float = Field(86400.0, gt=0, le=MAX_SECONDS,
                                                           description="Rollout workers.")
    worker_python_env_isolation: bool = Field(False, description="Rollout workers (needs rollout_isolation: process).")

    @field_validator("worker_preload")
    @classmethod
    def _modules(cls, v: list[str]) -> list[str]:
        bad = [m for m in v if not _DOTTED_MODULE.fullmatch(m)]
        if bad:
            raise ValueError(f"must be dotted module names such as pkg.mod, got {', '.join(map(repr, bad))}")
        return v


class EntryWorkflowConfig(ConfigModel):
    """An entry's ``workflow_config``: the per-entry keys; each null one inherits ``train.workflow_config``'s."""

    UNKNOWN_KEY_HINTS: ClassVar[dict[str, str]] = {key: f"unknown key; {_WORKERS}" for key in _WORKER_KEYS}
    # leave_one_out_baseline and min_successful_group_size act run-wide only in this release (the trainer and the
    # simulator read train.workflow_config's); an entry's own value is checked, and warned about as no effect.
    NO_EFFECT: ClassVar[frozenset[str]] = frozenset({
        "filter_errors", "filter_message_actions", "subagent_datum_keep_probability", "subagent_datum_sampling_seed",
        "leave_one_out_baseline", "min_successful_group_size",
    })

    group_size: int | None = Field(None, ge=1, le=MAX_GROUP, description="Rollouts per group of this entry.")
    leave_one_out_baseline: bool | None = Field(None, description="No effect per entry here (the run's applies).")
    min_successful_group_size: int | None = Field(None, ge=1, le=MAX_GROUP,
                                                  description="No effect per entry here (the run's applies).")
    straggler_timeout_seconds: float | None = Field(None, gt=0, le=MAX_SECONDS,
                                                    description="See train.workflow_config.")
    straggler_quorum: int | None = Field(None, ge=1, le=MAX_GROUP, description="See train.workflow_config.")
    filter_errors: bool | None = Field(None, description="No effect here.")
    filter_message_actions: bool | None = Field(None, description="No effect here.")
    subagent_datum_keep_probability: float | None = Field(None, description="No effect here.")
    subagent_datum_sampling_seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX, description="No effect here.")
    rollout_config: EntryRolloutConfig | None = Field(None, description="This entry's rollout keys.")


__all__ = ["EntryRolloutConfig", "EntryWorkflowConfig", "InferenceParams", "RolloutConfig", "StragglerPolicy",
           "WorkflowConfig"]
