"""Resolving sampler references, class validity, and options parsing."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from platoon.components import parse_options, resolve_task_sampler
from platoon.config import registry
from platoon.config.components import PassRateOptions
from platoon.config.errors import ExtensionError
from platoon.policy.samplers import PassRateSampler, UniformSampler, WeightedSampler
from platoon.policy.samplers.base import Draw, Sampler
from platoon.policy.samplers.core import options_seed


class Good(Sampler):
    def next(self, ctx):
        return Draw(ctx.task_ids[ctx.decision % len(ctx.task_ids)])


class AsyncNext(Sampler):
    async def next(self, ctx):
        return None


class BothKinds(Sampler):
    adaptive = True
    entry_slots = True


class NotBool(Sampler):
    adaptive = 1


class NoNext:
    adaptive = False

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


@dataclass
class Opts:
    seed: int = 0
    width: int = 2


class WithOptions(Good):
    options_schema = Opts


@pytest.fixture
def registered():
    registry.register("task_sampler", "test_good_sampler", Good)
    yield "test_good_sampler"
    registry.unregister("task_sampler", "test_good_sampler")


def test_core_names_map_to_fixed_classes():
    assert resolve_task_sampler("uniform") is UniformSampler
    assert resolve_task_sampler("weighted") is WeightedSampler
    assert resolve_task_sampler("pass_rate") is PassRateSampler
    with pytest.raises(ExtensionError, match="auto"):
        resolve_task_sampler("auto")


def test_registered_and_module_references(registered):
    assert resolve_task_sampler(registered) is Good
    assert resolve_task_sampler(f"{__name__}:Good") is Good
    with pytest.raises(
        ExtensionError, match=r"unknown task sampler 'test_good_samplr'; did you mean 'test_good_sampler'"
    ):
        resolve_task_sampler("test_good_samplr")
    with pytest.raises(ExtensionError, match="cannot import"):
        resolve_task_sampler("no_such_module_here:Cls")


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("AsyncNext", "synchronous"),
        ("BothKinds", "adaptive and hands entry slots"),
        ("NotBool", "adaptive must be True or False"),
        ("NoNext", "lacks callable next"),
        ("Opts", "lacks callable next"),
    ],
)
def test_class_validity(name, match):
    with pytest.raises(ExtensionError, match=match):
        resolve_task_sampler(f"{__name__}:{name}")


def test_parse_options():
    assert parse_options(UniformSampler, {}) == {}
    with pytest.raises(ValueError, match="takes no options"):
        parse_options(UniformSampler, {"x": 1})
    assert parse_options(PassRateSampler, {"explore": 0.5}) == PassRateOptions(explore=0.5)
    with pytest.raises(ValueError, match="explore"):
        parse_options(PassRateSampler, {"explore": 2})
    with pytest.raises(ValueError, match="nope: Extra inputs"):
        parse_options(PassRateSampler, {"nope": 1})
    assert parse_options(WithOptions, {"width": 3}) == Opts(width=3)
    with pytest.raises(ValueError, match="unknown option wide"):
        parse_options(WithOptions, {"wide": 3})
    assert (
        options_seed(Opts(seed=4)) == 4
        and options_seed({"seed": 2}) == 2
        and options_seed({"seed": True}) == 0
    )
