"""Stage 1's rules between fields: the problems of a config that no single field's own check can see.

What this module owns: ``config_problems`` (docs/configuration.md, docs/group-admission.md, docs/dispatch.md), in five groups: names that nothing could
resolve (with a did-you-mean), task samplers that cannot go together, admission rules and their options, and the
entries (duplicate names, group sizes against the batch, the permits and the quorum, label limits, a core environment's options
and splits, the model's shape, min_successful_group_size), and the loss's settings (``train.loss_fn_config``
against the keys ``train.loss_fn`` takes).

Rules it keeps:
- it imports no extension: a name passes when it is core, ``module:Class``, registered already, or when some
  entry's package may register it (stage 2, ``platoon.config.resolve``, imports and resolves);
- a rule that reads a value which failed its own check (``invalid``) is skipped, so one mistake is reported once;
- every problem is a ``Problem`` at a dotted key path, and the message says what to change.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from platoon.config import registry
from platoon.config.bounds import MAX_ROLLOUTS
from platoon.config.components import (
    CORE_ENV_SPLITS,
    CORE_ENVIRONMENT_VERSIONS,
    CORE_ENVIRONMENTS,
    CORE_EVAL_SPLITS,
    CORE_GROUP_ADMISSIONS,
    CORE_TASK_SAMPLERS,
    ENTRY_TASK_SAMPLERS,
    core_environment,
    core_option_problems,
    renderer_name_problem,
)
from platoon.config.effective import entry_admission, entry_workflow, group_size
from platoon.config.errors import ExtensionError
from platoon.config.inference import problems as inference_problems
from platoon.config.losses import loss_fn_config_problems
from platoon.config.models import RunConfig
from platoon.config.problems import Problem
from platoon.config.tracking import problems as tracking_problems

_Ok = Callable[..., bool]


def config_problems(cfg: RunConfig, *, invalid: frozenset[str] = frozenset()) -> list[Problem]:
    """Stage 1's rules between fields (docs/configuration.md, docs/group-admission.md, docs/dispatch.md), every problem in one list.

    ``invalid`` holds dotted paths whose values failed their own checks (the loader validated defaults in their
    place): a rule that reads such a path, or a path above or below it, is skipped, so no problem is reported
    about a default the user did not write.
    """

    def ok(*paths: str) -> bool:
        return not any(
            p == q or p.startswith(q + ".") or q.startswith(p + ".") for p in invalid for q in paths
        )

    # A package may register any name; so might one whose value was invalid.
    pkgs = any(e.package for e in cfg.environments) or any(p in invalid for p in _each(cfg, "package"))
    return (
        _name_problems(cfg, ok, pkgs)
        + _sampler_problems(cfg, ok)
        + _admission_problems(cfg, ok)
        + _entry_problems(cfg, ok)
        + _loss_problems(cfg, ok)
        + _checkpoint_problems(cfg, ok)
        + (tracking_problems(cfg.stats.loggers, cfg.stats.wandb, cfg.stats.mlflow) if ok("stats") else [])
        + (inference_problems(cfg.train.inference, cfg.train.model_name)
           if ok("train.inference", "train.model_name") else [])
    )


def _each(cfg: RunConfig, leaf: str) -> list[str]:
    return [f"environments.{i}.{leaf}" for i in range(len(cfg.environments))]


def _unresolvable(kind: str, name: str, core: tuple[str, ...], path: str, packages: bool) -> Problem | None:
    if name and (name in core or ":" in name or packages or registry.is_registered(kind, name)):
        return None
    if name:  # an installed extension may register it: import them only now, when a name is not known otherwise
        try:
            registry.load_extensions()
        except ExtensionError as exc:
            return Problem(path, f"{name!r}: {exc}")
        if registry.is_registered(kind, name):
            return None
    choices = ", ".join(repr(n) for n in core)
    msg = f"{name!r} is not one of {choices}, a name an environment's package registers, or module:Class"
    close = difflib.get_close_matches(
        name, [*core, *registry.registered_names(kind, load=False)], n=1, cutoff=0.6
    )
    return Problem(path, msg + (f"; did you mean {close[0]!r}?" if close else ""))


def environment_problem(env: str, path: str, packages: bool) -> Problem | None:
    """The problem of an entry's ``env`` that nothing could resolve: a core name at another version, or a name
    that is not core, registered, ``module:Class`` or possibly a package's."""
    name, _, version = env.partition("@")
    if name in CORE_ENVIRONMENTS:
        if core_environment(env) is None:
            return Problem(path, f"{name} is at version {CORE_ENVIRONMENT_VERSIONS[name]}, not {version!r}")
        return None
    return _unresolvable("environment", name, CORE_ENVIRONMENTS, path, packages)


def _name_problems(cfg: RunConfig, ok: _Ok, pkgs: bool) -> list[Problem]:
    t = cfg.train
    out: list[Problem | None] = []
    if ok("train.task_sampler"):
        out.append(
            _unresolvable("task_sampler", t.task_sampler, CORE_TASK_SAMPLERS, "train.task_sampler", pkgs)
        )
    if ok("train.group_admission"):
        path = "train.group_admission"
        out.append(_unresolvable("group_admission", t.group_admission, CORE_GROUP_ADMISSIONS, path, pkgs))
    for i, e in enumerate(cfg.environments):
        at = f"environments.{i}"
        if e.task_sampler in ("auto", "weighted") and ok(f"{at}.task_sampler"):
            out.append(
                Problem(
                    f"{at}.task_sampler",
                    f"{e.task_sampler!r} shares the run's slots among entries, so it cannot be an entry's sampler; "
                    "an entry's task_sampler is uniform, pass_rate, a registered name or module:Class",
                )
            )
        elif e.task_sampler is not None and ok(f"{at}.task_sampler"):
            path = f"{at}.task_sampler"
            out.append(_unresolvable("task_sampler", e.task_sampler, ENTRY_TASK_SAMPLERS, path, pkgs))
        if e.group_admission is not None and ok(f"{at}.group_admission"):
            path = f"{at}.group_admission"
            out.append(_unresolvable("group_admission", e.group_admission, CORE_GROUP_ADMISSIONS, path, pkgs))
        if ok(f"{at}.env"):
            out.append(environment_problem(e.env, f"{at}.env", pkgs))
    return [p for p in out if p is not None]


def _sampler_problems(cfg: RunConfig, ok: _Ok) -> list[Problem]:
    t = cfg.train
    out: list[Problem] = []
    if ok("train.task_sampler", "train.task_sampler_options"):
        out += core_option_problems(
            "task_sampler", t.task_sampler, t.task_sampler_options, "train.task_sampler_options"
        )
    if not ok("train.task_sampler"):
        return out
    run = t.task_sampler
    own_sampler = (
        f"an entry's own sampler never runs under train.task_sampler: {run}, which chooses over every task of the "
        "run; use train.task_sampler: weighted to hand each entry its slots"
    )
    for i, e in enumerate(cfg.environments):
        at = f"environments.{i}"
        if run in ("uniform", "pass_rate"):
            if "weight" in e.model_fields_set and len(cfg.environments) > 1 and ok(f"{at}.weight"):
                out.append(
                    Problem(
                        f"{at}.weight",
                        f"train.task_sampler: {run} chooses over every task of the run, so an entry's weight means "
                        "nothing; use train.task_sampler: weighted to mix entries by weight",
                    )
                )
            if e.task_sampler is not None and ok(f"{at}.task_sampler"):
                out.append(Problem(f"{at}.task_sampler", own_sampler))
            if e.task_sampler_options and ok(f"{at}.task_sampler_options"):
                out.append(Problem(f"{at}.task_sampler_options", own_sampler))
        elif e.task_sampler not in ("auto", "weighted") and ok(
            f"{at}.task_sampler", f"{at}.task_sampler_options"
        ):
            name = e.task_sampler or "uniform"
            out += core_option_problems(
                "task_sampler", name, e.task_sampler_options, f"{at}.task_sampler_options"
            )
    # At the sampler's key, in the words of pass_rate's own check (stage 2), as platoon 0.4.0 names it.
    mixes = (
        "pass_rate chooses tasks likely to mix passes and failures, which a group of one never does "
        "(environments[{}] has group_size 1); use uniform, or a group size of 2 or more"
    )
    for i, e in enumerate(cfg.environments):
        at = f"environments.{i}"
        if group_size(cfg, i) != 1 or not ok(group_size_path(cfg, i)):
            continue
        if run == "pass_rate":
            out.append(Problem("train.task_sampler", mixes.format(e.label)))
        elif e.task_sampler == "pass_rate" and ok(f"{at}.task_sampler"):
            out.append(Problem(f"{at}.task_sampler", mixes.format(e.label)))
    return out


def group_size_path(cfg: RunConfig, i: int) -> str:
    """Where entry ``i``'s group size is set: its own ``workflow_config.group_size``, else the run's."""
    if cfg.environments[i].workflow_config.group_size is not None:
        return f"environments.{i}.workflow_config.group_size"
    return "train.workflow_config.group_size"


def _admission_problems(cfg: RunConfig, ok: _Ok) -> list[Problem]:
    t = cfg.train
    out: list[Problem] = []
    if ok("train.group_admission", "train.group_admission_options"):
        out += core_option_problems(
            "group_admission", t.group_admission, t.group_admission_options, "train.group_admission_options"
        )
    for i, e in enumerate(cfg.environments):
        at = f"environments.{i}"
        if not ok(f"{at}.group_admission", f"{at}.group_admission_options"):
            continue
        if e.group_admission is None and e.group_admission_options:
            out.append(
                Problem(
                    f"{at}.group_admission_options",
                    "set without the entry's group_admission: the options go with the rule they configure; set "
                    f"{at}.group_admission too, or move them to train.group_admission_options",
                )
            )
        elif e.group_admission is not None:
            path = f"{at}.group_admission_options"
            out += core_option_problems("group_admission", e.group_admission, e.group_admission_options, path)
    # Rule mode is certain when an entry whose rule is known (its own, or the run's it inherits) is not `all`.
    known = [
        entry_admission(cfg, i)[0]
        for i, e in enumerate(cfg.environments)
        if ok(f"environments.{i}.group_admission")
        and (e.group_admission is not None or ok("train.group_admission"))
    ]
    rules = sorted(set(known) - {"all"})
    if t.num_minibatches > 1 and ok("train.num_minibatches") and rules:
        out.append(
            Problem(
                "train.num_minibatches",
                f"takes {t.num_minibatches} optimizer steps a batch, and a group admission rule ({', '.join(rules)}) "
                "makes short steps, whose minibatches would be few and uneven; set num_minibatches: 1",
            )
        )
    return out


def _loss_problems(cfg: RunConfig, ok: _Ok) -> list[Problem]:
    """``train.loss_fn_config`` against the keys ``train.loss_fn`` takes (``platoon.config.losses``)."""
    t = cfg.train
    if not ok("train.loss_fn", "train.loss_fn_config"):
        return []
    return [Problem(f"train.loss_fn_config.{key}" if key else "train.loss_fn_config", message)
            for key, message in loss_fn_config_problems(t.loss_fn, t.loss_fn_config)]


def _checkpoint_problems(cfg: RunConfig, ok: _Ok) -> list[Problem]:
    """``checkpoint.keep_recovery`` needs ``train.max_staleness``, as platoon 0.4.0 has it: there a rollout may sample
    from any checkpoint its staleness bound allows, so without one no checkpoint may be pruned. This backend's rollouts
    sample from the live model, but a config stays one that 0.4.0 loads too."""
    if cfg.checkpoint.keep_recovery is None or cfg.train.max_staleness is not None:
        return []
    if not ok("checkpoint.keep_recovery", "train.max_staleness"):
        return []
    return [Problem("checkpoint.keep_recovery", "needs train.max_staleness (as in platoon 0.4.0, where a rollout may "
                    "sample from any older checkpoint without a staleness bound, so pruning could never delete one); "
                    "set train.max_staleness, or keep_recovery: null to keep every recovery checkpoint")]


def _entry_problems(cfg: RunConfig, ok: _Ok) -> list[Problem]:
    return (_name_and_weight_problems(cfg, ok) + _size_problems(cfg, ok) + _straggler_problems(cfg, ok)
            + _label_problems(cfg, ok) + _environment_problems(cfg, ok) + _model_problems(cfg, ok))


def _name_and_weight_problems(cfg: RunConfig, ok: _Ok) -> list[Problem]:
    out: list[Problem] = []
    first: dict[str, int] = {}
    mixture = len(cfg.environments) > 1
    for i, e in enumerate(cfg.environments):
        if not ok(f"environments.{i}.name"):
            continue
        if mixture and e.name is None:
            out.append(Problem(f"environments.{i}.name", "a mixture's entries each need a unique name"))
        elif e.label in first:
            out.append(Problem(f"environments.{i}.name",
                               f"{e.label!r} is already the name of environments.{first[e.label]}"))
        else:
            first.setdefault(e.label, i)
    kinds = {i: e.weight == "tasks" for i, e in enumerate(cfg.environments) if ok(f"environments.{i}.weight")}
    if mixture and len(set(kinds.values())) > 1:
        odd = next(i for i in kinds if kinds[i] != kinds[min(kinds)])
        out.append(Problem(f"environments.{odd}.weight", "a mixture's weights are all numbers or all 'tasks'; "
                                                         f"environments.{min(kinds)} sets "
                                                         f"{cfg.environments[min(kinds)].weight!r}"))
    return out


def _size_problems(cfg: RunConfig, ok: _Ok) -> list[Problem]:
    t = cfg.train
    out: list[Problem] = []
    # Only the group sizes the user wrote validly: a bound one of them breaks is broken whatever the others are.
    sizes = {i: group_size(cfg, i) for i in range(len(cfg.environments)) if ok(group_size_path(cfg, i))}
    if sizes:
        biggest = max(sizes, key=lambda i: (sizes[i], -i))
        g, m = sizes[biggest], t.max_concurrent_rollouts
        if t.batch_size * g > MAX_ROLLOUTS and ok("train.batch_size"):
            out.append(
                Problem(
                    "train.batch_size",
                    f"{t.batch_size} groups of environments.{biggest}'s {g} rollouts make steps of "
                    f"{t.batch_size * g} rollouts; a step may train at most {MAX_ROLLOUTS}",
                )
            )
        if m is not None and m < g and ok("train.max_concurrent_rollouts"):
            out.append(
                Problem(
                    "train.max_concurrent_rollouts",
                    f"{m} permits cannot hold one group of environments.{biggest} (group_size {g}); set at least {g}",
                )
            )
    for i in sizes:
        w, own = entry_workflow(cfg, i), cfg.environments[i].workflow_config
        at = (f"environments.{i}.workflow_config.min_successful_group_size" if own.min_successful_group_size
              is not None else "train.workflow_config.min_successful_group_size")
        if w.min_successful_group_size > sizes[i] and ok(at):
            out.append(Problem(at, f"{w.min_successful_group_size} is more than the group size of environments.{i}, "
                                   f"{sizes[i]}; it must lie in [1, group_size]"))
    return out


def _straggler_problems(cfg: RunConfig, ok: _Ok) -> list[Problem]:
    run = cfg.train.workflow_config
    out: list[Problem] = []
    run_timeout = "train.workflow_config.straggler_timeout_seconds"
    if run.straggler_quorum is not None and run.straggler_timeout_seconds is None and ok(
            "train.workflow_config.straggler_quorum", run_timeout):
        out.append(Problem("train.workflow_config.straggler_quorum",
                           "needs straggler_timeout_seconds (the quorum starts the straggler clock)"))
    for i, e in enumerate(cfg.environments):
        w, at = entry_workflow(cfg, i), f"environments.{i}.workflow_config"
        if e.workflow_config.straggler_quorum is not None and w.straggler_timeout_s is None and ok(
                f"{at}.straggler_quorum", f"{at}.straggler_timeout_seconds", run_timeout):
            out.append(Problem(f"{at}.straggler_quorum", "needs straggler_timeout_seconds (the entry's or the run's)"))
        quorum_at = (f"{at}.straggler_quorum" if e.workflow_config.straggler_quorum is not None
                     else "train.workflow_config.straggler_quorum")
        if (w.straggler_quorum is not None and w.straggler_quorum > w.group_size
                and ok(quorum_at, group_size_path(cfg, i))):
            out.append(Problem(quorum_at, f"{w.straggler_quorum} is more than the group size of environments.{i}, "
                                          f"{w.group_size}"))
    return out


def _label_problems(cfg: RunConfig, ok: _Ok) -> list[Problem]:
    t = cfg.train
    out: list[Problem] = []
    if t.label_by is not None or not ok("train.label_by", *_each(cfg, "name")):
        return out
    labels = {e.label for e in cfg.environments}
    keyed = (("train.rollout_group_limits", t.rollout_group_limits),
             ("train.workflow_config.straggler_policies", t.workflow_config.straggler_policies))
    for at, by_label in keyed:
        for label in by_label:
            if label not in labels and ok(at):
                out.append(Problem(f"{at}.{label}", f"no environment entry is named {label!r} (while label_by is "
                                                    "null, labels are entry names)"))
    return out


def _ray_problems(cfg: RunConfig, ok: _Ok) -> list[Problem]:
    """``rollout_isolation: ray`` needs Ray; ``train.ray`` acts only under it."""
    import importlib.util

    from platoon.config.ray import RayConfig

    isolation = cfg.train.workflow_config.rollout_isolation
    if isolation == "ray" and importlib.util.find_spec("ray") is None and ok("train.workflow_config.rollout_isolation"):
        return [Problem("train.workflow_config.rollout_isolation", "ray needs Ray installed: pip install 'platoon[ray]'")]
    if isolation != "ray" and cfg.train.ray != RayConfig() and ok("train.ray"):
        return [Problem("train.ray", f"acts only under train.workflow_config.rollout_isolation: ray (it is {isolation})")]
    return []


def _environment_problems(cfg: RunConfig, ok: _Ok) -> list[Problem]:
    out: list[Problem] = []
    workers = cfg.train.workflow_config
    if workers.worker_python_env_isolation and workers.rollout_isolation != "process" and ok(
            "train.workflow_config.worker_python_env_isolation", "train.workflow_config.rollout_isolation"):
        out.append(Problem("train.workflow_config.worker_python_env_isolation", "requires rollout_isolation: process"))
    out += _ray_problems(cfg, ok)
    for i, e in enumerate(cfg.environments):
        at = f"environments.{i}"
        env = core_environment(e.env)
        if env is None or not ok(f"{at}.env"):
            continue
        if ok(f"{at}.service_kwargs"):
            out += core_option_problems("environment", env, e.service_kwargs, f"{at}.service_kwargs")
        for key, default in (("dataset_kwargs", "train"), ("eval_dataset_kwargs", CORE_EVAL_SPLITS[env])):
            for split in getattr(e, key).splits(default):
                if split not in CORE_ENV_SPLITS[env] and ok(f"{at}.{key}.split_name"):
                    out.append(Problem(f"{at}.{key}.split_name", f"{e.env} has no split {split!r}; its splits are "
                                                                 f"{', '.join(CORE_ENV_SPLITS[env])}"))
    return out


def _model_problems(cfg: RunConfig, ok: _Ok) -> list[Problem]:
    mdl = cfg.model
    out: list[Problem] = []
    if cfg.train.model_name == "tiny" and mdl.d_model % mdl.n_heads and ok("model.d_model", "model.n_heads"):
        out.append(Problem("model.d_model", f"{mdl.d_model} is not a multiple of n_heads ({mdl.n_heads})"))
    renderer = cfg.train.renderer_name
    problem = renderer_name_problem(renderer)
    if problem is not None and ok("train.renderer_name"):
        out.append(Problem("train.renderer_name", problem))
    if renderer == "role_colon" and cfg.train.renderer_kwargs and ok("train.renderer_kwargs"):
        out.append(Problem("train.renderer_kwargs", f"role_colon takes no options, got "
                                                    f"{', '.join(sorted(cfg.train.renderer_kwargs))}"))
    return out
