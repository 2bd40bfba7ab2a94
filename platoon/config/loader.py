"""Loading a run config: YAML, ``--set`` overrides, and stage 1 of validation, as one report.

Rules it keeps:
- ``load_config`` gathers every problem of a file (YAML syntax, wrong types, missing and unknown keys at every
  level, out-of-range values, names nothing could resolve, core components' options, the rules between fields)
  and raises one ``ConfigError``, each line starting with its dotted key path; it never lets a traceback out;
- a value that fails its own check is replaced by its default for the rules between fields, and a rule that reads
  it is skipped, so one mistake is reported once;
- a problem at a key an override set is prefixed ``override <key>=<value>: ``;
- stage 1 imports nothing; ``strict_resolve=True`` runs stage 2 (``platoon.config.resolve``) too.

It holds stage 1's rules between fields beside the loader (rather than in ``resolve``, which holds stage 2) so
that each of the two modules stays one stage; ``to_yaml`` writes the form ``config show`` prints.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from platoon.config import registry
from platoon.config.components import (
    CORE_ENVIRONMENTS,
    CORE_GROUP_ADMISSIONS,
    CORE_TASK_SAMPLERS,
    ENTRY_TASK_SAMPLERS,
    core_option_problems,
)
from platoon.config.errors import ConfigError
from platoon.config.models import MISSING_KEY, Problem, RunConfig, SimConfig, describe_errors
from platoon.config.resolve import (
    config_warnings,
    entry_admission,
    merge_sim,
    resolve_components,
)

DEFAULT_SOURCE = "<default>"
_INDEX = re.compile(r"\d+")


def load_config(
    path: Path | None, overrides: Sequence[str] = (), *, strict_resolve: bool = False
) -> RunConfig:
    """Read the config at ``path`` (None: the embedded default, every field at its default), apply ``overrides``
    (``dotted.key=value``, YAML-typed, list indices allowed, ``null`` for None) and validate it.

    Raises one ConfigError with every problem. With ``strict_resolve`` a config that passes is also resolved
    (stage 2: packages imported, components resolved, their options and checks run), and its problems raise.
    """
    source = DEFAULT_SOURCE if path is None else str(path)
    problems: list[Problem] = []
    data = _read(path, problems)
    applied: dict[str, str] = {}
    if data is not None and path is not None:
        _absolute_files(data, Path(path).resolve().parent)
    if data is not None:
        for text in overrides:
            _apply_override(data, text, applied, problems)
    cfg = None
    if data is not None:
        cfg = _validate(data, problems)
    if problems:
        raise ConfigError(_with_overrides([str(p) for p in problems], applied), source)
    assert cfg is not None
    if strict_resolve:
        try:
            resolve_components(cfg, source=source)
        except ConfigError as exc:
            raise ConfigError(_with_overrides(exc.problems, applied), source) from None
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
        return {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem("<file>", f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}"))
        return None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc)
        problems.append(Problem("<yaml>", f"{where}{what}"))
        return None
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
    sim block and in each entry's, and ``model.path``) absolute, relative to the config's directory; an override's
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
    fix(data.get("model"), "path")


def _apply_override(
    data: dict[str, Any], text: str, applied: dict[str, str], problems: list[Problem]
) -> None:
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        problems.append(Problem(f"override {text}", "expected dotted.key=value"))
        return
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        problems.append(Problem(f"override {text}", f"the value is not YAML: {getattr(exc, 'problem', exc)}"))
        return
    parts = key.split(".")
    defaults = RunConfig().model_dump(mode="json")
    node: Any = data
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        here = ".".join(parts[:depth])
        if isinstance(node, list):
            if not _INDEX.fullmatch(part):
                problems.append(Problem(f"override {text}", f"{here} is a list: index it with a number"))
                return
            index = int(part)
            if index > len(node):
                problems.append(
                    Problem(
                        f"override {text}", f"{here} has {len(node)} items; index {index} is past its end"
                    )
                )
                return
            if last:
                node[index : index + 1] = [value]
                break
            if index == len(node):
                node.append({})
            node = node[index]
        elif isinstance(node, dict):
            if last:
                node[part] = value
                break
            if part not in node:
                default = _at(defaults, parts[: depth + 1])
                node[part] = copy.deepcopy(default) if isinstance(default, list | dict) else {}
            node = node[part]
        else:
            problems.append(Problem(f"override {text}", f"{here} is {_kind(node)}, not a mapping or a list"))
            return
    applied[key] = text


def _at(data: Any, parts: Sequence[str]) -> Any:
    for part in parts:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and _INDEX.fullmatch(part) and int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


def _kind(v: object) -> str:
    return "null" if v is None else f"a {type(v).__name__}"


def _with_overrides(lines: list[str], applied: Mapping[str, str]) -> list[str]:
    out = []
    for line in lines:
        for key, text in applied.items():
            if line.startswith((f"{key}:", f"{key}.")):
                line = f"override {text}: {line}"
                break
        out.append(line)
    return out


# --- validation ------------------------------------------------------------------------------------------------


def _validate(data: dict[str, Any], problems: list[Problem]) -> RunConfig | None:
    """Validate ``data``, adding its problems; then run the rules between fields on a copy whose bad values are
    replaced by their defaults. Returns the config when ``data`` itself was valid."""
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
    if best is not None:
        problems += config_problems(best, invalid=invalid)
    return cfg if not problems else None


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
    if missing and loc[:1] == ("environments",) and len(loc) == 3 and loc[2] == "name":
        work["environments"][loc[1]]["name"] = f"<entry {loc[1]}>"
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
        merged = merge_sim(base, own)
        try:
            SimConfig.model_validate(merged)
        except ValidationError as exc:
            for p in describe_errors(exc, root=SimConfig, data=merged, prefix=f"environments.{i}.sim"):
                parent = _at_loc(own, p.loc[:-1]) if len(p.loc) > 1 else None
                if _at_loc(own, p.loc) is not _MISSING or (isinstance(parent, dict) and "dist" in parent):
                    out.append(p._replace(loc=("environments", i, "sim", *p.loc)))
    return out


# --- stage 1: the rules between fields -----------------------------------------------------------------------

_Ok = Callable[..., bool]


def config_problems(cfg: RunConfig, *, invalid: frozenset[str] = frozenset()) -> list[Problem]:
    """Stage 1's rules between fields (semantics 2.5, 3.3, 4.1), every problem in one list.

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
    )


def _each(cfg: RunConfig, leaf: str) -> list[str]:
    return [f"environments.{i}.{leaf}" for i in range(len(cfg.environments))]


def _unresolvable(kind: str, name: str, core: tuple[str, ...], path: str, packages: bool) -> Problem | None:
    if name and (name in core or ":" in name or packages or registry.is_registered(kind, name)):
        return None
    choices = ", ".join(repr(n) for n in core)
    msg = f"{name!r} is not one of {choices}, a name an environment's package registers, or module:Class"
    close = difflib.get_close_matches(
        name, [*core, *registry.registered_names(kind, load=False)], n=1, cutoff=0.6
    )
    return Problem(path, msg + (f"; did you mean {close[0]!r}?" if close else ""))


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
            out.append(_unresolvable("environment", e.env, CORE_ENVIRONMENTS, f"{at}.env", pkgs))
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
            if e.weight not in (1.0, "tasks") and ok(f"{at}.weight"):
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
    mixes = (
        "pass_rate chooses tasks likely to mix passes and failures, which a group of one never does ({}); use "
        "uniform, or a group size of 2 or more"
    )
    for i, e in enumerate(cfg.environments):
        at = f"environments.{i}"
        if e.group_size != 1 or not ok(f"{at}.group_size"):
            continue
        if run == "pass_rate":
            out.append(Problem(f"{at}.group_size", mixes.format("train.task_sampler: pass_rate")))
        elif e.task_sampler == "pass_rate" and ok(f"{at}.task_sampler"):
            out.append(Problem(f"{at}.group_size", mixes.format(f"{at}.task_sampler: pass_rate")))
    return out


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


def _entry_problems(cfg: RunConfig, ok: _Ok) -> list[Problem]:
    t = cfg.train
    out: list[Problem] = []
    first: dict[str, int] = {}
    for i, e in enumerate(cfg.environments):
        if not ok(f"environments.{i}.name"):
            continue
        if e.name in first:
            out.append(
                Problem(
                    f"environments.{i}.name",
                    f"{e.name!r} is already the name of environments.{first[e.name]}",
                )
            )
        else:
            first.setdefault(e.name, i)
    # Only the group sizes the user wrote validly: a bound one of them breaks is broken whatever the others are.
    sizes = {i: e.group_size for i, e in enumerate(cfg.environments) if ok(f"environments.{i}.group_size")}
    if sizes:
        biggest = max(sizes, key=lambda i: (sizes[i], -i))
        g, m = sizes[biggest], t.max_concurrent_rollouts
        if m is not None and m < g and ok("train.max_concurrent_rollouts"):
            out.append(
                Problem(
                    "train.max_concurrent_rollouts",
                    f"{m} permits cannot hold one group of environments.{biggest} (group_size {g}); set at least {g}",
                )
            )
        q, smallest = t.straggler.quorum, min(sizes.values())
        if q is not None and q > smallest and ok("train.straggler.quorum"):
            out.append(
                Problem("train.straggler.quorum", f"{q} is more than the smallest group size, {smallest}")
            )
    if t.label_by is None and ok("train.rollout_group_limits", "train.label_by", *_each(cfg, "name")):
        names = {e.name for e in cfg.environments}
        for label in t.rollout_group_limits:
            if label not in names:
                out.append(
                    Problem(
                        f"train.rollout_group_limits.{label}",
                        f"no environment entry is named {label!r} (while label_by is null, labels are entry names)",
                    )
                )
    mdl = cfg.model
    if mdl.kind == "hf" and mdl.path is None and ok("model.kind", "model.path"):
        out.append(Problem("model.path", "kind hf needs path: a local directory holding the checkpoint"))
    if (
        mdl.kind == "tiny"
        and mdl.d_model % mdl.n_heads
        and ok("model.kind", "model.d_model", "model.n_heads")
    ):
        out.append(Problem("model.d_model", f"{mdl.d_model} is not a multiple of n_heads ({mdl.n_heads})"))
    return out


# --- writing ---------------------------------------------------------------------------------------------------


def to_yaml(cfg: BaseModel, *, comments: bool = False) -> str:
    """``cfg`` as YAML, every field in schema order; with ``comments`` each field's description above it.

    The text loads back to an equal config (``config show --defaults`` round-trips).
    """
    if not comments:
        return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, width=10**9, allow_unicode=True)
    lines: list[str] = []
    _emit(cfg, 0, lines)
    return "\n".join(lines) + "\n"


def _emit(model: BaseModel, indent: int, lines: list[str]) -> None:
    pad = " " * indent
    dumped = model.model_dump(mode="json")
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if field.description:
            lines.append(f"{pad}# {field.description}")
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{name}:")
            _emit(value, indent + 2, lines)
        elif isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            lines.append(f"{pad}{name}:")
            for item in value:
                # "- # comment" then the item's keys, indented past the dash: YAML reads one mapping per item.
                item_lines: list[str] = []
                _emit(item, indent + 2, item_lines)
                item_lines[0] = f"{pad}- {item_lines[0][indent + 2 :]}"
                lines += item_lines
        else:
            lines.append(f"{pad}{name}: {_flow(dumped[name])}")


def _flow(value: Any) -> str:
    text = yaml.safe_dump([value], default_flow_style=True, width=10**9, allow_unicode=True).strip()
    return text[1:-1]
