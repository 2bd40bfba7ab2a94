"""TextCraft: crafting tasks on real Minecraft crafting recipes, read from a directory the user names.

Reading (``read_recipes``): every ``*.json`` file directly in ``recipes_dir`` whose ``type`` is
``[minecraft:]crafting_shaped`` (``pattern`` + ``key``: each key counted as often as it appears in the pattern) or
``[minecraft:]crafting_shapeless`` (``ingredients``); other types (smelting, special recipes) are skipped. An
ingredient is ``{"item": id}``, ``{"tag": id}``, a string (``"minecraft:stick"``, ``"#minecraft:planks"``) or a list
of alternatives; a result is ``{"item"|"id": id, "count": n}`` (count 1 when absent). Tags come from ``tags``: a
directory of ``<name>.json`` files (``{"values": [...]}``, nested ``#tags`` resolved) or one JSON file mapping tag
names to such lists; by default ``recipes_dir/tags`` (a directory) or ``recipes_dir/tags.json``. A recipe that names
a tag no file defines is skipped, with a warning. The ``minecraft:`` namespace is dropped from names.

Tasks ask for 1-3 targets of depth 2-5, 1-3 of each; a fifth of the eligible targets (at least one) is held out for
``val``, whose tasks use only those, ``train``'s only the rest. Generation is deterministic in ``seed`` and the
recipe set; a split holds at most ``train_tasks``/``val_tasks`` distinct tasks (fewer when the recipe set allows
fewer combinations).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from platoon.environments import environment
from platoon_textcraft.tasks import CraftingEnvironment
from platoon_textcraft.world import Ingredient, Recipe, World

__all__ = ["RecipeError", "TextCraft", "read_recipes", "read_tags"]

log = logging.getLogger(__name__)

SHAPED = {"minecraft:crafting_shaped", "crafting_shaped"}
SHAPELESS = {"minecraft:crafting_shapeless", "crafting_shapeless"}
TARGET_DEPTHS = (2, 5)
HELD_OUT = 0.2


class RecipeError(ValueError):
    """A recipe directory or tag file that cannot be read, named with what is wrong."""


def short(name: str) -> str:
    """``minecraft:oak_planks`` -> ``oak_planks`` (other namespaces stay)."""
    return name.removeprefix("#").removeprefix("minecraft:")


def read_tags(path: Path | None) -> dict[str, tuple[str, ...]]:
    """Each tag's concrete items (short names), nested tags resolved; ``{}`` for no path."""
    if path is None:
        return {}
    raw: dict[str, list] = {}
    if path.is_dir():
        for file in sorted(path.rglob("*.json")):
            name = file.relative_to(path).with_suffix("").as_posix()
            raw[name] = _tag_values(_load(file), file)
    elif path.is_file():
        data = _load(path)
        if not isinstance(data, dict):
            raise RecipeError(f"{path}: a tags file maps tag names to lists of items")
        raw = {short(k): _tag_values(v, path) for k, v in data.items()}
    else:
        raise RecipeError(f"tags: {path} is neither a directory nor a file")
    resolved: dict[str, tuple[str, ...]] = {}

    def resolve(tag: str, seen: tuple[str, ...]) -> tuple[str, ...]:
        if tag in resolved:
            return resolved[tag]
        if tag not in raw or tag in seen:
            return ()
        items: list[str] = []
        for value in raw[tag]:
            found = resolve(short(value), (*seen, tag)) if value.startswith("#") else (short(value),)
            items += [i for i in found if i not in items]
        resolved[tag] = tuple(items)
        return resolved[tag]

    for tag in raw:
        resolve(tag, ())
    return resolved


def _tag_values(data: Any, file: Path) -> list[str]:
    values = data.get("values") if isinstance(data, dict) else data
    if not isinstance(values, list):
        raise RecipeError(f"{file}: a tag lists its items under 'values'")
    return [v["id"] if isinstance(v, dict) else v for v in values if isinstance(v, str | dict)]


def _load(file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecipeError(f"{file}: cannot read it as JSON: {exc}") from exc


def read_recipes(recipes_dir: Path, tags: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[Recipe, ...]]:
    """The crafting recipes of ``recipes_dir`` by result item (the module's doc)."""
    if not recipes_dir.is_dir():
        raise RecipeError(f"recipes_dir: {recipes_dir} is not a directory (point it at a directory of recipe "
                          "JSON files)")
    files = sorted(recipes_dir.glob("*.json"))
    recipes: dict[str, list[Recipe]] = {}
    unknown: set[str] = set()
    for file in files:
        data = _load(file)
        kind = data.get("type") if isinstance(data, dict) else None
        if kind not in SHAPED | SHAPELESS:
            continue
        try:
            recipe = _recipe(data, kind in SHAPED, tags)
        except KeyError as exc:  # a tag no file defines
            unknown.add(exc.args[0])
            continue
        except (TypeError, ValueError, AttributeError) as exc:
            raise RecipeError(f"{file}: not a crafting recipe this reader understands: {exc}") from exc
        recipes.setdefault(recipe.result, []).append(recipe)
    if not recipes:
        raise RecipeError(f"recipes_dir: {recipes_dir} holds no crafting recipe (*.json of type crafting_shaped "
                          f"or crafting_shapeless; {len(files)} JSON files read)")
    if unknown:
        log.warning("skipped the recipes that name tags no tag file defines: %s", ", ".join(sorted(unknown)))
    return {item: tuple(rs) for item, rs in recipes.items()}


def _recipe(data: dict, shaped: bool, tags: Mapping[str, tuple[str, ...]]) -> Recipe:
    if shaped:
        symbols = "".join(data["pattern"]).replace(" ", "")
        specs = [data["key"][s] for s in symbols]
    else:
        specs = list(data["ingredients"])
    merged: dict[tuple[str, ...], list] = {}
    for spec in specs:
        options, label = _ingredient(spec, tags)
        merged.setdefault(options, [0, label])[0] += 1
    result = data["result"]
    item = short(result if isinstance(result, str) else result.get("item") or result["id"])
    count = 1 if isinstance(result, str) else int(result.get("count", 1))
    return Recipe(item, count, tuple(Ingredient(o, n, label) for o, (n, label) in merged.items()))


def _ingredient(spec: Any, tags: Mapping[str, tuple[str, ...]]) -> tuple[tuple[str, ...], str]:
    """An ingredient's options and label from its JSON form; KeyError(tag) for a tag no file defines."""
    if isinstance(spec, list):
        parts = [_ingredient(s, tags) for s in spec]
        options = tuple(dict.fromkeys(o for p, _ in parts for o in p))
        return options, " or ".join(label for _, label in parts)
    if isinstance(spec, str):
        spec = {"tag": spec[1:]} if spec.startswith("#") else {"item": spec}
    if "tag" in spec:
        tag = short(spec["tag"])
        if not tags.get(tag):
            raise KeyError(tag)
        return tags[tag], f"#{tag}"
    item = short(spec["item"])
    return (item,), item


def generate_targets(world: World, seed: int, counts: Mapping[str, int]) -> dict[str, tuple]:
    """Each split's tasks' targets (the module's doc)."""
    rng = random.Random(f"textcraft:{seed}:tasks")
    low, high = TARGET_DEPTHS
    eligible = [i for i in world.items if low <= world.depth[i] <= high]
    if len(eligible) < 2:
        raise RecipeError(f"the recipe set has {len(eligible)} item(s) of crafting depth {low}-{high}; tasks need "
                          "at least 2 (one for each split)")
    rng.shuffle(eligible)
    cut = max(1, round(len(eligible) * HELD_OUT))
    pools = {"train": sorted(eligible[cut:]), "val": sorted(eligible[:cut])}
    out: dict[str, tuple] = {}
    for split, n in counts.items():
        pool, seen, tasks = pools[split], set(), []
        for _ in range(20 * n):
            if len(tasks) == n:
                break
            chosen = sorted(rng.sample(pool, min(len(pool), rng.randint(1, 3))))
            targets = tuple((item, rng.randint(1, 3)) for item in chosen)
            if targets not in seen:
                seen.add(targets)
                tasks.append(targets)
        out[split] = tuple(tasks)
    return out


@environment("textcraft")
class TextCraft(CraftingEnvironment):
    """TextCraft on the recipes of ``recipes_dir`` (the module's doc). Options (an entry's ``service_kwargs``):
    ``recipes_dir`` (required), ``tags`` (a tag directory or JSON file), ``seed`` (default 0), ``train_tasks``
    (1000) and ``val_tasks`` (200)."""

    version = "1"
    max_turns = 50

    def __init__(self, *, recipes_dir: str | Path | None = None, tags: str | Path | None = None, seed: int = 0,
                 train_tasks: int = 1000, val_tasks: int = 200) -> None:
        if recipes_dir is None:
            raise RecipeError("textcraft needs recipes_dir: a directory of Minecraft recipe JSON files "
                              "(service_kwargs: {recipes_dir: path/to/recipes})")
        if train_tasks < 1 or val_tasks < 1:
            raise ValueError(f"train_tasks and val_tasks must be at least 1, got {train_tasks} and {val_tasks}")
        root = Path(recipes_dir).expanduser()
        tag_path = Path(tags).expanduser() if tags is not None else _default_tags(root)
        self.world = World(read_recipes(root, read_tags(tag_path)))
        self.targets = generate_targets(self.world, seed, {"train": train_tasks, "val": val_tasks})
        self.inventory_seed = f"textcraft:{seed}:inventory"
        self._index()


def _default_tags(root: Path) -> Path | None:
    for candidate in (root / "tags", root / "tags.json"):
        if candidate.exists():
            return candidate
    return None
