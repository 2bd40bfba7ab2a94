"""Bad input drawn over the config schema: whatever a config holds, every command exits 0 or 78 without a
traceback, and ``config validate``'s verdict is the run's (docs/configuration.md, "Validation").

The strategies read the schema itself: every field of ``platoon/config/models.py`` and ``platoon/config/sim.py``
(an entry's ``sim`` overrides included) is a leaf with its type and its bounds (``ge``/``gt``/``le``/``lt``, list
lengths), and an example sets one to three leaves of a small base config to a value drawn for its type: in range,
at a bound, just past one, non-finite, past 64 bits, of the wrong type, or null. Files (``sim.tasks``, empirical
durations, a checkpoint directory in ``train.model_name``) are drawn from a fixture of good and bad ones, durations as
whole distributions, and free-form mappings (options, ``service_kwargs``) as small JSON-like trees.

Two differences between ``config validate`` and a run are by design (docs/configuration.md, "Validation"):
``config validate`` requires ``log_path``, which a run given ``--out`` does not read, so a config without one is
validated with ``--set log_path=runs``; and a run refuses a config without a plan (neither ``num_epochs`` nor
``max_training_steps``), which ``config validate`` passes.

In-range sizes are drawn small (a run of the largest allowed batch is valid and merely slow), so each run takes a
fraction of a second. ``simulate`` runs every field; ``train`` runs the fields a live run reads that validation can
judge without building the environment or loading the model (``LIVE_LEAVES``), on a CPU (``model.device: cuda`` is
the machine's to refuse).
"""

from __future__ import annotations

import itertools
import math
import shutil
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from typer.testing import CliRunner

from platoon.cli import app
from platoon.config.models import EnvironmentConfig, RunConfig
from platoon.config.sim import SimConfig

runner = CliRunner()

BASE: dict[str, Any] = {
    "log_path": "runs",
    "train": {"model_name": "tiny", "renderer_name": "role_colon", "max_training_steps": 1, "batch_size": 2,
              "workflow_config": {"group_size": 2}},
    "eval": {"every": 1},
    "checkpoint": {"every": 1},
    "environments": [{"name": "a"}],
    "model": {"d_model": 8, "n_layers": 1, "n_heads": 1},
    "sim": {"population": {"tasks": 8, "heldout": 2}},
}
"""A run of one step of two groups of two rollouts over eight tasks (and a model of 8 dimensions for train)."""

BASE_TRAIN = {k: v for k, v in BASE.items() if k != "eval"}
"""Without the held-out evaluation unless an example sets it."""

SMALL = {"max_training_steps": 2, "num_epochs": 1, "batch_size": 4, "group_size": 4, "max_concurrent_rollouts": 16,
         "tasks": 16, "heldout": 8, "straggler_quorum": 4, "min_successful_group_size": 4, "max_starting_rollouts": 16,
         "d_model": 16, "n_layers": 2, "n_heads": 2, "max_batch": 64, "max_completion_tokens": 4,
         "num_minibatches": 4, "model_calls": 64}
"""In-range values of these sizes are drawn at most this large (the upper bound itself is valid and merely slow)."""

EXTRA_BOUNDS = {"weight": (1e-6, 1e6), "max_groups_per_step": (1.0, 100.0)}
"""Bounds a field validator keeps, where the schema's metadata does not show them."""


# --- the schema's leaves -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    path: tuple[str | int, ...]
    kind: str  # int, float, str, bool, literal, weight, duration, dict, str_list, float_list, section
    nullable: bool = False
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple[Any, ...] = ()

    @property
    def dotted(self) -> str:
        return ".".join(map(str, self.path))


def _bounds(metadata: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in metadata:
        if isinstance(m, at.Ge):
            out["lo"] = m.ge
        elif isinstance(m, at.Gt):
            out["lo"], out["lo_open"] = m.gt, True
        elif isinstance(m, at.Le):
            out["hi"] = m.le
        elif isinstance(m, at.Lt):
            out["hi"], out["hi_open"] = m.lt, True
    return out


def _members(ann: Any) -> tuple[list[Any], bool, list[Any]]:
    """(the non-None members of ``ann``, unions and Annotated wrappers flattened; whether None is one; the
    wrappers' metadata)."""
    metadata: list[Any] = []
    while get_origin(ann) is Annotated:
        ann, *meta = get_args(ann)
        metadata += meta
    if get_origin(ann) in (Union, types.UnionType):
        members, nullable = [], False
        for arg in get_args(ann):
            inner, inner_null, inner_meta = _members(arg) if arg is not type(None) else ([], True, [])
            members += inner
            nullable |= inner_null
            metadata += inner_meta
        return members, nullable, metadata
    return [ann], False, metadata


def schema_leaves(model: type[BaseModel], prefix: tuple[str | int, ...] = ()) -> list[Leaf]:
    """Every leaf of ``model`` (see the module docstring), sections included as leaves of their own."""
    out: list[Leaf] = []
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        members, nullable, meta = _members(field.annotation)
        bounds = {**_bounds([*field.metadata, *meta])}
        if name in EXTRA_BOUNDS:
            bounds["lo"], bounds["hi"] = EXTRA_BOUNDS[name]
        first = members[0]
        if len(members) > 1 and all(isinstance(m, type) and issubclass(m, BaseModel) for m in members):
            out.append(Leaf(path, "duration", nullable))
        elif model is EnvironmentConfig and name == "sim":
            out += schema_leaves(SimConfig, path)
        elif isinstance(first, type) and issubclass(first, BaseModel):
            out.append(Leaf(path, "section", nullable))
            out += schema_leaves(first, path)
        elif get_origin(first) is list:
            (item,) = get_args(first)
            if isinstance(item, type) and issubclass(item, BaseModel):
                out.append(Leaf(path, "section", nullable))
                out += schema_leaves(item, (*path, 0))
            else:
                item_members, _, item_meta = _members(item)
                kind = "float_list" if item_members[0] is float else "str_list"
                out.append(Leaf(path, kind, nullable, **_bounds(item_meta)))
        elif get_origin(first) is dict:
            out.append(Leaf(path, "dict", nullable))
        elif get_origin(first) is Literal or len(members) > 1:
            choices = tuple(c for m in members for c in (get_args(m) if get_origin(m) is Literal else ()))
            kind = "weight" if float in members else "literal"
            out.append(Leaf(path, kind, nullable, choices=choices, **bounds))
        else:
            kind = {int: "int", float: "float", str: "str", bool: "bool"}[first]
            out.append(Leaf(path, kind, nullable, **bounds))
    return out


LEAVES = schema_leaves(RunConfig)
SIM_LEAVES = [leaf for leaf in LEAVES if leaf.path[0] == "sim" or "sim" in leaf.path[:3]]
LIVE_LEAVES = [leaf for leaf in LEAVES if (leaf.path[0] in ("train", "model", "eval", "checkpoint")
                                            and leaf.dotted != "train.model_name")
               or (leaf.path[0] == "environments" and "sim" not in leaf.path
                   and leaf.path[-1] not in ("tasks", "exclude_tasks", "split_name", "env", "package"))]
"""The fields a live run reads that ``config validate`` can check without building the environment or loading the
model (its task ids and splits, a non-core environment's option values and a checkpoint's weights are theirs to
judge)."""


def test_the_strategies_cover_every_field_of_the_schema() -> None:
    leaves = {leaf.dotted for leaf in LEAVES}
    for model, prefix in ((RunConfig, ""), (SimConfig, "sim.")):
        for name in model.model_fields:
            assert f"{prefix}{name}" in leaves
    assert "environments.0.sim.rollout.duration" in leaves and "train.optimizer.learning_rate" in leaves
    assert {"log_path", "checkpoint.every", "eval.at_start", "train.workflow_config.straggler_quorum",
            "train.workflow_config.rollout_config.inference_params.temperature",
            "environments.0.workflow_config.group_size", "environments.0.dataset_kwargs.split_name",
            "stats.wandb.project", "watchdog.enabled"} <= leaves
    assert len(LEAVES) > 200


# --- values ------------------------------------------------------------------------------------------------------

HUGE_INTS = [2**63, -(2**63) - 1, 2**64, 10**30, -(10**30), 10**99]
NON_FINITE = [math.nan, math.inf, -math.inf]
EXTREME_FLOATS = [1e308, -1e308, 5e-324, -5e-324, 1.7976931348623157e308]
WRONG = [None, True, False, "x", "", "8", "1e308", [], [1], {}, {"a": 1}]


def json_like(depth: int = 2) -> st.SearchStrategy[Any]:
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6))
    if depth == 0:
        return scalars
    return st.one_of(scalars, st.lists(json_like(depth - 1), max_size=3),
                     st.dictionaries(st.text(max_size=6), json_like(depth - 1), max_size=3))


OPTION_KEYS = ["explore", "max_draws_per_epoch", "max_outstanding_per_task", "candidates", "seed", "band",
               "ranges", "guess_offsets", "val_fraction", "split_seed", "reward", "partial_weight", "show_range",
               "timeout_seconds", "quorum"]


def _int_values(leaf: Leaf) -> st.SearchStrategy[Any]:
    lo = int(leaf.lo) + leaf.lo_open if leaf.lo is not None else -(2**63)
    hi = int(leaf.hi) - leaf.hi_open if leaf.hi is not None else 2**63 - 1
    cap = SMALL.get(str(leaf.path[-1]))
    top = min(hi, cap) if cap is not None else hi
    edges = [lo, lo - 1, hi + 1] + ([hi] if cap is None else [])
    return st.one_of(st.integers(lo, max(lo, top)), st.sampled_from(edges + HUGE_INTS),
                     st.sampled_from([1.5, *NON_FINITE, *WRONG]))


def _float_values(leaf: Leaf) -> st.SearchStrategy[Any]:
    lo = leaf.lo if leaf.lo is not None else -1e9
    hi = leaf.hi if leaf.hi is not None else 1e9
    edges = [float(x) for x in (lo, hi) if x is not None] + [lo - 1, hi * 1.5 + 1, lo - 1e-9, hi + 1e-6]
    in_range = st.floats(lo, hi, exclude_min=leaf.lo_open, exclude_max=leaf.hi_open, allow_nan=False)
    return st.one_of(in_range, st.sampled_from(edges + NON_FINITE + EXTREME_FLOATS),
                     st.sampled_from([0, 1, 2**63, *WRONG]))


def duration_values(files: list[str]) -> st.SearchStrategy[Any]:
    number = st.one_of(st.floats(0, 1e4), st.sampled_from([0.0, -1.0, 1e7, 1e8, *NON_FINITE, *EXTREME_FLOATS, "3",
                                                             True, None]))
    return st.one_of(
        st.builds(lambda v: {"dist": "fixed", "value_s": v}, number),
        st.builds(lambda v: {"dist": "exponential", "mean_s": v}, number),
        st.builds(lambda m, s: {"dist": "lognormal", "median_s": m, "sigma": s}, number,
                  st.one_of(st.floats(0, 5), st.sampled_from([5.5, 100.0, *NON_FINITE, -1.0]))),
        st.builds(lambda vs: {"dist": "empirical", "values": vs}, st.lists(number, max_size=4)),
        st.builds(lambda f: {"dist": "empirical", "file": f}, st.sampled_from(files)),
        st.sampled_from([{"dist": "empirical", "file": "d-good.txt", "values": [1.0]}, {"dist": "nope"},
                         {"value_s": 1.0}, {"dist": "fixed"}, {"dist": "fixed", "value_s": 1.0, "extra": 1}, [], 3, None]),
    )


def leaf_values(leaf: Leaf, files: dict[str, list[str]]) -> st.SearchStrategy[Any]:
    name = leaf.path[-1]
    if name == "split_name":  # a split or a list of them
        return st.sampled_from(["train", "val", "heldout", ["val", "train"], ["train", "train"], [], "", 3, None])
    if leaf.kind == "int":
        values = _int_values(leaf)
    elif leaf.kind == "float":
        values = _float_values(leaf)
    elif leaf.kind == "weight":
        values = st.one_of(_float_values(leaf), st.sampled_from(["tasks", "Tasks", 0, -1]))
    elif leaf.kind == "literal":
        values = st.one_of(st.sampled_from(leaf.choices), st.sampled_from(["nope", "", 1, True, [], "TINY", None]))
    elif leaf.kind == "bool":
        values = st.sampled_from([True, False, 0, 1, "yes", "true", [], None])
    elif leaf.kind == "str":
        if name == "tasks":
            values = st.sampled_from([*files["tasks"], None, 3])
        elif name == "file":
            values = st.sampled_from([*files["durations"], None, 3])
        elif name == "model_name":
            values = st.sampled_from(["tiny", *files["model"], None])
        elif name == "preset":
            values = st.sampled_from(["long-agentic", "math", "textcraft-synth", "nope", "long-agentc", "../x", "", 3, None])
        elif name in ("task_sampler", "group_admission"):
            values = st.sampled_from(["auto", "weighted", "uniform", "pass_rate", "all", "informative", "nope",
                                      "builtins:dict", "no.such:Class", "", "math:pi", None])
        elif name == "env":
            values = st.sampled_from(["platoon-number-search", "platoon-number-search@1", "platoon-number-search@2",
                                      "number_search", "nope", "builtins:dict", "math:pi", "", "os:path",
                                      "platoon.live.envs.number_search:NumberSearch", None])
        elif name == "package":
            values = st.sampled_from(["json", "no_such_package_xyz", "", "platoon.live.envs.number_search", None])
        else:
            values = st.one_of(st.text(max_size=8), st.sampled_from(["train", "val", "a", "a/b", "a::b", 3, True, [],
                                                                     None]))
    elif leaf.kind == "str_list":
        ids = st.sampled_from(["t1", "t2", "n4-g2-t1", 7, "", True, 1.5])
        values = st.one_of(st.lists(ids, max_size=4), st.sampled_from(["t1", [[1]], {}, None]))
    elif leaf.kind == "float_list":
        values = st.one_of(st.lists(st.one_of(st.floats(0, 100), st.sampled_from([-1.0, 1e8, *NON_FINITE, "x"])),
                                    max_size=4), st.none())
    elif leaf.kind == "dict":
        keys = st.one_of(st.sampled_from([*OPTION_KEYS, "a", "swe", "a/b"]), st.text(max_size=5))
        values = st.one_of(st.dictionaries(keys, json_like(), max_size=3),
                           st.sampled_from([[], "x", 3, {1: 2}, {"a": {"b": [math.nan]}}, None]))
    elif leaf.kind == "duration":
        values = duration_values(files["durations"])
    else:  # a section
        values = st.sampled_from([None, [], 3, "x", {}, {"unknown": 1}])
    return values


def _set(data: Any, path: tuple[str | int, ...], value: Any) -> None:
    node = data
    for key in path[:-1]:
        if isinstance(node, list):
            node = node[key]
            continue
        if not isinstance(node.get(key), dict | list):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value


def configs(leaves: list[Leaf], files: dict[str, list[str]], base: dict[str, Any] = BASE,
            ) -> st.SearchStrategy[tuple[dict, list[str]]]:
    """``base`` with one to three leaves set; returns (data, the dotted paths set)."""

    @st.composite
    def build(draw: st.DrawFn) -> tuple[dict, list[str]]:
        data = yaml.safe_load(yaml.safe_dump(base))
        chosen = draw(st.lists(st.sampled_from(leaves), min_size=1, max_size=3, unique_by=lambda leaf: leaf.path))
        for leaf in sorted(chosen, key=lambda leaf: len(leaf.path)):
            try:
                _set(data, leaf.path, draw(leaf_values(leaf, files)))
            except (TypeError, IndexError, KeyError, AttributeError):
                pass  # a section above it was set to something that is not a mapping
        return data, [leaf.dotted for leaf in chosen]

    return build()


# --- files -------------------------------------------------------------------------------------------------------

FILES = {
    "t-good.csv": "task_id,pass_rate\nt1,0.5\nt2,0.25\n",
    "t-good.json": '[{"task_id": "t1", "pass_rate": 0.5}]',
    "t-dup.csv": "task_id,pass_rate\nt1,0.5\nt1,0.25\n",
    "t-empty.csv": "",
    "t-header.csv": "task_id,pass_rate\n",
    "t-cols.csv": "id,rate\nx,1\n",
    "t-rate.csv": "task_id,pass_rate\nt1,1.5\n",
    "t-nan.csv": "task_id,pass_rate,length\nt1,0.5,nan\n",
    "t-deep.json": "[" * 5000 + "]" * 5000,
    "t-bigint.json": '[{"task_id": ' + "9" * 5000 + ', "pass_rate": 0.5}]',
    "t-binary.csv": b"\xff\xfe\x00bad".decode("latin-1"),
    "d-good.txt": "1.5\n2.5\n",
    "d-good.json": "[1, 2, 3]",
    "d-empty.txt": "",
    "d-neg.txt": "1\n-2\n",
    "d-inf.txt": "1\ninf\n",
    "d-big.txt": "1e308\n",
    "d-words.txt": "one\n",
    "d-obj.json": '{"a": 1}',
    "d-deep.json": "[" * 5000 + "]" * 5000,
}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad-input")
    for name, text in FILES.items():
        (root / name).write_text(text, encoding="latin-1" if name == "t-binary.csv" else "utf-8")
    (root / "model-dir").mkdir()
    return root


def file_choices() -> dict[str, list[str]]:
    tasks = [n for n in FILES if n.startswith("t-")] + ["t-missing.csv", "model-dir", ""]
    durations = [n for n in FILES if n.startswith("d-")] + ["d-missing.txt", "model-dir", ""]
    return {"tasks": tasks, "durations": durations, "model": ["model-dir", "missing-dir", "t-good.csv", ""]}


_counter = itertools.count()


def write(workdir: Path, data: Any) -> Path:
    path = workdir / f"c{next(_counter)}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def invoke(*args: Any):
    result = runner.invoke(app, [str(a) for a in args])
    exc = result.exception
    assert exc is None or isinstance(exc, SystemExit), f"{args}: {type(exc).__name__}: {exc}\n{result.output}"
    assert result.exit_code in (0, 78), f"{args}: exit {result.exit_code}\n{result.output}"
    assert "Traceback" not in result.output
    return result


def with_log_path(data: dict[str, Any]) -> list[str]:
    """The override ``config validate`` needs to judge ``data`` as a run given ``--out`` does: ``log_path`` where the
    config leaves it out (a run given ``--out`` does not read it)."""
    return [] if data.get("log_path") is not None else ["--set", "log_path=runs"]


def plans(data: dict[str, Any]) -> bool:
    """Whether ``data`` sets a plan (or a value there that validation refuses anyway): a run without one is refused."""
    train = data.get("train")
    return not isinstance(train, dict) or any(train.get(k) is not None for k in ("max_training_steps", "num_epochs"))


def verdicts(workdir: Path, data: Any, command: str) -> None:
    """validate, then the run: the same verdict (but a run refuses a config without a plan), no traceback; a refused
    run leaves no directory."""
    path = write(workdir, data)
    out = workdir / f"run-{path.stem}"
    validate = invoke("config", "validate", path, *with_log_path(data))
    run = invoke(command, path, "--out", out)
    expected = validate.exit_code if plans(data) else 78
    assert run.exit_code == expected, (
        f"config validate says {validate.exit_code}, {command} {run.exit_code}\n{path.read_text()}\n"
        f"{validate.output}\n{run.output}")
    if not plans(data) and validate.exit_code == 0:
        assert "set num_epochs or max_training_steps" in run.output, run.output
    assert out.exists() == (run.exit_code == 0), run.output
    shutil.rmtree(out, ignore_errors=True)
    path.unlink()


# --- the properties ----------------------------------------------------------------------------------------------

def examples(n: int) -> settings:
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@examples(120)
@given(case=configs(LEAVES, file_choices()))
def test_validate_and_show_exit_0_or_78_and_agree(workdir: Path, case: tuple[dict, list[str]]) -> None:
    data, _ = case
    path = write(workdir, data)
    plain = invoke("config", "validate", "--no-resolve", path, *with_log_path(data))
    show = invoke("config", "show", path)
    assert show.exit_code == plain.exit_code, f"{path.read_text()}\n{plain.output}\n{show.output}"
    invoke("config", "validate", path)
    if show.exit_code == 0:  # what show prints loads back to the same config
        again = workdir / f"{path.stem}-shown.yaml"
        again.write_text(show.stdout, encoding="utf-8")
        assert invoke("config", "show", again).stdout == show.stdout
        again.unlink()
    path.unlink()


@examples(80)
@given(case=configs(LEAVES, file_choices()))
def test_simulate_accepts_what_validate_passes_and_refuses_what_it_refuses(workdir: Path,
                                                                          case: tuple[dict, list[str]]) -> None:
    verdicts(workdir, case[0], "simulate")


@examples(60)
@given(case=configs(SIM_LEAVES, file_choices()))
def test_simulate_agrees_with_validate_over_the_sim_block(workdir: Path, case: tuple[dict, list[str]]) -> None:
    verdicts(workdir, case[0], "simulate")


@pytest.mark.slow
@pytest.mark.live
@examples(20)
@given(case=configs(LIVE_LEAVES, file_choices(), BASE_TRAIN))
def test_train_accepts_what_validate_passes_and_refuses_what_it_refuses(workdir: Path,
                                                                       case: tuple[dict, list[str]]) -> None:
    pytest.importorskip("torch")
    data = case[0]
    if isinstance(data.get("model"), dict) and data["model"].get("device") == "cuda":
        data["model"]["device"] = "cpu"  # whether this machine has a CUDA device is not the config's to say
    verdicts(workdir, data, "train")
