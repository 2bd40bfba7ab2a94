"""TextCraft-Synth: a crafting world generated from a seed, and tasks over it.

The world (seed 42 by default): five domains; tiers 0 (base: 10 items a domain) to 12, with ``max(1, 25 - t // 3)``
items a domain at tier t, and 12 cross-domain items at the top tiers (4 each at tiers 10-12), named ``t<tier>_i<n>``.
Each item has one recipe making one of it: its first ingredient from tier t-1 of its domain (so that its depth is
its tier), the others from tiers t-1 and t-2 (two to one towards t-1), plus, from tier 4 on, one from t-3 or t-4
(two to one towards t-3). A recipe takes a tier-dependent base of 1-4 ingredients plus up to 2 more, at most 6
(fewer where the tiers below run short), each 1-2 times up to tier 4 and once above. Cross-domain items draw their
ingredients from every domain's lower tiers.

Tasks ask for 1-3 of one target. A fifth of each tier's items is held out: ``val`` targets are drawn from them
only, ``train`` targets from the rest. A task's difficulty is drawn first (easy 25%, medium 35%, hard 25%, extreme
15%), then its depth uniformly within the difficulty's range, then the target among that tier's items of the split.

Generation is deterministic in the seed and cached per (seed, task counts) in the process.
"""

from __future__ import annotations

import functools
import random

from platoon.environments import environment
from platoon_textcraft.tasks import DIFFICULTIES, CraftingEnvironment
from platoon_textcraft.world import Ingredient, Recipe, World

__all__ = ["TextCraftSynth", "generate_world", "generate_tasks"]

DOMAINS = 5
TOP_TIER = 12
BASE_PER_DOMAIN = 10
CROSS_TIERS = (10, 11, 12)
CROSS_PER_TIER = 4
HELD_OUT = 0.2
DIFFICULTY_WEIGHTS = {"easy": 0.25, "medium": 0.35, "hard": 0.25, "extreme": 0.15}


def items_per_domain(tier: int) -> int:
    return BASE_PER_DOMAIN if tier == 0 else max(1, 25 - tier // 3)


def base_ingredients(tier: int) -> int:
    """The tier-dependent base of a recipe's ingredient count: 4 at tier 1-2 down to 1 from tier 9 (a recipe's
    materials multiply down its tree, so higher tiers take fewer, keeping a tier-12 task's base items in the
    hundreds to thousands)."""
    return 4 if tier <= 2 else 3 if tier <= 4 else 2 if tier <= 8 else 1


@functools.lru_cache(maxsize=4)
def generate_world(seed: int = 42) -> tuple[World, dict[int, list[str]]]:
    """The world of ``seed`` and its items by tier (see the module's doc)."""
    rng = random.Random(f"textcraft-synth:{seed}:world")
    tiers: dict[int, list[str]] = {}
    domain_tiers: list[dict[int, list[str]]] = [{} for _ in range(DOMAINS)]
    recipes: dict[str, tuple[Recipe, ...]] = {}
    for tier in range(TOP_TIER + 1):
        names = tiers.setdefault(tier, [])
        for d in range(DOMAINS):
            own = domain_tiers[d].setdefault(tier, [])
            for _ in range(items_per_domain(tier)):
                item = f"t{tier}_i{len(names)}"
                names.append(item)
                own.append(item)
                if tier:
                    recipes[item] = (_recipe(item, tier, domain_tiers[d], rng),)
        if tier in CROSS_TIERS:
            everyone = {t: [i for dt in domain_tiers for i in dt.get(t, [])] for t in range(tier)}
            for _ in range(CROSS_PER_TIER):
                item = f"t{tier}_i{len(names)}"
                names.append(item)
                recipes[item] = (_recipe(item, tier, everyone, rng),)
    return World(recipes, tuple(i for t in tiers.values() for i in t)), tiers


def _recipe(item: str, tier: int, below: dict[int, list[str]], rng: random.Random) -> Recipe:
    """``item``'s recipe from the tiers ``below`` (the module's doc)."""
    want = min(6, base_ingredients(tier) + rng.randint(0, 2))
    chosen = [rng.choice(below[tier - 1])]
    if tier >= 4:
        far = tier - 3 if rng.random() < 2 / 3 else tier - 4
        chosen.append(rng.choice(below[far]))
    near = [t for t in (tier - 1, tier - 2) if t >= 0]
    pool_size = sum(len(below[t]) for t in near)
    while len(chosen) < want and len(set(chosen)) < pool_size:
        t = near[0] if len(near) == 1 or rng.random() < 2 / 3 else near[1]
        pick = rng.choice(below[t])
        if pick not in chosen:
            chosen.append(pick)
    counts = [rng.randint(1, 2) if tier <= 4 else 1 for _ in chosen]
    return Recipe(item, 1, tuple(Ingredient((c,), n, c) for c, n in zip(chosen, counts, strict=True)))


@functools.lru_cache(maxsize=4)
def generate_tasks(seed: int = 42, train_tasks: int = 2522,
                   val_tasks: int = 632) -> dict[str, tuple[tuple[tuple[str, int], ...], ...]]:
    """The targets of the tasks of ``seed``'s world, per split (see the module's doc)."""
    _, tiers = generate_world(seed)
    rng = random.Random(f"textcraft-synth:{seed}:tasks")
    held: dict[int, list[str]] = {}
    kept: dict[int, list[str]] = {}
    for tier, names in tiers.items():
        shuffled = sorted(names)
        rng.shuffle(shuffled)
        cut = max(1, round(len(shuffled) * HELD_OUT))
        held[tier], kept[tier] = sorted(shuffled[:cut]), sorted(shuffled[cut:])
    out: dict[str, tuple[tuple[tuple[str, int], ...], ...]] = {}
    for split, n, pool in (("train", train_tasks, kept), ("val", val_tasks, held)):
        tasks = []
        for _ in range(n):
            name = rng.choices(list(DIFFICULTY_WEIGHTS), weights=list(DIFFICULTY_WEIGHTS.values()))[0]
            low, high = DIFFICULTIES[name]
            target = rng.choice(pool[rng.randint(low, high)])
            tasks.append(((target, rng.randint(1, 3)),))
        out[split] = tuple(tasks)
    return out


@environment("textcraft-synth")
class TextCraftSynth(CraftingEnvironment):
    """TextCraft-Synth (the module's doc). Options (an entry's ``service_kwargs``): ``seed`` (the world's and the
    tasks', default 42), ``train_tasks`` and ``val_tasks`` (how many tasks each split holds)."""

    version = "1"
    max_turns = 75

    def __init__(self, *, seed: int = 42, train_tasks: int = 2522, val_tasks: int = 632) -> None:
        if train_tasks < 1 or val_tasks < 1:
            raise ValueError(f"train_tasks and val_tasks must be at least 1, got {train_tasks} and {val_tasks}")
        self.seed = seed
        self.world, _ = generate_world(seed)
        self.targets = generate_tasks(seed, train_tasks, val_tasks)
        self.inventory_seed = f"textcraft-synth:{seed}:inventory"
        self._index()
