"""Loading a run config: YAML, a preset, ``--set`` overrides, the files it names, and stage 1 of validation, as one
report.

What this module owns: ``load_config`` (read, merge the preset, override, validate), ``config_from_lock`` (a run's
recorded config, validated the same way), ``check_config`` (stage 1 for a config built in code) and the validation
that turns pydantic's errors into problems, with defaults standing in for bad values. Its parts live beside it:
``platoon.config.yaml_loader`` (the bounded YAML reader), ``platoon.config.presets``, ``platoon.config.overrides``
(``--set``), ``platoon.config.rules`` (the rules between fields, ``config_problems``), ``platoon.config.sim_files``
(the readers of the files a sim block names) and ``platoon.config.show`` (``to_yaml``, what ``config show``
prints); this module re-exports ``config_problems`` and ``to_yaml``.

Rules it keeps:
- ``load_config`` gathers every problem of a file (YAML syntax, duplicate keys, wrong types, missing and unknown
  keys at every level, out-of-range and non-finite values, an unknown preset, names nothing could resolve, core
  components' options, the rules between fields, the files it names: task files, duration files, an hf checkpoint's
  directory) and raises one ``ConfigError``, each line starting with its dotted key path; it never lets a traceback
  out. What it passes, ``platoon simulate`` and ``platoon train`` accept (docs/configuration.md, "Validation");
- ``sim.preset``'s sim block is merged under the config's own sim keys before the overrides apply, so every command
  (``config validate`` and ``config show`` included) sees the block the simulator runs;
- a value that fails its own check is replaced by its default for the rules between fields, and a rule that reads
  it is skipped, so one mistake is reported once;
- a problem at a key an override set is prefixed ``override <key>=<value>: ``;
- a duplicate YAML key is reported and its last value validated, so the file's other problems join the report;
- stage 1 imports nothing; ``strict_resolve=True`` runs stage 2 (``platoon.config.resolve``) too, and when stage 1
  failed, on the config with defaults standing in for its bad values: stage 2's problems join the one report,
  less those at, above or below a key stage 1 named.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from platoon.config.base import drop_recorded_defaults
from platoon.config.bounds import MAX_TASKS
from platoon.config.config_warnings import config_warnings
from platoon.config.effective import RUN_ONLY_SIM_KEYS, merge_sim
from platoon.config.errors import ConfigError
from platoon.config.models import EMBEDDED_DEFAULT, RunConfig, SimConfig
from platoon.config.overrides import apply_override, override_value, with_overrides
from platoon.config.presets import preset_data, unknown_preset
from platoon.config.problems import MISSING_KEY, Problem, describe_errors
from platoon.config.resolve import resolution_problems
from platoon.config.rules import config_problems
from platoon.config.show import to_yaml
from platoon.config.sim_files import read_durations, read_task_file
from platoon.config.yaml_loader import MAX_DEPTH, describe_yaml_error, nesting_depth, read_yaml

__all__ = ["DEFAULT_SOURCE", "check_config", "config_from_lock", "config_problems", "load_config",
           "load_config_warnings", "load_data", "to_yaml"]

DEFAULT_SOURCE = "<default>"


def load_config(
    path: Path | None, overrides: Sequence[str] = (), *, strict_resolve: bool = False, needs_log_path: bool = False,
    data: Mapping[str, Any] | None = None, sections: Mapping[str, Any] | None = None, resolve_on_failure: bool = False,
) -> RunConfig:
    """Read the config at ``path`` (None: the embedded default, every field at its default), apply ``overrides``
    (``dotted.key=value``, YAML-typed, list indices allowed, ``null`` for None) and validate it.

    Raises one ConfigError with every problem. ``needs_log_path``: a config without ``log_path`` is refused (as
    platoon 0.4.0 refuses it: ``config validate``, and ``train`` without ``--out``). With ``strict_resolve`` a config
    is also resolved (stage 2: packages imported, components resolved, their options and checks run), and its
    problems raise; when stage 1 fails, stage 2 runs on what it could validate, and its problems join stage 1's.
    ``resolve_on_failure``: that last only (a caller that resolves a config that passes itself: ``simulate``).
    ``data``: a run's recorded config (``lock.json``), in place of reading ``path`` (which names it in messages, and
    whose directory relative file names are taken from); its no-effect keys at their defaults are dropped
    (``drop_recorded_defaults``), so that only what the run's config set is warned about. ``sections``: top-level sections that replace the
    config's own before the overrides apply (a fitted workload's ``sim``).
    """
    source = DEFAULT_SOURCE if path is None else str(path)
    problems: list[Problem] = []
    recorded = data is not None
    if data is not None:
        data = copy.deepcopy(dict(data))
        drop_recorded_defaults(data, RunConfig)
    else:
        data = _read(path, problems)
    applied: dict[str, str] = {}
    if data is not None and sections:
        data.update(copy.deepcopy(dict(sections)))
    if data is not None and path is not None:
        _absolute_files(data, Path(path).resolve().parent)
    cfg = best = None
    covered: frozenset[str] = frozenset()
    if data is not None:
        _merge_preset(data, overrides, problems)
        for text in overrides:
            apply_override(data, text, applied, problems)
        cfg, best, covered = _validate(data, problems)
        if best is not None and not recorded:  # a recorded run took its weights at its start
            problems += _init_from_problems(best)
        if needs_log_path and data.get("log_path") is None and not any(p.path == "log_path" for p in problems):
            problems.append(Problem("log_path", f"{MISSING_KEY} (where runs go; train --out DIR names the run "
                                                "directory instead)", ("log_path",)))
            cfg = None
    if best is not None and (strict_resolve or (resolve_on_failure and problems)):
        # Stage 2 joins stage 1's report: what it says at, above or below a key stage 1 named (a bad value, whose
        # default stands in, or a rule's) is left to stage 1.
        problems += [p for p in resolution_problems(best) if not _covered(p.path, covered)]
    if problems:
        raise ConfigError(with_overrides([str(p) for p in problems], applied), source)
    assert cfg is not None
    return cfg


def _covered(path: str, covered: frozenset[str]) -> bool:
    return any(path == p or path.startswith(p + ".") or p.startswith(path + ".") for p in covered)


def load_data(
    path: Path, overrides: Sequence[str] = (), *, defaults: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The data of the YAML file at ``path`` with ``overrides`` applied, checked against no schema (``config validate
    --kind none``, ``--schema``), and the overrides applied (key -> text, for ``with_overrides``): ``defaults`` give a
    key an override reaches into its starting value (None: ``RunConfig``'s). Raises one ConfigError with every problem
    of the file and the overrides."""
    problems: list[Problem] = []
    applied: dict[str, str] = {}
    data = _read(path, problems)
    for text in overrides if data is not None else ():
        apply_override(data, text, applied, problems, defaults=defaults)
    if problems or data is None:
        raise ConfigError(with_overrides([str(p) for p in problems], applied), str(path))
    return data, applied


def config_from_lock(lock: object, source: str) -> RunConfig:
    """The config a run's ``lock.json`` (``lock``, read from ``source``) records, validated as a file's would be:
    one ConfigError with every problem (a lock without a config, or whose config this release refuses)."""
    data = lock.get("config") if isinstance(lock, dict) else None
    if not isinstance(data, dict):
        what = "no config" if data is None else f"a config that is a {type(data).__name__}, not a mapping"
        raise ConfigError([f"config: {source} holds {what}; it is not a run's lock file"], source)
    if nesting_depth(data) > MAX_DEPTH:
        raise ConfigError([f"config: nested more than {MAX_DEPTH} levels deep"], source)
    problems: list[Problem] = []
    data = copy.deepcopy(data)
    drop_recorded_defaults(data, RunConfig)
    cfg, _, _ = _validate(data, problems)
    if problems:
        raise ConfigError([str(p) for p in problems], source)
    assert cfg is not None
    return cfg


def load_config_warnings(cfg: RunConfig) -> list[str]:
    """The warnings of a valid config (``config validate`` prints them as ``warning: ...``)."""
    return config_warnings(cfg)


def check_config(cfg: RunConfig, *, source: str = "<config>") -> None:
    """Stage 1 for a config built in code: raise one ConfigError with every problem of its rules between fields."""
    problems = config_problems(cfg)
    if problems:
        raise ConfigError([str(p) for p in problems], source)


# --- reading ---------------------------------------------------------------------------------------------------


def _read(path: Path | None, problems: list[Problem]) -> dict[str, Any] | None:
    if path is None:
        return copy.deepcopy(EMBEDDED_DEFAULT)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem("<file>", f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}"))
        return None
    try:
        data, duplicates = read_yaml(text)
    except yaml.YAMLError as exc:
        problems += [Problem(p.path or "<yaml>", p.message) for p in describe_yaml_error(exc)]
        return None
    problems += [Problem(p.path, p.message) for p in duplicates]  # the last value is validated as the rest
    if data is None:
        return {}
    if not isinstance(data, dict):
        problems.append(
            Problem(
                "<root>",
                f"must be a mapping of train, environments, model and sim, got a {type(data).__name__}",
            )
        )
        return None
    return data


def _absolute_files(data: dict[str, Any], base: Path) -> None:
    """Make the file names a config's own text gives (``sim.tasks``, an empirical duration's ``file``, in the run's
    sim block and in each entry's, and ``train.model_name`` when it is a directory there) absolute, relative to the config's directory; an override's
    names stay relative to the working directory."""

    def fix(node: Any, key: str) -> None:
        if isinstance(node, dict) and isinstance(node.get(key), str) and node[key]:
            if not Path(node[key]).expanduser().is_absolute():
                node[key] = str(base / node[key])

    def walk_sim(sim: Any) -> None:
        if not isinstance(sim, dict):
            return
        fix(sim, "tasks")
        rollout = sim.get("rollout")
        for dist in rollout.values() if isinstance(rollout, dict) else ():
            if isinstance(dist, dict) and dist.get("dist") == "empirical":
                fix(dist, "file")

    walk_sim(data.get("sim"))
    for entry in data.get("environments") if isinstance(data.get("environments"), list) else ():
        if isinstance(entry, dict):
            walk_sim(entry.get("sim"))
    train = data.get("train")
    if isinstance(train, dict) and isinstance(train.get("model_name"), str) and train["model_name"] != "tiny":
        local = base / Path(train["model_name"]).expanduser()
        if local.is_dir():
            train["model_name"] = str(local)


def _init_from_problems(cfg: RunConfig) -> list[Problem]:
    """``train.init_from`` naming no run directory (the weights it holds are checked as the run loads them)."""
    source = cfg.train.init_from
    if source is None or (Path(source).expanduser() / "lock.json").is_file():
        return []
    return [Problem("train.init_from", "not a run directory (no lock.json)", ("train", "init_from"))]


def _merge_preset(data: dict[str, Any], overrides: Sequence[str], problems: list[Problem]) -> None:
    """Take the sim block of the preset ``sim.preset`` names (the last override of it, else the file's) as the base of
    the config's own sim keys, before the overrides apply (so that they land on the preset's values); an unknown name
    is a problem at ``sim.preset``."""
    own = data.get("sim")
    name = own.get("preset") if isinstance(own, dict) else None
    for text in overrides:
        key, sep, raw = text.partition("=")
        if sep and key.strip() == "sim.preset":
            value, ok = override_value(raw)
            if ok:
                name = value
    if not isinstance(name, str) or (own is not None and not isinstance(own, dict)):
        return  # no preset, or a value the models report in their own words
    why = unknown_preset(name)
    if why:
        problems.append(Problem("sim.preset", why, ("sim", "preset")))
        return
    base = preset_data(name).get("sim")
    data["sim"] = {**merge_sim(base if isinstance(base, dict) else {}, own or {}), "preset": name}


# --- validation ------------------------------------------------------------------------------------------------


def _validate(
    data: dict[str, Any], problems: list[Problem]
) -> tuple[RunConfig | None, RunConfig | None, frozenset[str]]:
    """Validate ``data``, adding its problems; then run the rules between fields on a copy whose bad values are
    replaced by their defaults. Returns the config when ``data`` itself was valid (else None), that copy (the best
    effort, None when none validates) and the paths of the problems found about its values (the bad values and
    the rules between fields; not the files it names), which stage 2 leaves to stage 1."""
    found: list[Problem] = []
    cfg: RunConfig | None = None
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as exc:
        found += describe_errors(exc, root=RunConfig, data=data)
    found += _entry_sim_problems(data)
    problems += found
    invalid = frozenset(p.path for p in found)
    best = cfg if not found else _best_effort(data, found)
    covered = invalid
    if best is not None:
        rules = config_problems(best, invalid=invalid)
        problems += rules + _file_problems(best, invalid)
        covered |= {p.path for p in rules}
    return (cfg if not problems else None), best, covered


def _file_problems(cfg: RunConfig, invalid: frozenset[str]) -> list[Problem]:
    """The files the config names, read as the run will read them: each entry's task file and empirical duration
    files (its sim block merged onto the run's); and the run's tasks over every
    entry, at most ``MAX_TASKS`` training and as many held-out."""
    out: list[Problem] = []
    base = cfg.sim.model_dump(mode="json")
    read: dict[tuple[str, str], str | int] = {}  # (what, file) -> problem text, or the task file's rows

    def once(what: str, file: str) -> str | int:
        if (what, file) not in read:
            try:
                read[(what, file)] = len(read_task_file(file)) if what == "tasks" else len(read_durations(file))
            except ValueError as exc:
                read[(what, file)] = str(exc)
        return read[(what, file)]

    training = heldout = 0
    for i, e in enumerate(cfg.environments):
        at = f"environments.{i}"
        if any(p == at or p.startswith(at + ".") for p in invalid):
            continue
        try:
            sim = SimConfig.model_validate(merge_sim(base, e.sim)) if e.sim else cfg.sim
        except ValidationError:
            continue  # _entry_sim_problems reported it
        rows: str | int | None = None
        if sim.tasks is not None:
            rows = once("tasks", sim.tasks)
            if isinstance(rows, str):
                out.append(Problem(f"{at}.sim.tasks" if "tasks" in e.sim else "sim.tasks", rows))
                rows = None
        training += len(e.tasks) if e.tasks is not None and sim.tasks is None else rows or sim.population.tasks
        heldout += sim.population.heldout if sim.tasks is None else 0
        own_rollout = e.sim.get("rollout") if isinstance(e.sim.get("rollout"), dict) else {}
        for key in ("duration", "fail_duration", "first_call_s", "teardown_s", "env_step_s"):
            dist = getattr(sim.rollout, key)
            if getattr(dist, "dist", None) == "empirical" and dist.file is not None:
                why = once("durations", dist.file)
                if isinstance(why, str):
                    out.append(Problem(f"{at + '.sim' if key in own_rollout else 'sim'}.rollout.{key}.file", why))
    out = list(dict.fromkeys(out))
    for count, what in ((training, "training"), (heldout, "held-out")):
        if count > MAX_TASKS and "environments" not in invalid:
            out.append(Problem("environments", f"the entries hold {count} {what} tasks in all; a run may have at "
                                               f"most {MAX_TASKS}"))
    return out


def _best_effort(data: dict[str, Any], found: list[Problem]) -> RunConfig | None:
    work = copy.deepcopy(data)
    for _ in range(4):
        for p in found:
            _drop(work, p)
        try:
            return RunConfig.model_validate(work)
        except ValidationError as exc:
            found = describe_errors(exc, root=RunConfig, data=work)
    return None


def _drop(work: dict[str, Any], p: Problem) -> None:
    """Remove the value ``p`` is about, so that its default stands in: the key itself, or for a missing key the
    nearest mapping key above it (a distribution without its fields). An entry keeps its place in the list."""
    loc = p.loc
    if loc[:1] == ("environments",) and len(loc) >= 3 and loc[2] == "sim":
        return  # an entry's sim overrides are a mapping of anything until the simulator merges them
    missing = p.message == MISSING_KEY
    if any(_at_loc(work, loc[:end]) is _MISSING for end in range(1, len(loc) + (0 if missing else 1))):
        return  # an earlier problem removed it, or a value above it
    if missing and tuple(loc) in _STAND_INS:
        parent = _at_loc(work, loc[:-1])
        if isinstance(parent, dict):
            parent[loc[-1]] = copy.deepcopy(_STAND_INS[tuple(loc)])
            return
    for end in range(len(loc), 0, -1):
        parent, key = _at_loc(work, loc[: end - 1]), loc[end - 1]
        if isinstance(parent, dict) and key in parent:
            del parent[key]
            return
        if isinstance(parent, list) and loc[: end - 1] == ("environments",):
            parent[key] = {"name": f"<entry {key}>"}
            return


_MISSING = object()

_STAND_INS: dict[tuple[str | int, ...], Any] = {
    ("train",): {"model_name": "tiny", "renderer_name": "role_colon"},
    ("train", "model_name"): "tiny",
    ("train", "renderer_name"): "role_colon",
}
"""Values that stand in for a missing required key while the rules between fields run (no rule reads them)."""


def _at_loc(data: Any, loc: Sequence[str | int]) -> Any:
    """The node at ``loc``, or ``_MISSING``."""
    for el in loc:
        try:
            data = data[el]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return data


def _entry_sim_problems(data: dict[str, Any]) -> list[Problem]:
    """Each entry's ``sim`` overrides, merged onto the run's sim block and validated as a SimConfig; only the
    problems at keys the entry set are its own (the run's block reports its own)."""
    entries = data.get("environments")
    base = data.get("sim") if isinstance(data.get("sim"), dict) else {}
    out: list[Problem] = []
    for i, e in enumerate(entries if isinstance(entries, list) else []):
        own = e.get("sim") if isinstance(e, dict) else None
        if not isinstance(own, dict) or not own:
            continue
        for key in RUN_ONLY_SIM_KEYS:
            if key in own:
                out.append(Problem(f"environments.{i}.sim.{key}", "the run's alone; set it in the run's sim block",
                                   ("environments", i, "sim", key)))
        merged = merge_sim(base, own)
        try:
            SimConfig.model_validate(merged)
        except ValidationError as exc:
            for p in describe_errors(exc, root=SimConfig, data=merged, prefix=f"environments.{i}.sim"):
                parent = _at_loc(own, p.loc[:-1]) if len(p.loc) > 1 else None
                if _at_loc(own, p.loc) is not _MISSING or (isinstance(parent, dict) and "dist" in parent):
                    out.append(p._replace(loc=("environments", i, "sim", *p.loc)))
    return out
