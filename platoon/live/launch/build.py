"""Build a live run from its config: environments, the task pool, the policy layer, model, trainer, service, workflow.

What this module owns: turning a ``RunConfig`` into the objects one start of ``platoon train`` drives, and nothing
else (no clock, no loop). The policy layer itself is built by ``platoon.components.build_policy``, which the
simulator calls too; only the pool differs between the two runtimes (here it lists the environments' tasks).

- ``build_environments(cfg)``: each entry's environment (``env`` by name or ``module:Class``, ``service_kwargs``);
- ``build_pool(cfg, envs)``: the entries' training tasks (``entry_tasks``: ``tasks``, else the listed splits', less
  ``exclude_tasks``, shuffled and limited by ``dataset_kwargs``), each row's data its task's columns
  (``train.label_by`` may name one);
- ``listed_tasks(cfg)``: that pool's plan as ``config validate --tasks`` prints it (each entry's share, how often
  each task is drawn), its warnings and the problems listing it finds;
- ``rollout_workers(cfg, envs)``: under ``rollout_isolation: process``, the worker pool the workflow runs each rollout
  in (and evaluation during training each of its episodes), its fork server opening as soon as the model service is up (``platoon.live.workers``);
- ``build_live(cfg, start=)``: a ``LiveRun`` holding all of it, a trainer policy and a separate sampling copy behind
  the model service (the service's weights change only when a step publishes), and the evaluation of held-out
  pass@1 (``evaluate``: ``eval/pass@1`` with its 95% Wilson interval, and each entry's when there are several; during
  training its episodes are rollouts against the model service, ``evaluate_in_training``, that take start slots).

A problem with an entry (an environment that does not resolve or refuses its options, an unknown split, a task id
the split lacks) is a ``ConfigError`` naming its key, all of them in one report.
"""

from __future__ import annotations

import contextlib
import copy
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from platoon.components import build_policy
from platoon.config.effective import (
    eval_concurrency,
    group_size,
    max_concurrent_rollouts,
    sampling,
    select_tasks,
)
from platoon.config.errors import ConfigError, ExtensionError
from platoon.config.loader import config_from_lock
from platoon.config.models import EnvironmentConfig, RunConfig
from platoon.config.plan import sampling_plan
from platoon.live.agent.toolchain import Staging, run_toolchains
from platoon.live.envs.resolve import resolve_environment
from platoon.live.launch.errors import TrainError
from platoon.live.rollouts.workflow import GroupRolloutWorkflow, workflow_runs_on_lease
from platoon.live.workers import EnvSpec, WorkerPool, preload_plan
from platoon.policy import (
    DEFAULT_LABEL_COLUMN,
    EntrySpec,
    PolicyLayer,
    RoutingIdWatch,
    TaskPool,
    label_value,
)
from platoon.runs.timing import measured_call

TINY_CONTEXT = 256
"""The tiny model's positions (the context window) when ``train.context_window_length`` is null."""

EVAL_EPISODES = 1024
"""Held-out episodes of one ``eval/pass@1`` measurement (shared among the entries)."""

__all__ = ["EVAL_EPISODES", "TINY_CONTEXT", "LiveRun", "build_environments", "build_live",
           "build_model", "build_pool", "build_renderer", "context_window", "entry_splits", "entry_tasks",
           "evaluate_policy", "evaluate_service", "listed_tasks", "load_init_from", "pool_rows",
           "rollout_workers"]


def build_environments(cfg: RunConfig) -> dict[str, Any]:
    """Each entry's environment, by the entry's name; one ConfigError with every entry's problem, or (the config
    being fine) a ``TrainError`` naming each environment whose constructor raised anything else (a server it cannot
    reach: the environment's failure, not the file's)."""
    envs: dict[str, Any] = {}
    problems: list[str] = []
    failures: list[str] = []
    for i, e in enumerate(cfg.environments):
        try:
            with said_if_slow(f"building environment {e.env!r} (environments.{i}, entry {e.label!r})"):
                envs[e.label] = resolve_environment(e.env, e.service_kwargs, package=e.package)
        except ExtensionError as exc:
            problems.append(f"environments.{i}.env: {exc}")
        except (TypeError, ValueError) as exc:
            problems.append(f"environments.{i}.service_kwargs: {exc}")
        except Exception as exc:
            failures.append(f"environment {e.env!r} (environments.{i}, entry {e.label!r}) could not be built: its "
                            f"constructor raised {type(exc).__name__}: {exc}")
    if problems:
        raise ConfigError(problems)
    if failures:
        raise TrainError("; ".join(failures))
    return envs


SLOW_START_S = 5.0


@contextlib.contextmanager
def said_if_slow(what: str, after_s: float = SLOW_START_S) -> Iterator[None]:
    """A line on stderr when ``what`` still runs ``after_s`` seconds on (a constructor that logs in to a server or
    loads a dataset), so that a start-up that takes minutes is never mistaken for a hung one."""
    timer = threading.Timer(after_s, lambda: print(f"info: {what}: still running after {after_s:g} s", file=sys.stderr,
                                                   flush=True))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def build_pool(cfg: RunConfig, envs: Mapping[str, Any]) -> TaskPool:
    """The run's training tasks, entries in config order; ConfigError for an unknown split or task id."""
    label_by = cfg.train.label_by
    specs: list[EntrySpec] = []
    problems: list[str] = []
    for i, e in enumerate(cfg.environments):
        env = envs[e.label]
        try:
            ids = entry_tasks(e, env, training=True)
            entry_tasks(e, env, training=False)
        except ConfigError as exc:
            problems += [f"environments.{i}.{p}" for p in exc.problems]
            continue
        data = [dict(env.task(t).columns) for t in ids]
        labels = None
        if label_by is not None:
            labels = [label_value(row.get(label_by)) for row in data]
        specs.append(EntrySpec(e.label, ids, group_size(cfg, i), None if e.weight == "tasks" else e.weight, e.seed,
                               e.success_threshold, labels, data))
    if problems:
        raise ConfigError(problems)
    return TaskPool.from_entries(specs, label_column=label_by or DEFAULT_LABEL_COLUMN)


def listed_tasks(cfg: RunConfig) -> list[str]:
    """``config validate --tasks``: the run's plan and its warnings (``warning: ...``), from the training tasks
    ``platoon train`` lists (each entry's environment built, its split and ``tasks`` read); what listing them
    finds wrong comes back as ``problem: <key path>: ...`` lines, which fail the file."""
    try:
        pool = build_pool(cfg, build_environments(cfg))
    except (ConfigError, ExtensionError) as exc:
        return [f"problem: {line}" for line in getattr(exc, "problems", None) or [str(exc)]]
    plan = sampling_plan(cfg, {label: len(info.task_ids) for label, info in pool.entries.items()})
    return [*plan.describe(), *(f"warning: {line}" for line in plan.warnings())]


def entry_tasks(e: EnvironmentConfig, env: Any, *, training: bool) -> list[str]:
    """Entry ``e``'s training (or evaluation) task ids on ``env``: its ``dataset_kwargs`` (``eval_dataset_kwargs``)
    splits listed in order (training: its own ``tasks``, each of which must be listed), less ``exclude_tasks``,
    shuffled by ``shuffle_seed``, the first ``limit``. ConfigError (paths relative to the entry) for an unknown
    split, a task not listed, or no task left."""
    kwargs = e.dataset_kwargs if training else e.eval_dataset_kwargs
    at = "dataset_kwargs" if training else "eval_dataset_kwargs"
    listed: list[str] = []
    for split in kwargs.splits("train" if training else getattr(env, "eval_split", "eval")):
        try:
            listed += env.task_ids(split)
        except KeyError as exc:
            raise ConfigError([f"{at}.split_name: {exc.args[0] if exc.args else exc}"]) from None
    if twice := repeated(listed):
        raise ConfigError([f"env: {e.env} lists task ids more than once ({', '.join(map(repr, twice[:5]))}"
                           + (f" and {len(twice) - 5} more" if len(twice) > 5 else "") + f" in {at}'s splits): a "
                           "task id names one task, so the environment must list each once"])
    if training and e.tasks is not None:
        known = set(listed)
        missing = [t for t in e.tasks if t not in known]
        if missing:
            raise ConfigError([f"tasks: not in split {kwargs.split_name or 'train'!r}: {', '.join(missing[:5])}"
                               + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")])
        listed = list(e.tasks)
    ids = select_tasks(listed, kwargs, e.exclude_tasks, columns=lambda t: env.task(t).columns)
    if not ids:
        raise ConfigError([f"{at}: no {'training' if training else 'evaluation'} task is left (after where, "
                           "exclude_tasks and limit)"])
    return ids


def repeated(ids: list[str]) -> list[str]:
    """The ids listed more than once, each once, in the order of their second listing."""
    seen: set[str] = set()
    twice: dict[str, None] = {}
    for task_id in ids:
        if task_id in seen:
            twice[task_id] = None
        seen.add(task_id)
    return list(twice)


def entry_splits(e: EnvironmentConfig, env: Any) -> list[str]:
    """The splits entry ``e`` lists on ``env``: its training splits, then its evaluation splits not among them."""
    splits = list(e.dataset_kwargs.splits("train"))
    return splits + [s for s in e.eval_dataset_kwargs.splits(getattr(env, "eval_split", "eval")) if s not in splits]


def rollout_workers(cfg: RunConfig, envs: Mapping[str, Any], *, from_config: bool = True) -> WorkerPool | None:
    """The rollout workers of ``cfg`` (None under ``rollout_isolation: inprocess``), their fork server opening
    (docs/rollout-workers.md); under ``ray``, the actor pool on the cluster (``platoon.live.workers.ray_pool``). ``from_config``: ``envs`` were built from the entries, so a worker builds its own (or
    finds its fork server's); else they travel pickled."""
    w = cfg.train.workflow_config
    if w.rollout_isolation == "inprocess":
        return None
    specs = {e.label: EnvSpec(e.env, dict(e.service_kwargs), e.package, tuple(entry_splits(e, envs[e.label])))
             for e in cfg.environments} if from_config else {}
    if w.rollout_isolation == "ray":
        from platoon.live.workers.ray_pool import RayPool, distributions_of

        ray_pool = RayPool(cfg.train.ray, env_specs=specs, modules=w.worker_preload,
                           grace_s=w.worker_termination_grace_seconds, permits=max_concurrent_rollouts(cfg),
                           concurrent_groups=w.worker_launch_concurrent_groups, distributions=distributions_of(envs))
        ray_pool.open()
        return ray_pool
    plan = None if w.worker_python_env_isolation else preload_plan(specs, envs, w.worker_preload)
    pool = WorkerPool(method=w.worker_start_method, plan=plan, env_specs=specs,
                      grace_s=w.worker_termination_grace_seconds, parent_grace_s=w.worker_parent_grace_seconds,
                      gate={"floor_bytes": w.worker_mem_available_floor_bytes,
                            "rss_limit_bytes": w.worker_rss_soft_limit_bytes,
                            "concurrent_groups": w.worker_launch_concurrent_groups,
                            "wait_limit_s": w.worker_startup_budget_seconds, "permits": max_concurrent_rollouts(cfg)})
    pool.open()
    return pool


def pool_rows(pool: TaskPool) -> list[tuple[str, str | None, str | None]]:
    """``tasks/pool.json``'s rows: ``(task_id, entry, label)`` in pool order."""
    return [(r.task_id, r.entry, r.label) for r in pool.rows]


def _eval_entries(cfg: RunConfig, envs: Mapping[str, Any], n: int) -> list[tuple[Any, Any, list[str], int]]:
    """``(entry, env, eval task ids, episodes)`` of each entry that plays some of the ``n`` episodes."""
    entries = cfg.environments
    shares = [n // len(entries) + (i < n % len(entries)) for i in range(len(entries))]
    return [(e, envs[e.label], entry_tasks(e, envs[e.label], training=False), k)
            for e, k in zip(entries, shares, strict=True) if k >= 1]


def _eval_metrics(cfg: RunConfig, results: list[tuple[Any, int, Any]]) -> dict[str, float]:
    from platoon.live.rollouts.evaluate import wilson_interval

    per_entry: dict[str, float] = {}
    passed = total = 0
    for e, k, r in results:
        passed += round(r.pass_at_1 * k)
        total += k
        if len(cfg.environments) > 1:
            per_entry[f"eval/environment/{e.label.replace('/', '--')}/pass@1"] = r.pass_at_1
    low, high = wilson_interval(passed, total)
    return {"eval/pass@1": passed / total if total else 0.0, "eval/pass@1_ci_low": low, "eval/pass@1_ci_high": high,
            "eval/episodes": float(total), **per_entry}


def _eval_limits(cfg: RunConfig, model: Any) -> Any:
    """The harness's budgets for an evaluation episode: the run's, as its training rollouts have them."""
    from platoon.live.agent.harness import Limits

    rollout = cfg.train.workflow_config.rollout_config
    return Limits(max_new_tokens=sampling(cfg)[1], max_turns=rollout.max_steps,
                  context_window=context_window(cfg, model), step_timeout=rollout.step_timeout)


def evaluate_policy(model: Any, cfg: RunConfig, envs: Mapping[str, Any], n: int = EVAL_EPISODES, *,
                    renderer: Any = None, by_task: list[dict[str, Any]] | None = None) -> dict[str, float]:
    """Held-out pass@1 of ``model`` over ``n`` episodes shared among the entries' ``eval_split``s, played through the
    harness with the run's renderer (None: ``build_renderer``) and budgets, sampled at the run's temperature from
    seeds of ``train.seed`` (the same episodes at every measurement): ``eval/pass@1``, its 95% Wilson interval
    (``eval/pass@1_ci_low``/``_ci_high``), ``eval/episodes`` and, with several entries, each entry's
    ``eval/environment/<entry>/pass@1``. ``by_task``, when given, receives a row per held-out task played
    (`eval_task_rows`)."""
    from platoon.live.rollouts.evaluate import evaluate

    renderer = renderer if renderer is not None else build_renderer(cfg, envs)
    temperature, _ = sampling(cfg)
    limits = _eval_limits(cfg, model)
    results = [(e, k, evaluate(model, env, ids, k, temperature=temperature, seed=cfg.train.seed,
                               batch_size=eval_concurrency(cfg), renderer=renderer, limits=limits))
               for e, env, ids, k in _eval_entries(cfg, envs, n)]
    if by_task is not None:
        by_task += [row for e, _, r in results for row in eval_task_rows(e.label, envs[e.label], r)]
    return _eval_metrics(cfg, results)


def eval_task_rows(entry: str, env: Any, result: Any) -> list[dict[str, Any]]:
    """One row per task of an ``EvalResult``, in the environment's order: ``entry``, ``task_id``, ``episodes``,
    ``passes``, ``pass@1``, then the task's columns (``columns/<name>``)."""
    rows = []
    for task_id, (passes, episodes) in result.by_task.items():
        columns = getattr(env.task(task_id), "columns", None) or {}
        rows.append({"entry": entry, "task_id": task_id, "episodes": episodes, "passes": passes,
                     "pass@1": passes / episodes, **{f"columns/{k}": v for k, v in columns.items()}})
    return rows


async def evaluate_service(service: Any, cfg: RunConfig, envs: Mapping[str, Any], n: int = EVAL_EPISODES, *,
                           renderer: Any = None, model: Any = None, slots: Any = None,
                           routing: Any = None, workers: Any = None) -> dict[str, float]:
    """``evaluate_policy``'s metrics from the same episodes played as rollouts against the model ``service`` (at most
    ``eval_concurrency`` at once), each taking a start slot from ``slots``
    (``platoon.live.rollouts.evaluate.EvalSlots``), their routing ids counted by ``routing`` (a ``RoutingIdWatch``,
    whose coverage is added), each played in a rollout worker of ``workers`` (``rollout_workers``; None: in this
    process). ``model`` gives the context window
    when ``train.context_window_length`` does not."""
    from platoon.live.rollouts.evaluate import evaluate_rollouts

    renderer = renderer if renderer is not None else build_renderer(cfg, envs)
    temperature, _ = sampling(cfg)
    limits = _eval_limits(cfg, model)
    results, first = [], 0
    for e, env, ids, k in _eval_entries(cfg, envs, n):
        r = await evaluate_rollouts(service, env, ids, k, temperature=temperature, seed=cfg.train.seed,
                                    renderer=renderer, limits=limits, concurrency=eval_concurrency(cfg),
                                    slots=slots, first_index=first, routing=routing, workers=workers,
                                    entry=e.label)
        results.append((e, k, r))
        first += k
    metrics = _eval_metrics(cfg, results)
    if routing is not None:
        metrics.update(routing.metrics())
    return metrics


@dataclass
class LiveRun:
    """The objects of one start of a live run (see the module docstring)."""

    cfg: RunConfig
    envs: dict[str, Any]
    policy: PolicyLayer
    model: Any
    trainer: Any
    service: Any
    workflow: Any
    eval_episodes: int = EVAL_EPISODES
    clock_start_s: float = 0.0  # the run's clock when this start begins (its policy's clock begins there too)
    state_lost: str | None = None  # what of its checkpoint's state a resumed start could not read (its start event)
    eval_routing: RoutingIdWatch = field(default_factory=lambda: RoutingIdWatch("eval"))  # per start
    staging: Staging | None = None  # the environments' toolchains, staged since the start was built
    workers: Any = None  # the rollout workers (rollout_isolation: process), a platoon.live.workers.WorkerPool
    renderer: Any = None  # the run's renderer (build_renderer), which evaluation plays with too

    @property
    def dispatcher(self) -> Any:
        return self.policy.dispatcher

    def evaluate(self, n: int | None = None) -> dict[str, float]:
        """Held-out pass@1 of the trainer's current policy (``eval/pass@1``, its interval, each entry's)."""
        return evaluate_policy(self.model, self.cfg, self.envs, self.eval_episodes if n is None else n,
                               renderer=self.renderer)

    async def evaluate_in_training(self, slots: Any) -> dict[str, float]:
        """``evaluate``'s metrics during training: the episodes are rollouts against the model service (which serves
        the trainer's current policy whenever the runtime evaluates), taking start slots from ``slots`` (the
        runtime's, scope ``eval``), with ``eval/rollout_worker_routing_id_coverage``; under ``rollout_isolation:
        process`` each plays in a rollout worker, as training's rollouts do."""
        return await evaluate_service(self.service, self.cfg, self.envs, self.eval_episodes, renderer=self.renderer,
                                      model=self.model, slots=slots, routing=self.eval_routing, workers=self.workers)

    def trainer_state(self) -> bytes:
        """``trainer.pt``: the trainer's state as bytes."""
        from platoon.live.training.trainer import dumps_state

        return dumps_state(self.trainer.state_dict())


def build_renderer(cfg: RunConfig, envs: Mapping[str, Any]) -> Any:
    """The renderer ``train.renderer_name`` names (with ``train.renderer_kwargs``) over the model's tokenizer: for
    ``tiny`` the tiny tokenizer of the environments' words (``platoon.live.agent.harness.tiny_tokenizer``), for a
    checkpoint its own tokenizer, read locally. ConfigError when it cannot be built."""
    from platoon.live.agent.harness import tiny_tokenizer
    from platoon.live.agent.renderer import make_renderer

    _check_model_name(cfg)
    name = cfg.train.renderer_name
    tokenizer = tiny_tokenizer(envs.values()) if cfg.train.model_name == "tiny" else _checkpoint_tokenizer(cfg, name)
    try:
        renderer = make_renderer(name, tokenizer, **cfg.train.renderer_kwargs)
    except TypeError as exc:
        raise ConfigError([f"train.renderer_kwargs: {name} takes no such option ({exc})"]) from None
    except (ValueError, ImportError) as exc:
        raise ConfigError([f"train.renderer_name: {exc}"]) from None
    if getattr(renderer, "choice", None):
        print(f"info: renderer {name}: {renderer.choice}", file=sys.stderr, flush=True)
    return renderer


def _checkpoint_tokenizer(cfg: RunConfig, renderer_name: str) -> Any:
    """A checkpoint's tokenizer (``transformers``, local files only): as it is for ``chat_template``, which applies
    its chat template; behind the plain ``Tokenizer`` protocol (no special tokens added) for ``role_colon``."""
    from platoon.live.inference.hf import load_tokenizer

    try:
        hf = load_tokenizer(cfg.train.model_name)
    except (OSError, ValueError) as exc:
        raise ConfigError([f"train.model_name: no tokenizer could be read from {cfg.train.model_name!r} ({exc})"]) \
            from None
    if renderer_name != "role_colon":
        return hf
    from platoon.live.agent.chat_template import HFTokenizer

    return HFTokenizer(hf)


def _check_model_name(cfg: RunConfig) -> None:
    from platoon.live.inference.hf import model_name_problem

    problem = model_name_problem(cfg.train.model_name)
    if problem:
        raise ConfigError([problem])


def context_window(cfg: RunConfig, model: Any) -> int | None:
    """The tokens an episode's context may hold: ``train.context_window_length``, else the model's (None: no cap)."""
    return cfg.train.context_window_length or getattr(model, "max_len", None)


def build_model(cfg: RunConfig, envs: Mapping[str, Any], renderer: Any = None) -> Any:
    """The policy ``train.model_name`` names, seeded by the run: ``tiny`` sized by the renderer's tokenizer (its
    vocabulary and initial read-out bias) and ``train.context_window_length`` (else ``TINY_CONTEXT``) positions."""
    import torch

    from platoon.live.inference.hf import model_name_problem
    from platoon.live.inference.model_kinds import build_causal_policy

    problems = [p for p in [model_name_problem(cfg.train.model_name)] if p]
    if cfg.model.device == "cuda" and not torch.cuda.is_available():
        problems.append("model.device: cuda, and this torch sees no CUDA device; use auto or cpu")
    if problems:
        raise ConfigError(problems)
    if cfg.model.device == "cpu" or not torch.cuda.is_available():
        # The model service, the trainer and evaluation each run torch in a thread of their own; with a pool of
        # spinning workers each, small batches ran ~17x slower in CPU time on two cores. One thread each.
        torch.set_num_threads(1)
    if cfg.train.model_name != "tiny":
        return build_causal_policy(cfg.train.model_name, cfg.model, vocab_size=0, max_len=0)
    tokenizer = (renderer if renderer is not None else build_renderer(cfg, envs)).tokenizer
    prior = getattr(tokenizer, "logit_prior", None)
    return build_causal_policy("tiny", cfg.model, vocab_size=tokenizer.vocab_size,
                               max_len=cfg.train.context_window_length or TINY_CONTEXT, seed=cfg.train.seed,
                               logit_prior=prior() if prior is not None else None)


def load_init_from(model: Any, cfg: RunConfig) -> None:
    """Load ``train.init_from``'s weights (a run directory's newest checkpoint that reads back: an SFT run's, or
    another run's) into ``model``, saying so on stderr; nothing when it is null. ConfigError naming the key when the
    run has no such checkpoint or its weights do not fit ``model`` (another model, shape, or for ``tiny`` other
    environments: its tokenizer's words are theirs)."""
    from platoon.live.training.checkpoint import LiveRunDir
    from platoon.live.training.trainer import loads_state
    from platoon.runs import CheckpointError, CorruptFileError, RunDir

    source = cfg.train.init_from
    if source is None:
        return
    at = f"train.init_from: {source}"
    rd = RunDir(source)
    if not rd.lock_path.is_file():
        raise ConfigError([f"{at}: not a run directory (no lock.json)"])
    try:
        theirs = config_from_lock(rd.read_lock(), str(rd.lock_path))
        point = LiveRunDir(rd).resume_point()
    except (CorruptFileError, CheckpointError, ConfigError) as exc:
        raise ConfigError([f"{at}: {exc}"]) from None
    if point.trainer_state is None:
        raise ConfigError([f"{at}: its checkpoint {point.name} holds no weights (a simulated run?)"])
    problems = _init_from_problems(cfg, theirs)
    weights = loads_state(point.trainer_state)["model"]
    mine = model.state_dict()
    problems += [f"{name}: {tuple(w.shape)} there, {tuple(mine[name].shape)} here" for name, w in weights.items()
                 if name in mine and tuple(w.shape) != tuple(mine[name].shape)]
    if set(weights) != set(mine):
        problems.append(f"its weights name other tensors ({len(set(weights) ^ set(mine))} differ)")
    if problems:
        raise ConfigError([f"{at}: its weights do not fit this run's model: {'; '.join(problems)}"])
    model.load_state_dict(weights)
    print(f"info: the policy starts from {source} at step {point.step} (checkpoint {point.name})", file=sys.stderr,
          flush=True)


def _init_from_problems(cfg: RunConfig, theirs: RunConfig) -> list[str]:
    """What makes ``theirs``'s weights another model than ``cfg``'s (the tiny model's words are its environments')."""
    if theirs.train.model_name != cfg.train.model_name:
        return [f"its train.model_name is {theirs.train.model_name!r}, this run's {cfg.train.model_name!r}"]
    envs = [(e.env, e.service_kwargs) for e in cfg.environments]
    if cfg.train.model_name == "tiny" and [(e.env, e.service_kwargs) for e in theirs.environments] != envs:
        return ["the tiny model's tokenizer holds its environments' words, and its environments (env, service_kwargs) "
                "are not this run's"]
    return []


def default_service(model: Any, cfg: RunConfig, version: int = 0) -> Any:
    """The built-in model service over ``model`` (policy ``version``): dynamic batching of concurrent rollouts'
    requests in a worker thread."""
    from platoon.live.inference.service import BatchingModelService

    return BatchingModelService(model, max_batch=cfg.model.max_batch, seed=cfg.train.seed, version=version)


def build_live(cfg: RunConfig, *, start: int = 1, envs: Mapping[str, Any] | None = None,
               workflow_cls: type = GroupRolloutWorkflow,
               service_factory: Callable[..., Any] | None = None, eval_episodes: int = EVAL_EPISODES,
               trainer_state: bytes | None = None, version: int = 0, clock_start_s: float = 0.0) -> LiveRun:
    """Everything one start of a live run drives. ``start``: this start's number; ``trainer_state``: the bytes of a
    checkpoint's ``trainer.pt`` to go on from, whose weights the model service serves as policy ``version``;
    ``clock_start_s``: the run's clock when this start begins (a resume's: its checkpoint's ``clock_s``);
    ``service_factory(model, cfg, version)``: the model service (default: the built-in batching one);
    ``eval_episodes``: per ``eval/pass@1``."""
    from platoon.live.training.trainer import GRPOTrainer

    from_config = envs is None
    envs = dict(envs) if envs is not None else build_environments(cfg)
    # the toolchains are staged in a thread while the model, the trainer and the launch save are made
    staging = Staging(run_toolchains(envs.values())).start()
    pool = build_pool(cfg, envs)
    policy = build_policy(cfg, pool, start=start, rolling=workflow_runs_on_lease(workflow_cls),
                          measure=measured_call, runtime="live", now=clock_start_s,
                          group_workflow=issubclass(workflow_cls, GroupRolloutWorkflow))
    renderer = build_renderer(cfg, envs)
    model = build_model(cfg, envs, renderer)
    if trainer_state is None:
        load_init_from(model, cfg)  # before the trainer: a KL reference is the policy it starts from
    trainer = GRPOTrainer.from_config(model, cfg.train, cfg.model)
    if trainer_state is not None:
        from platoon.live.training.trainer import loads_state

        trainer.load_state_dict(loads_state(trainer_state))
    if service_factory is None and cfg.train.inference.engine == "vllm":
        from platoon.live.inference.engine import VLLMEngine

        service = VLLMEngine(cfg, model, version)  # it reads the model's weights once, at its start, for the servers
    else:
        service = (service_factory or default_service)(copy.deepcopy(model), cfg, version)
    workers = rollout_workers(cfg, envs, from_config=from_config)  # its fork server opens as the service is up
    run = cfg.train.workflow_config
    temperature, max_tokens = sampling(cfg)
    workflow = workflow_cls(envs, service, seed=cfg.train.seed, temperature=temperature,
                            max_new_tokens=max_tokens, straggler_timeout_s=run.straggler_timeout_seconds,
                            quorum=run.straggler_quorum, leave_one_out_baseline=run.leave_one_out_baseline,
                            min_successful_group_size=run.min_successful_group_size, renderer=renderer,
                            max_turns=run.rollout_config.max_steps, context_window=context_window(cfg, model),
                            step_timeout=run.rollout_config.step_timeout)
    if workers is not None:
        workflow.rollout_workers = workers
    told = getattr(getattr(workflow, "routing", None), "told", None)  # one notice a start, training's or evaluation's
    return LiveRun(cfg, envs, policy, model, trainer, service, workflow, eval_episodes, clock_start_s,
                   staging=staging, workers=workers, renderer=renderer, eval_routing=RoutingIdWatch("eval", told))
