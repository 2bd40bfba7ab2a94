"""Core components' names and option schemas, and what a component's static ``check`` sees.

These live in the config layer (not beside the classes in ``platoon.policy``) because a config's core options are
checked when it loads, and the config layer may not import the policy layer. The policy layer imports them; so
they import nothing that reaches the file system, the environment or entry points (``tests/test_layering.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from platoon.config.bounds import INT64_MAX, INT64_MIN, MAX_TASKS
from platoon.config.problems import Problem, describe_errors

CORE_TASK_SAMPLERS = ("auto", "weighted", "uniform", "pass_rate")
"""Names core owns at ``train.task_sampler``; nothing registered may take them."""

ENTRY_TASK_SAMPLERS = ("uniform", "pass_rate")
"""Core names an environment entry's own ``task_sampler`` may take (auto and weighted share the run's slots)."""

CORE_GROUP_ADMISSIONS = ("all", "informative")
"""Names core owns at ``train.group_admission``."""

@dataclass(frozen=True)
class SamplerCheckContext:
    """What a task sampler's static ``check(options, ctx)`` sees when the run resolves it (docs/task-samplers.md)."""

    level: str
    entry: str | None
    run_sampler: str
    """``train.task_sampler`` as written (``auto`` when unset)."""
    entries: Mapping[str, Mapping[str, Any]]
    """By label: ``{weight, seed, group_size, success_threshold, task_sampler, task_sampler_options}``."""
    batch_size: int
    label_column: str | None


@dataclass(frozen=True)
class AdmissionCheckContext:
    """What a group admission rule's static ``check(options, ctx)`` sees when the run resolves it (docs/group-admission.md)."""

    level: str
    entry: str | None
    entries: Mapping[str, Mapping[str, Any]]
    batch_size: int
    label_column: str | None
    max_groups_per_step: float
    workflow_gives_verdicts: bool


NUMBER_SEARCH = "platoon-number-search"
"""The built-in environment's name (platoon 0.4.0's, version 1: ``platoon-number-search@1``)."""

CORE_ENVIRONMENTS = (NUMBER_SEARCH,)
"""Environments the runtimes provide without a registration; a config may name them without a package."""

CORE_ENVIRONMENT_VERSIONS = {NUMBER_SEARCH: "1"}
"""Each core environment's version: ``name@version`` must name it."""


def core_environment(env: str) -> str | None:
    """The core environment ``env`` names (``name`` or ``name@version``), or None when it names no core one."""
    name, _, version = env.partition("@")
    if name not in CORE_ENVIRONMENTS or (version and version != CORE_ENVIRONMENT_VERSIONS[name]):
        return None
    return name
CORE_CLASS_PATHS: dict[tuple[str, str], str] = {
    ("task_sampler", "weighted"): "platoon.policy.samplers.weighted:WeightedSampler",
    ("task_sampler", "uniform"): "platoon.policy.samplers.uniform:UniformSampler",
    ("task_sampler", "pass_rate"): "platoon.policy.samplers.pass_rate:PassRateSampler",
    ("group_admission", "all"): "platoon.policy.admission:AdmitAll",
    ("group_admission", "informative"): "platoon.policy.admission:Informative",
    ("environment", NUMBER_SEARCH): "platoon.live.envs.number_search:NumberSearch",
}
"""(kind, core name) -> ``module:Qualname`` of the class that runs it, which lock.json records as ``resolved`` (the
config layer may not import those classes; a test checks each path names the class the runtimes use)."""


class PassRateOptions(BaseModel):
    """Options of the adaptive ``pass_rate`` sampler (Thompson sampling on each task's pass-rate posterior)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    explore: float = Field(0.2, description="Share of draws given to the least recently drawn tasks, in [0, 1].")
    max_draws_per_epoch: int | None = Field(
        3, description="At most this many draws of one task per pool-sized window of decisions; null: no cap."
    )
    max_outstanding_per_task: int | None = Field(
        None, description="At most this many groups of one task in flight at once; null: no limit."
    )
    candidates: int = Field(4096, description="Thompson-score at most this many randomly chosen tasks a decision.")
    seed: int = Field(0, description="Added to the decision-key seed, to vary draws without changing the run seed.")
    evidence: Literal["drift", "versions"] = Field(
        "drift",
        description="drift: a task's evidence moves with the policy's progress (a drift shared by the entry's tasks, "
        "estimated from every settled group) and fades only as the task goes unseen for rounds of the pool; "
        "versions: platoon 0.4.0's, evidence halves every 32 policy versions.",
    )
    near_best: float = Field(
        0.05,
        description="evidence: drift only. Exploitation draws among the candidates whose expected chance to train is "
        "within this of the best candidate's (1.0: every candidate competes on its Thompson sample alone), in (0, 1].",
    )
    explore_order: Literal["least_recent", "reshuffled"] = Field(
        "least_recent",
        description="least_recent: exploration draws the task drawn longest ago (a fixed order once every task has "
        "been drawn); reshuffled: a random task not yet drawn in this pool-sized window (the least recently drawn "
        "once every task has been).",
    )
    forget_versions: float | None = Field(
        None,
        description="evidence: drift only. A task's evidence beyond its prior also halves every this many policy "
        "versions since it came (discounted evidence), beside the fade by rounds of the pool; null: no such fade.",
    )
    importance_cap: float | None = Field(
        None,
        description="Weight each trained group's loss by the ratio of its task's share under uniform draws to its "
        "share of this sampler's recent draws (this window and the previous one), capped at this value, the step's "
        "trained groups' weights then scaled to mean 1 (importance sampling, as prioritized replay corrects its "
        "draws); null: every group weighs 1.",
    )

    @field_validator("explore", mode="before")
    @classmethod
    def _explore(cls, v: object) -> object:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0 <= v <= 1:
            raise ValueError(f"must be between 0 and 1, got {v!r}")
        return v

    @field_validator("near_best", mode="before")
    @classmethod
    def _near_best(cls, v: object) -> object:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0 < v <= 1:
            raise ValueError(f"must be above 0 and at most 1, got {v!r}")
        return v

    @field_validator("forget_versions", mode="before")
    @classmethod
    def _forget_versions(cls, v: object) -> object:
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0):
            raise ValueError(f"must be a number of policy versions above 0, or null, got {v!r}")
        return v

    @field_validator("importance_cap", mode="before")
    @classmethod
    def _importance_cap(cls, v: object) -> object:
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 1):
            raise ValueError(f"must be a number from 1 (the largest weight a group's loss may get), or null, got {v!r}")
        return v

    @model_validator(mode="after")
    def _drift_only(self) -> PassRateOptions:
        if self.evidence == "versions":
            acting = [k for k in ("near_best", "forget_versions") if k in self.model_fields_set]
            if acting:
                raise ValueError(f"{' and '.join(acting)}: only evidence: drift reads it (this sampler's evidence "
                                 "is versions)")
        return self

    @field_validator("max_draws_per_epoch", "max_outstanding_per_task", mode="before")
    @classmethod
    def _positive_or_null(cls, v: object) -> object:
        if v is None:
            return v
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"must be an integer from 1, or null, got {v!r}")
        return v

    @field_validator("candidates", mode="before")
    @classmethod
    def _candidates(cls, v: object) -> object:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"must be an integer from 1, got {v!r}")
        return v

    @field_validator("seed", mode="before")
    @classmethod
    def _seed(cls, v: object) -> object:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"must be an integer, got {v!r}")
        if not INT64_MIN <= v <= INT64_MAX:
            raise ValueError(f"must be a 64-bit integer, from -2**63 to 2**63 - 1, got {v!r}")
        return v


class InformativeOptions(BaseModel):
    """Options of the ``informative`` group admission rule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    band: tuple[float, float] | None = Field(
        None, description="Also reject groups whose pass rate (passes / valid members) lies outside [lo, hi]."
    )

    @field_validator("band", mode="before")
    @classmethod
    def _band(cls, v: object) -> object:
        if v is None:
            return v
        ok = (
            isinstance(v, list | tuple)
            and len(v) == 2
            and all(not isinstance(x, bool) and isinstance(x, int | float) and math.isfinite(x) for x in v)
            and 0 <= v[0] < v[1] <= 1
        )
        if not ok:
            raise ValueError(f"must be two numbers lo < hi between 0 and 1, got {v!r}")
        return tuple(float(x) for x in v)


class NumberSearchOptions(BaseModel):
    """``service_kwargs`` of the built-in ``platoon-number-search`` environment (docs/live-backend.md), checked when a config
    loads as its constructor checks them, within bounds that keep its vocabulary and task grid small."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    ranges: list[Annotated[int, Field(ge=2, le=1024)]] = Field(
        default_factory=lambda: [4, 8, 12, 16, 24], min_length=1, max_length=64,
        description="The ranges N of the task grid (each from 2 to 1024).",
    )
    guess_offsets: list[Annotated[int, Field(ge=-64, le=64)]] = Field(
        default_factory=lambda: [-1, 0, 1, 2], min_length=1, max_length=64,
        description="Guesses allowed, as offsets from binary search's (each from -64 to 64).",
    )
    val_fraction: float = Field(0.25, gt=0, lt=1, description="The share of each (N, g)'s targets held out (split "
                                                              "val).")
    split_seed: int = Field(0, ge=INT64_MIN, le=INT64_MAX, description="The seed of the train/val split.")
    reward: Literal["partial", "binary"] = Field("partial", description="partial credit, or 1 for a find else 0.")
    partial_weight: float = Field(0.5, ge=0, lt=1, description="The weight of partial credit.")
    show_range: bool = Field(False, description="Each answer also names the range still open.")
    action_tokens: int = Field(2, ge=1, le=65_536, description="The tokens one assistant message may take (a task's "
                                                              "max_action_tokens; a chat model's JSON call needs "
                                                              "some 64).")

    @model_validator(mode="after")
    def _grid(self) -> NumberSearchOptions:
        tasks = sum(set(self.ranges)) * len(set(self.guess_offsets))
        if tasks > MAX_TASKS:
            raise ValueError(f"ranges and guess_offsets make a grid of {tasks} tasks; at most {MAX_TASKS}")
        return self


CORE_ENV_SPLITS = {NUMBER_SEARCH: ("train", "val")}
"""The splits of each core environment."""

CORE_EVAL_SPLITS = {NUMBER_SEARCH: "val"}
"""The split each core environment evaluates on when ``eval_dataset_kwargs.split_name`` is null."""


CORE_OPTIONS: dict[tuple[str, str], type[BaseModel] | None] = {
    ("task_sampler", "auto"): None,
    ("task_sampler", "weighted"): None,
    ("task_sampler", "uniform"): None,
    ("task_sampler", "pass_rate"): PassRateOptions,
    ("group_admission", "all"): None,
    ("group_admission", "informative"): InformativeOptions,
    ("environment", NUMBER_SEARCH): NumberSearchOptions,
}
"""(kind, core name) -> options model; None means the component takes no options."""


def core_option_problems(kind: str, name: str, options: Mapping[str, Any], path: str) -> list[Problem]:
    """Problems of the options ``options`` (at dotted ``path``) of core component ``name``; [] when core does not
    own the name (its options are checked when the run resolves it)."""
    if (kind, name) not in CORE_OPTIONS:
        return []
    schema = CORE_OPTIONS[(kind, name)]
    if schema is None:
        leaf = path.rsplit(".", 1)[-1]
        return [Problem(path, f"'{name}' takes no options; leave {leaf} out")] if options else []
    try:
        schema.model_validate(dict(options))
    except ValidationError as exc:
        return describe_errors(exc, root=schema, data=dict(options), prefix=path)
    return []


def core_options(kind: str, name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Core component ``name``'s options parsed, defaults included, JSON-safe (as lock.json records them).

    Raises ValueError (a pydantic ValidationError) when they do not fit; KeyError for a name core does not own.
    """
    schema = CORE_OPTIONS[(kind, name)]
    if schema is None:
        if options:
            raise ValueError(f"'{name}' takes no options")
        return {}
    return schema.model_validate(dict(options)).model_dump(mode="json")


# --- renderers (train.renderer_name; built by platoon.live.agent.renderer.make_renderer) ---------------------

RENDERER_NAMES = ("role_colon", "chat_template")
"""The renderers ``train.renderer_name`` may name (besides ``CHAT_TEMPLATE_ALIASES``)."""

CHAT_TEMPLATE_ALIASES: Mapping[str, Mapping[str, Any]] = {
    "llama3": {}, "qwen3": {}, "qwen3_instruct": {}, "qwen3_5": {}, "deepseekv3": {}, "nemotron3": {},
    "qwen3_disable_thinking": {"enable_thinking": False},
    "qwen3_5_disable_thinking": {"enable_thinking": False},
    "nemotron3_disable_thinking": {"enable_thinking": False},
    "deepseekv3_thinking": {"thinking": True},
    "deepseekv3_disable_thinking": {"thinking": False},
    "qwen3_6_preserve_thinking": {}, "qwen3_8_preserve_thinking": {},
    "qwen3_6_preserve_thinking_disable_thinking": {"enable_thinking": False},
    "qwen3_8_preserve_thinking_disable_thinking": {"enable_thinking": False},
}
"""0.4.0's renderer names for a model family's own format, each with the template variables it sets
(``chat_template_kwargs``): here the checkpoint's chat template renders them, and the tool-call parser follows what
the template writes (llama3: llama3_json; qwen3*: hermes; qwen3_5 and nemotron3: qwen3_coder; deepseekv3:
deepseek_v3). Reasoning is always kept in the context as sampled, which is what ``*_preserve_thinking`` asked."""

UNSUPPORTED_RENDERERS: Mapping[str, str] = {
    **dict.fromkeys(("kimi_k2", "kimi_k25", "kimi_k25_disable_thinking"),
                    "Kimi K2's tool-call format has no parser here"),
    **dict.fromkeys(("gpt_oss_no_sysprompt_reasoning", "gpt_oss_low_reasoning", "gpt_oss_medium_reasoning",
                     "gpt_oss_high_reasoning"), "gpt-oss's harmony format (channels, its tool calls) is not rendered "
                                                "or parsed here"),
    **dict.fromkeys(("qwen3_vl", "qwen3_vl_instruct"), "vision-language models (image inputs) are not served here"),
}
"""0.4.0's renderer names this project cannot honour, with why."""


def renderer_name_problem(name: str) -> str | None:
    """Why ``train.renderer_name`` cannot be ``name`` (None: it can)."""
    if name in RENDERER_NAMES or name in CHAT_TEMPLATE_ALIASES:
        return None
    if name in UNSUPPORTED_RENDERERS:
        return (f"{name!r} is 0.4.0's renderer for a model family this platoon cannot train: "
                f"{UNSUPPORTED_RENDERERS[name]} (docs/renderers.md lists the families it can)")
    return (f"{name!r} is not a renderer here; use role_colon (the tiny model's) or chat_template (the tokenizer's "
            "own chat template; docs/renderers.md)")
