"""A crafting world: items, their recipes, which items are base, each item's crafting depth, and the plan that
crafts a set of targets from base items (a task's gold solution).

Rules it keeps:
- an ``Ingredient`` is one of ``options`` (concrete items: one item, or the members of a tag) taken ``count``
  times; the agent names one concrete item for it;
- an item is *base* (depth 0, a raw material a starting inventory may hold) when no recipe makes it, or when its
  recipes only go round a cycle that reaches no base item: ``iron_ingot``, ``iron_nugget`` and ``iron_block`` only
  make each other, since the game smelts ingots. Such an item stays craftable from its recipes. Any other item's depth is 1 plus, over its recipes, the
  least of the deepest ingredient (an ingredient's depth: its shallowest option);
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
        return {"target": [self.item, self.total], "ingredients": dict(self.ingredients)}


@dataclass
class World:
    """Recipes by result item, and what follows from them (see the module's doc)."""

    recipes: Mapping[str, tuple[Recipe, ...]]
    items: tuple[str, ...] = ()
    depth: dict[str, int] = field(init=False)
    base_items: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        named = set(self.recipes)
        for recipes in self.recipes.values():
            for recipe in recipes:
                for ing in recipe.ingredients:
                    named.update(ing.options)
        self.items = tuple(sorted(named | set(self.items)))
        self.depth = _depths(self.items, self.recipes)
        self.base_items = tuple(i for i in self.items if self.depth[i] == 0)
        self._best: dict[str, tuple[Recipe, tuple[str, ...]]] = {}

    def is_base(self, item: str) -> bool:
        return self.depth.get(item) == 0

    def option_depth(self, ing: Ingredient) -> int:
        return min(self.depth[o] for o in ing.options)

    def best_option(self, ing: Ingredient) -> str:
        """The shallowest option of ``ing`` (the first in sorted order of equals)."""
        return min(sorted(ing.options), key=lambda o: self.depth[o])

    def best_recipe(self, item: str) -> Recipe:
        """The recipe through which ``item`` has its depth (the first of equals); ``item`` is not base."""
        for recipe in self.recipes[item]:
            if 1 + max(self.option_depth(i) for i in recipe.ingredients) == self.depth[item]:
                return recipe
        raise ValueError(f"{item!r} is a base item: no recipe crafts it from base items")

    def plan(self, targets: Iterable[tuple[str, int]]) -> tuple[list[Craft], dict[str, int]]:
        """The crafts (in order) that make ``targets`` from base items, and the base items they consume."""
        need: dict[str, int] = {}
        queue: list[tuple[int, str]] = []

        def add(item: str, count: int) -> None:
            if item not in need:
                heapq.heappush(queue, (-self.depth[item], item))
            need[item] = need.get(item, 0) + count

        for item, count in targets:
            add(item, count)
        crafts: list[Craft] = []
        base: dict[str, int] = {}
        while queue:
            _, item = heapq.heappop(queue)
            count = need.pop(item)
            if self.depth[item] == 0:
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


def _depths(items: Iterable[str], recipes: Mapping[str, tuple[Recipe, ...]]) -> dict[str, int]:
    """Each item's depth (the module's doc): relaxation from the items no recipe makes, then the items it left
    without a depth made base."""
    depth: dict[str, int | None] = {i: (None if recipes.get(i) else 0) for i in items}
    _relax(depth, recipes)
    while None in depth.values():
        for item in _on_cycles(depth, recipes) or [i for i, d in depth.items() if d is None]:
            depth[item] = 0
        _relax(depth, recipes)
    return {i: d for i, d in depth.items() if d is not None}


def _on_cycles(depth: Mapping[str, int | None], recipes: Mapping[str, tuple[Recipe, ...]]) -> list[str]:
    """The items without a depth that some chain of ingredients without a depth leads back to."""
    missing = sorted(i for i, d in depth.items() if d is None)
    below = {i: {o for r in recipes[i] for ing in r.ingredients for o in ing.options if depth[o] is None}
             for i in missing}
    out = []
    for item in missing:
        seen, stack = set(), list(below[item])
        while stack:
            nxt = stack.pop()
            if nxt not in seen:
                seen.add(nxt)
                stack += below[nxt]
        if item in seen:
            out.append(item)
    return out


def _relax(depth: dict[str, int | None], recipes: Mapping[str, tuple[Recipe, ...]]) -> None:
    """Lower each depth to what its recipes give, until nothing changes (a pass per depth level)."""
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
