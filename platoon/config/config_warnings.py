"""The warnings of a valid config: keys it sets that do nothing here, and settings that do something other than
they seem to.

``config validate`` prints them as ``warning: ...`` (and fails on them under ``--strict``); a run logs them at each
start. A warning never refuses a config: what is refused is a problem (``platoon.config.rules``, stage 2).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import ValidationError

from platoon.config.base import no_effect_paths
from platoon.config.components import CHAT_TEMPLATE_ALIASES
from platoon.config.effective import entry_sim, is_rule_mode
from platoon.config.losses import CLIP_KEYS, DEFAULT_LOSS_FN_CONFIG, loss_settings, zero_at_zero_advantages
from platoon.config.models import RunConfig
from platoon.config.sim import TURNS_REPLACE


def config_warnings(cfg: RunConfig) -> list[str]:
    """Warnings of a valid config (printed as ``warning: ...`` by ``config validate``, failed on by ``--strict``, and
    logged at each start of a run): the keys it sets that have no effect here (0.4.0's keys of components this backend
    does not have, and the rollout-worker keys); a 0.4.0 renderer name that the chat template renders here;
    in rule mode, a loss that is not zero at zero advantages; clip thresholds set for importance_sampling, which does
    not clip."""
    out = _said(_zero_four_inert(cfg)) + preload_warnings(cfg) + _said(_ray_inert(cfg)) + unnamed_env_warnings(cfg)
    if cfg.train.renderer_name in CHAT_TEMPLATE_ALIASES:
        out.append(f"train.renderer_name: {cfg.train.renderer_name!r} is 0.4.0's renderer for a model family; here "
                   "the checkpoint's own chat template renders it (chat_template), the tool-call parser following "
                   "what the template writes (docs/renderers.md)")
    loss = loss_settings(cfg.train.loss_fn, cfg.train.loss_fn_config)
    if is_rule_mode(cfg) and not zero_at_zero_advantages(cfg.train.loss_fn_config):
        out.append(
            f"train.loss_fn_config: kl_coef {loss.kl_coef:g} and entropy_coef {loss.entropy_coef:g} train terms "
            "that do not depend on the advantage, also on uniform groups' datums; a group admission rule that "
            "rejects those groups removes their share of those terms from the objective, not only from its scale"
        )
    # 0.4.0's default thresholds go with every loss, so only thresholds changed from them are worth a warning.
    changed = [f"{k} {v:g}" for k, v in cfg.train.loss_fn_config.items()
               if k in CLIP_KEYS and v != DEFAULT_LOSS_FN_CONFIG[k]]
    if loss.loss_fn == "importance_sampling" and changed:
        out.append(f"train.loss_fn_config: importance_sampling does not clip the ratio; {', '.join(changed)} "
                   "takes effect only under ppo or cispo")
    return out + _said(_sim_inert(cfg))


def unnamed_env_warnings(cfg: RunConfig) -> list[str]:
    """The entries a config lists without ``env``, which train the built-in game by default: a newcomer's entry meant
    for another environment would otherwise train platoon-number-search without a word."""
    if "environments" not in cfg.model_fields_set:
        return []  # no entries written: the default entry is the built-in game, as documented
    unnamed = [f"environments.{i}" for i, e in enumerate(cfg.environments) if "env" not in e.model_fields_set]
    if not unnamed:
        return []
    default = type(cfg.environments[0]).model_fields["env"].default
    return [f"{', '.join(unnamed)}: no env given, so {'it trains' if len(unnamed) == 1 else 'they train'} {default}, "
            f"the built-in game; name the environment (env: NAME; platoon env list shows them), or env: {default} "
            "to say so"]


def inert_paths(cfg: RunConfig) -> list[str]:
    """Every key ``cfg`` sets that has no effect here, by its dotted path (the keys the warnings name as such: 0.4.0's
    keys of components this backend does not have, the rollout-worker keys Ray replaces, the simulator's)."""
    return [path for paths, _ in (*_zero_four_inert(cfg), *_ray_inert(cfg), *_sim_inert(cfg)) for path in paths]


def _said(groups: list[tuple[list[str], str]]) -> list[str]:
    return [f"{', '.join(paths)}: {why}" for paths, why in groups if paths]


def _zero_four_inert(cfg: RunConfig) -> list[tuple[list[str], str]]:
    return [(no_effect_paths(cfg), "no effect here (platoon 0.4.0 keys of components this backend does not have; "
                                   "docs/migrating-from-0.4.md)")]


def preload_warnings(cfg: RunConfig) -> list[str]:
    """``worker_preload`` set where nothing is imported ahead: in-process rollouts, ``exec`` workers, or
    ``worker_python_env_isolation``."""
    w = cfg.train.workflow_config
    if not w.worker_preload:
        return []
    if w.rollout_isolation == "ray":
        return []  # each rollout actor imports them as it starts
    why = ("rollouts run in the trainer's process (rollout_isolation: inprocess)" if w.rollout_isolation != "process"
           else "workers start fresh (worker_start_method: exec)" if w.worker_start_method == "exec"
           else "each worker has its own Python environment (worker_python_env_isolation)"
           if w.worker_python_env_isolation else None)
    if why is None:
        return []
    return [f"train.workflow_config.worker_preload: nothing is imported ahead where {why}, so "
            f"{', '.join(w.worker_preload)} is not preloaded"]


RAY_INERT = ("worker_start_method", "worker_rss_soft_limit_bytes", "worker_mem_available_floor_bytes",
             "worker_parent_grace_seconds")
"""The rollout-worker keys Ray's placement replaces under ``rollout_isolation: ray`` (each actor holds
``train.ray``'s resources, and Ray ends its actors)."""


def _ray_inert(cfg: RunConfig) -> list[tuple[list[str], str]]:
    """The rollout-worker keys a config sets to no effect under ``rollout_isolation: ray`` (``RAY_INERT``)."""
    w = cfg.train.workflow_config
    if w.rollout_isolation != "ray":
        return []
    inert = [f"train.workflow_config.{k}" for k in RAY_INERT if k in w.model_fields_set]
    return [(inert, "no effect under rollout_isolation: ray (Ray places and ends the rollout actors, each holding "
                    "train.ray's resources)")]


def _sim_inert(cfg: RunConfig) -> list[tuple[list[str], str]]:
    """The simulator's keys that a config sets to no effect: under ``rollout.turns`` the keys it replaces
    (``TURNS_REPLACE``; ``length_sigma`` too when no ``env_step_s`` is there to stretch), and ``sim.service`` and
    ``sim.trainer.service_slowdown`` where no entry's rollouts have turns. A run-level key is named when it has no effect in every entry that reads it (a
    preset's ``duration`` under turns is such a key: warned about, not refused, so presets stay composable)."""
    inert: dict[str, bool] = {}
    any_turns = False
    run_set = cfg.sim.rollout.model_fields_set
    for i, e in enumerate(cfg.environments):
        try:
            rollout = entry_sim(cfg, i).rollout
        except ValidationError:
            continue  # the loader reported it
        own = e.sim.get("rollout") if isinstance(e.sim.get("rollout"), Mapping) else {}
        any_turns = any_turns or rollout.turns is not None
        for key in (*TURNS_REPLACE, "length_sigma"):
            path = f"environments.{i}.sim.rollout.{key}" if key in own else f"sim.rollout.{key}"
            if key not in own and key not in run_set:
                continue
            idle = rollout.turns is not None and (key != "length_sigma" or rollout.env_step_s is None)
            inert[path] = inert.get(path, True) and idle
    service_set = cfg.sim.service.model_fields_set
    engine = cfg.train.inference.engine
    return [
        ([p for p, idle in inert.items() if idle],
         "no effect under sim.rollout.turns (a rollout's time is its turns' model calls and environment steps; a "
         "task's length stretches env_step_s)"),
        (["sim.service"] if "service" in cfg.sim.model_fields_set and not any_turns else [],
         "no effect without sim.rollout.turns (only turns queue model calls at the service)"),
        (["sim.service.pause_s"] if engine == "builtin" and "pause_s" in service_set else [],
         "no effect under train.inference.engine: builtin (the builtin service takes new weights without pausing)"),
        (["sim.service.handoff_s"] if engine == "vllm" and "handoff_s" in service_set else [],
         "no effect under train.inference.engine: vllm (its servers batch continuously, with no hand-off between "
         "batches)"),
        (["sim.trainer.service_slowdown"] if "service_slowdown" in cfg.sim.trainer.model_fields_set and not any_turns
         else [], "no effect without sim.rollout.turns (no model service runs batches beside the trainer)"),
    ]
