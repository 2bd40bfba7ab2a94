"""TextCraft-Synth: the generated world's shape, the tasks and splits, and every validation task's gold solution."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter

import pytest

from platoon_textcraft.synth import TextCraftSynth, generate_world


@pytest.fixture(scope="module")
def env() -> TextCraftSynth:
    return TextCraftSynth()


def test_the_world_of_seed_42() -> None:
    world, tiers = generate_world(42)
    assert len(world.items) == 1452 and len(world.base_items) == 50
    assert [len(tiers[t]) for t in range(13)] == [50, 125, 125, 120, 120, 120, 115, 115, 115, 110, 114, 114, 109]
    tier_of = {i: t for t, names in tiers.items() for i in names}
    for item, recipes in world.recipes.items():
        [recipe] = recipes
        tier = tier_of[item]
        assert world.depth[item] == tier and recipe.count == 1
        assert 1 <= len(recipe.ingredients) <= 6
        below = sorted(tier - tier_of[i.options[0]] for i in recipe.ingredients)
        assert below[0] == 1 and below[-1] <= (4 if tier >= 4 else 2)
        assert (tier < 4) or any(b in (3, 4) for b in below)
        assert all(1 <= i.count <= (2 if tier <= 4 else 1) for i in recipe.ingredients)


def test_the_world_and_tasks_are_the_seed_s_alone() -> None:
    a, b = TextCraftSynth(seed=7, train_tasks=50, val_tasks=20), TextCraftSynth(seed=7, train_tasks=50, val_tasks=20)
    assert a.world.recipes == b.world.recipes
    assert [a.craft_task(t) for t in a.task_ids("val")] == [b.craft_task(t) for t in b.task_ids("val")]
    c = TextCraftSynth(seed=8, train_tasks=50, val_tasks=20)
    assert c.world.recipes != a.world.recipes


def test_splits_sizes_and_difficulties(env: TextCraftSynth) -> None:
    train, val = env.task_ids("train"), env.task_ids("val")
    assert (len(train), len(val)) == (2522, 632)
    for split, ids in (("train", train), ("val", val)):
        by = {d: env.task_ids(f"{split}-{d}") for d in ("easy", "medium", "hard", "extreme")}
        assert sorted(sum(by.values(), [])) == sorted(ids)
        shares = {d: len(v) / len(ids) for d, v in by.items()}
        for d, want in {"easy": 0.25, "medium": 0.35, "hard": 0.25, "extreme": 0.15}.items():
            assert abs(shares[d] - want) < 0.06, shares
        for d, v in by.items():
            assert all(env.task(t).columns["difficulty"] == d for t in v[:20])
    with pytest.raises(KeyError, match="unknown split 'test'"):
        env.task_ids("test")


def test_validation_targets_never_appear_in_training(env: TextCraftSynth) -> None:
    train = {item for t in env.task_ids("train") for item, _ in env.targets["train"][int(t.split("-")[1])]}
    val = {item for t in env.task_ids("val") for item, _ in env.targets["val"][int(t.split("-")[1])]}
    assert train and val and not train & val
    _, tiers = generate_world(42)
    for tier in range(2, 13):  # a fifth of each tier is held out: val draws only there
        assert len({i for i in val if i in set(tiers[tier])}) <= round(len(tiers[tier]) * 0.2)


def test_a_task_s_facts(env: TextCraftSynth) -> None:
    task = env.task("train-00000")
    assert task == env.task("train-00000")
    assert (task.split, task.max_turns, task.max_action_tokens) == ("train", 75, 256)
    assert set(task.columns) == {"difficulty", "depth", "crafts"}
    assert task.columns["crafts"] == len(env.craft_task(task.task_id).gold)
    spec = env.craft_task("train-00000")
    [(target, count)] = spec.targets
    assert 1 <= count <= 3 and env.world.depth[target] == task.columns["depth"]
    assert spec.instruction().startswith(f"Craft the following items: {count}x {target} \n")
    _, needed = env.world.plan(spec.targets)
    held = dict(spec.inventory)
    assert all(n <= held[i] <= n * 1.5 for i, n in needed.items())
    assert 2 <= len(set(held) - set(needed)) <= 4 and all(env.world.is_base(i) for i in held)


def test_every_validation_task_s_gold_solution_succeeds(env: TextCraftSynth) -> None:
    depths = Counter()
    for task_id in env.task_ids("val"):
        task = env.task(task_id)
        episode = env.episode(task)
        episode.reset()
        for call in env.gold_solution(task_id):
            result = episode.call(call)
            assert not result.error, (task_id, call, result.text)
        outcome = episode.outcome()
        assert (outcome.reward, outcome.success) == (1.0, True), task_id
        depths[task.columns["depth"]] += 1
    assert set(depths) == set(range(2, 13))


def test_building_is_fast() -> None:
    generate_world.cache_clear()
    start = time.perf_counter()
    TextCraftSynth(seed=5)
    assert time.perf_counter() - start < 5.0  # about 0.3 s on a shared CPU


def test_a_sample_of_training_tasks_replays_too(env: TextCraftSynth) -> None:
    for task_id in env.task_ids("train")[::25]:
        episode = env.episode(env.task(task_id))
        episode.reset()
        assert not any(episode.call(call).error for call in env.gold_solution(task_id))
        assert episode.outcome().success, task_id


DIGEST = """
import hashlib
from platoon_textcraft.synth import TextCraftSynth
env = TextCraftSynth(seed=3, train_tasks=60, val_tasks=30)
text = repr([env.craft_task(t) for t in env.task_ids("train") + env.task_ids("val")])
print(hashlib.sha256(text.encode()).hexdigest())
"""


def test_generation_does_not_depend_on_the_hash_seed() -> None:
    digests = {subprocess.run([sys.executable, "-c", DIGEST], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("0", "1")}
    assert len(digests) == 1 and len(next(iter(digests)).strip()) == 64
