"""What a simulated run is built from: its config (a file, a preset, overrides), each entry's workload, its tasks
and their pool, and the learning model.

- ``load_sim_config``: ``platoon simulate``'s config. No file: a preset (``long-agentic`` unless ``--preset``) is
  the whole run. A file beside ``--preset NAME``: the file's run with the preset's workload (``sim.preset``).
  ``sim.preset`` in any config takes the preset's ``sim`` block as the base of the config's own ``sim`` keys (the
  loader merges it, ``platoon.config.presets``). Every problem raises one ``ConfigError`` (exit 78): a config that
  fails stage 1 is resolved too, so that what cannot import joins the report (the run resolves one that passes).
- ``entry_sims``: each entry's workload, its ``sim`` overrides deep-merged onto the run's; an entry may not set
  what is the run's alone (the trainer, the GPUs, a preset).
- ``environment_tasks``: an entry that names an extension's environment (a registered name that is not core's)
  and lists no tasks of its own, nor a task file, simulates its environment's training tasks: the environment is
  opened (its ``service_kwargs``), its ``dataset_kwargs`` splits listed as ``platoon train`` lists them, and each
  task's columns kept for ``label_by``. The built-in stays the presets' stand-in: its entries get a synthesized
  population (``population.tasks``);
- the policy layer itself is built by ``platoon.components.build_policy`` over the pool built here, as the
  live backend builds it over its environments' tasks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from platoon.config import registry
from platoon.config.components import CORE_ENVIRONMENTS
from platoon.config.effective import RUN_ONLY_SIM_KEYS, group_size, merge_sim, select_tasks
from platoon.config.errors import ConfigError
from platoon.config.loader import load_config
from platoon.config.models import EnvironmentConfig, RunConfig
from platoon.config.presets import (
    DEFAULT_PRESET,
    PRESETS_DIR,
    preset_data,
    preset_names,
    preset_path,
    unknown_preset,
)
from platoon.config.problems import describe_errors
from platoon.config.sim import SimConfig
from platoon.policy import DEFAULT_LABEL_COLUMN, EntrySpec, TaskPool, label_value
from platoon.sim.learning import EntryTasks, Learner
from platoon.sim.workload import Workload

__all__ = ["DEFAULT_PRESET", "PRESETS_DIR", "RUN_ONLY_SIM_KEYS", "SimTasks", "build_tasks", "entry_sims",
           "environment_tasks", "load_sim_config", "opens_environment", "preset_data", "preset_names", "preset_path"]


def load_sim_config(config: Path | None, *, preset: str | None = None, overrides: Sequence[str] = (),
                    sim: Mapping[str, Any] | None = None) -> RunConfig:
    """``platoon simulate``'s config (see the module docstring); raises one ConfigError with every problem.

    The loader merges the preset's sim block under the config's own (``sim.preset``), before the ``--set``
    overrides, so that both land on the preset's values. ``sim``: a workload's sim block (``--workload``), which
    replaces the config's own whole (no preset beside it)."""
    if preset is not None and unknown_preset(preset):
        raise ConfigError([f"--preset: {unknown_preset(preset)}"])
    sections = {"sim": sim} if sim is not None else None
    if config is None:
        name = preset or DEFAULT_PRESET
        return load_config(preset_path(name), [f"sim.preset={name}"] * (sim is None) + list(overrides),
                           sections=sections, resolve_on_failure=True)
    return load_config(config, [f"sim.preset={preset}"] * (preset is not None) + list(overrides), sections=sections,
                       resolve_on_failure=True)


def entry_sims(cfg: RunConfig) -> list[SimConfig]:
    """Each entry's workload: the run's sim block with the entry's overrides merged in."""
    problems: list[str] = []
    out: list[SimConfig] = []
    base = cfg.sim.model_dump(mode="json")
    for i, e in enumerate(cfg.environments):
        for key in RUN_ONLY_SIM_KEYS:  # the loader refuses these; a config built in code may hold them
            if key in e.sim:
                problems.append(f"environments.{i}.sim.{key}: the run's alone; set it in the run's sim block")
        if not e.sim:
            out.append(cfg.sim)
            continue
        merged = merge_sim(base, {k: v for k, v in e.sim.items() if k not in RUN_ONLY_SIM_KEYS})
        try:
            out.append(SimConfig.model_validate(merged))
        except ValidationError as exc:
            problems += [str(p) for p in describe_errors(exc, root=SimConfig, data=merged,
                                                         prefix=f"environments.{i}.sim")]
    if problems:
        raise ConfigError(problems)
    return out


def opens_environment(env: str) -> bool:
    """Whether the simulator lists an entry's tasks from its environment ``env``: a registered name, not core's."""
    name = env.partition("@")[0]
    return ":" not in env and name not in CORE_ENVIRONMENTS and registry.lookup("environment", name) is not None


def environment_tasks(e: EnvironmentConfig, *, training: bool = True) -> tuple[list[str], list[dict]]:
    """Entry ``e``'s training task ids (its ``dataset_kwargs`` splits, in order), or its held-out ones
    (``eval_dataset_kwargs``, the environment's eval split by default), and their columns, from its opened
    environment; ConfigError (paths relative to the entry) when it cannot be opened or lacks a split."""
    name = e.env.partition("@")[0]
    try:
        env = registry.lookup("environment", name)(**dict(e.service_kwargs))
    except Exception as exc:  # noqa: BLE001 - the environment's own words about its options
        raise ConfigError([f"service_kwargs: {name} cannot open: {type(exc).__name__}: {exc}"]) from exc
    kwargs, at = (e.dataset_kwargs, "dataset_kwargs") if training else (e.eval_dataset_kwargs, "eval_dataset_kwargs")
    splits = kwargs.splits("train" if training else getattr(env, "eval_split", "eval"))
    ids: list[str] = []
    for split in splits:
        try:
            ids += env.task_ids(split)
        except KeyError as exc:
            raise ConfigError([f"{at}.split_name: {exc.args[0] if exc.args else exc}"]) from None
    if not ids:
        raise ConfigError([f"{at}.split_name: {name} lists no task in {', '.join(splits)}"])
    data = [dict(env.task(t).columns) for t in ids]
    if not training and kwargs.where:  # training's are selected with the rest of dataset_kwargs (build_tasks)
        ids, data = [t for t, d in zip(ids, data, strict=True) if kwargs.matches(d)], \
            [d for d in data if kwargs.matches(d)]
        if not ids:
            raise ConfigError([f"{at}.where: no task of {', '.join(splits)} matches {kwargs.where}"])
    return ids, data


@dataclass
class SimTasks:
    """The run's simulated tasks: per entry its ``EntryTasks``, workload and sim block; the pool and the learner."""

    entries: list[EntryTasks]
    sims: list[SimConfig]
    workloads: list[Workload]
    pool: TaskPool
    learner: Learner
    row_entry: list[int]


def build_tasks(cfg: RunConfig) -> SimTasks:
    """Tasks, pool and learning model of ``cfg`` (task files and empirical duration files are read here; a problem
    with one is a ConfigError naming its key)."""
    sims = entry_sims(cfg)
    problems: list[str] = []
    entries: list[EntryTasks] = []
    workloads: list[Workload] = []
    for i, (e, sim) in enumerate(zip(cfg.environments, sims, strict=True)):
        where = f"environments.{i}.sim" if e.sim else "sim"
        ids, data, heldout = e.tasks, None, None
        grouped = sim.learning.similar_by is not None
        if sim.tasks is None and (grouped or (e.tasks is None and opens_environment(e.env))):
            try:
                ids, data = environment_tasks(e)
                heldout = environment_tasks(e, training=False) if grouped else None
            except ConfigError as exc:
                problems += [f"environments.{i}.{p}" for p in exc.problems]
                continue
        try:
            tasks = EntryTasks.build(e.label, sim, seed=e.seed, task_ids=ids, data=data, heldout=heldout)
            columns = dict(zip(tasks.task_ids, tasks.data, strict=False)) if tasks.data else None
            chosen = select_tasks(tasks.task_ids, e.dataset_kwargs, e.exclude_tasks,
                                  None if columns is None else lambda t, c=columns: c.get(t, {}))
            # Usually nothing is excluded, shuffled or cut: skip copying every row then (only with distinct ids:
            # select gives a repeated id its last row's data).
            unchanged = chosen == tasks.task_ids and len(set(chosen)) == len(chosen)
            entries.append(tasks if unchanged else tasks.select(chosen))
        except ValueError as exc:
            problems.append(f"{where}.tasks: {exc}")
        try:
            workloads.append(Workload(sim.rollout))
        except ValueError as exc:
            problems.append(f"{where}.rollout: {exc}")
    if problems:
        raise ConfigError(problems)
    label_by = cfg.train.label_by
    specs = []
    for i, (e, tasks) in enumerate(zip(cfg.environments, entries, strict=True)):
        labels = None
        if label_by is not None:
            labels = [label_value(row.get(label_by)) for row in tasks.data]
        specs.append(EntrySpec(e.label, tasks.task_ids, group_size(cfg, i),
                               None if e.weight == "tasks" else e.weight, e.seed, e.success_threshold, labels,
                               tasks.data))
    pool = TaskPool.from_entries(specs, label_column=label_by or DEFAULT_LABEL_COLUMN)
    index = {e.label: i for i, e in enumerate(cfg.environments)}
    row_entry = [index[row.entry] for row in pool.rows]
    offsets: dict[str, int] = {}
    row_task = []
    for row in pool.rows:
        row_task.append(offsets.get(row.entry, 0))
        offsets[row.entry] = row_task[-1] + 1
    learner = Learner(entries, row_entry, row_task,
                      learn=[s.learning_on for s in sims],
                      gain=[s.learning.gain for s in sims], transfer=[s.learning.transfer for s in sims],
                      initial_ability=[s.learning.initial_ability for s in sims],
                      label_gain=[s.learning.label_gain for s in sims],
                      forget_half_life=[s.learning.forget_half_life for s in sims])
    return SimTasks(entries, sims, workloads, pool, learner, row_entry)

