"""A crafting world: items, their recipes, which items are base, each item's crafting depth, and the plan that
crafts a set of targets from base items (a task's gold solution).

Rules it keeps:
- an ``Ingredient`` is one of ``options`` (concrete items: one item, or the members of a tag) taken ``count``
  times; the agent names one concrete item for it;
- an item is *base* when no recipe makes it; its depth is 0. A craftable item's depth is 1 plus, over its recipes,
  the least of the deepest ingredient (an ingredient's depth: its shallowest option). An item that only cycles
  (``iron_block`` <-> ``iron_ingot`` with no base below) has no depth (``None``): it is no task's target;
- ``plan`` crafts each needed item once, shallowest first, in the count needed rounded up to a multiple of its
  recipe's result count (summed over everything that needs it: the plan walks from the targets down, deepest first), through each item's shallowest recipe (the first of equals) and each ingredient's
  shallowest option (the first of equals, in sorted order). Depths strictly fall along that choice, so the order is
  valid.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["Craft", "Ingredient", "Recipe", "World"]


@dataclass(frozen=True)
class Ingredient:
    """One ingredient of a recipe: ``count`` of one item among ``options``; ``label`` is how the recipe names it
    (the item, or ``#tag``)."""

    options: tuple[str, ...]
    count: int
    label: str

    def text(self) -> str:
        return f"{self.count} {self.label}"


@dataclass(frozen=True)
class Recipe:
    """``count`` of ``result`` from ``ingredients`` (each a distinct ``Ingredient``)."""

    result: str
    count: int
    ingredients: tuple[Ingredient, ...]

    def text(self) -> str:
        return f"{self.count} {self.result} <- " + ", ".join(i.text() for i in self.ingredients)


@dataclass(frozen=True)
class Craft:
    """One step of a plan: craft ``total`` of ``item`` from ``ingredients`` (concrete items and their counts)."""

    item: str
    total: int
    ingredients: tuple[tuple[str, int], ...]

    def arguments(self) -> dict:
        """The ``craft`` tool's arguments for this step."""
        return {"ingredients": dict(self.ingredients), "target": [self.item, self.total]}


@dataclass
class World:
    """Recipes by result item, and what follows from them (see the module's doc)."""

    recipes: Mapping[str, tuple[Recipe, ...]]
    items: tuple[str, ...] = ()
    depth: dict[str, int | None] = field(init=False)
    base_items: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        named = set(self.recipes)
        for recipes in self.recipes.values():
            for recipe in recipes:
                for ing in recipe.ingredients:
                    named.update(ing.options)
        self.items = tuple(sorted(named | set(self.items)))
        self.depth = _depths(self.items, self.recipes)
        self.base_items = tuple(i for i in self.items if not self.recipes.get(i))
        self._best: dict[str, tuple[Recipe, tuple[str, ...]]] = {}

    def is_base(self, item: str) -> bool:
        return item in self.depth and not self.recipes.get(item)

    def option_depth(self, ing: Ingredient) -> int | None:
        known = [d for d in (self.depth.get(o) for o in ing.options) if d is not None]
        return min(known) if known else None

    def best_option(self, ing: Ingredient) -> str:
        """The shallowest option of ``ing`` (the first in sorted order of equals)."""
        return min((o for o in sorted(ing.options) if self.depth.get(o) is not None), key=lambda o: self.depth[o])

    def best_recipe(self, item: str) -> Recipe:
        """The recipe through which ``item`` has its depth (the first of equals)."""
        for recipe in self.recipes[item]:
            depths = [self.option_depth(i) for i in recipe.ingredients]
            if None not in depths and 1 + max(depths, default=0) == self.depth[item]:  # type: ignore[type-var]
                return recipe
        raise ValueError(f"{item!r} has no depth: no recipe of it reaches base items")

    def plan(self, targets: Iterable[tuple[str, int]]) -> tuple[list[Craft], dict[str, int]]:
        """The crafts (in order) that make ``targets`` from base items, and the base items they consume."""
        need: dict[str, int] = {}
        queue: list[tuple[int, str]] = []

        def add(item: str, count: int) -> None:
            if item not in need:
                heapq.heappush(queue, (-self.depth[item], item))  # type: ignore[operator]
            need[item] = need.get(item, 0) + count

        for item, count in targets:
            add(item, count)
        crafts: list[Craft] = []
        base: dict[str, int] = {}
        while queue:
            _, item = heapq.heappop(queue)
            count = need.pop(item)
            if not self.recipes.get(item):
                base[item] = count
                continue
            recipe, options = self._chosen(item)
            times = math.ceil(count / recipe.count)
            used = tuple((o, i.count * times) for o, i in zip(options, recipe.ingredients, strict=True))
            crafts.append(Craft(item, times * recipe.count, used))
            for name, n in used:
                add(name, n)
        return crafts[::-1], dict(sorted(base.items()))  # planned from the top, crafted from the bottom

    def _chosen(self, item: str) -> tuple[Recipe, tuple[str, ...]]:
        """``item``'s best recipe and each ingredient's best option, computed once."""
        if item not in self._best:
            recipe = self.best_recipe(item)
            self._best[item] = (recipe, tuple(self.best_option(i) for i in recipe.ingredients))
        return self._best[item]


def _depths(items: Iterable[str], recipes: Mapping[str, tuple[Recipe, ...]]) -> dict[str, int | None]:
    """Each item's depth (the module's doc), by relaxation from the base items up: a pass per depth level."""
    depth: dict[str, int | None] = {i: (None if recipes.get(i) else 0) for i in items}
    changed = True
    while changed:
        changed = False
        for item, options in recipes.items():
            best = depth[item]
            for recipe in options:
                ds = [min((d for d in (depth[o] for o in ing.options) if d is not None), default=None)
                      for ing in recipe.ingredients]
                if ds and None not in ds:
                    d = 1 + max(ds)  # type: ignore[type-var]
                    if best is None or d < best:
                        best = d
            if best != depth[item]:
                depth[item] = best
                changed = True
    return depth
