"""One TextCraft episode: the four tools, the crafting rule, and the grade.

Rules it keeps (both variants):
- ``craft(target, ingredients)``: ``target`` is ``[item, total_count]``; ``total_count`` must be a multiple of a
  recipe's result count, and ``ingredients`` must give each of the recipe's ingredients as one concrete item (one
  of the tag's items, for a tag) in exactly the recipe's count times ``total / result count``, with nothing extra.
  Every recipe of the item is tried, in order; the first that matches and that the inventory can pay for is used.
  A failure changes nothing and says why;
- ``get_info(items)``: per item, whether it is craftable, whether it is base, its count in the inventory, its depth
  and its recipes. ``view_inventory()``: the inventory;
- ``finish(message)`` ends the episode (terminal). The reward is 1 only when ``finish`` was called with a non-empty
  message and every target's gain over the starting inventory reaches its count; else 0. Success is reward 1;
- a call after the end, of an unknown tool, or with bad arguments returns an error and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from platoon.environments import Outcome, Tool, ToolCall, ToolResult
from platoon_textcraft.world import Recipe, World

__all__ = ["ANSWER_WORDS", "TOOLS", "CraftTask", "CraftingEpisode", "vocabulary"]

TOOLS = (
    Tool("craft", "Craft an item from ingredients in your inventory. Give every ingredient of one of the item's "
         "recipes as one concrete item with its exact count for the total you craft (the recipe's count times "
         "total / the recipe's result count), and nothing else.",
         {"type": "object",
          "properties": {  # the target first: a positional syntax (role_colon) names what it crafts, then from what
              "target": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer", "minimum": 1}],
                         "minItems": 2, "maxItems": 2,
                         "description": "[item, total_count]: the item to craft and how many in all."},
              "ingredients": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1},
                              "description": "Each ingredient item and its count, e.g. {\"oak_planks\": 2}."}},
          "required": ["target", "ingredients"]}),
    Tool("get_info", "For each item: whether it can be crafted, whether it is a base item, how many you hold, its "
         "crafting depth and its recipes.",
         {"type": "object",
          "properties": {"items": {"type": "array", "items": {"type": "string"}, "description": "Item names."}},
          "required": ["items"]}),
    Tool("view_inventory", "List the items in your inventory and their counts.",
         {"type": "object", "properties": {}}),
    Tool("finish", "End the episode once the targets are crafted, with a short message saying what you did.",
         {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
         terminal=True),
)


ANSWER_WORDS = (
    "Inventory:", "Your", "inventory", "is", "empty.",                                   # view_inventory
    "Crafted", "from", "You", "now", "hold",                                            # craft
    "craftable:", "base:", "in", "inventory:", "depth:", "recipes:", "yes,", "no,", "none", "<-", "unknown",
    "item",                                                                             # get_info
    "Finished.",                                                                        # finish
    "Could", "not", "craft", "nothing", "changed.", "recipe", "it", "takes", "for", "enough", "the", "(have",
    "need", "total", "must", "be", "a", "multiple", "of",                                # a craft refused
)
"""The words the tools' answers write besides item names and counts."""

MAX_COUNT_WORD = 256
"""Counts up to this are words of ``vocabulary`` (an easy task's inventory holds at most about 240 of an item)."""


def vocabulary(items: Iterable[str]) -> tuple[str, ...]:
    """The words an episode writes and reads, for a tokenizer that gives each declared word one token and cuts text
    at spaces (the tiny model's, ``platoon.live.agent.tokenizer``): the tools' and their parameters' names, the
    instruction's words, ``ANSWER_WORDS``, each item bare and as the answers write it before punctuation (``,``
    ``.`` ``:`` ``;``), counts 0 to ``MAX_COUNT_WORD`` (also before ``,`` and ``)``) and ``1x``-``9x``. Longer
    counts, tags (``#planks``) and JSON arguments are spelt in bytes."""
    words: list[str] = []
    for tool in TOOLS:
        words += [tool.name, *tool.parameters.get("properties", {})]
    words += CraftTask((), ()).instruction().split()
    words += ANSWER_WORDS
    for item in items:
        words += [item, *(item + p for p in ",.:;")]
    for n in range(MAX_COUNT_WORD + 1):
        words += [str(n), f"{n},", f"{n})"]
    words += [f"{n}x" for n in range(1, 10)]
    return tuple(dict.fromkeys(words))


@dataclass(frozen=True)
class CraftTask:
    """What a task asks and starts from: ``targets`` (item, count), the starting ``inventory`` and the ``gold``
    crafts that solve it."""

    targets: tuple[tuple[str, int], ...]
    inventory: tuple[tuple[str, int], ...]
    gold: tuple = ()

    def instruction(self) -> str:
        wanted = ", ".join(f"{n}x {item}" for item, n in self.targets)
        # the space before the line break keeps the last target a word of its own for a tokenizer that cuts text
        # at spaces (the tiny model's, which gives each item one token: ``vocabulary``)
        return (f"Craft the following items: {wanted} \n"
                "Your inventory holds the materials. Use get_info to see recipes, view_inventory to see what you "
                "hold and craft to make items; call finish with a short message when you are done.")


class CraftingEpisode:
    """One rollout of one ``CraftTask`` in a ``World`` (the module's doc)."""

    tools = TOOLS

    def __init__(self, world: World, task: CraftTask) -> None:
        self.world = world
        self.task = task
        self.start = dict(task.inventory)
        self.inventory = dict(task.inventory)
        self.ended = False
        self.finish_message: str | None = None

    def reset(self) -> str:
        return self.task.instruction()

    def call(self, call: ToolCall) -> ToolResult:
        if self.ended:
            return ToolResult("The episode has ended; no more calls are taken.", error=True, done=True)
        handler = {"craft": self._craft, "get_info": self._get_info, "view_inventory": self._view_inventory,
                   "finish": self._finish}.get(call.name)
        if handler is None:
            return ToolResult(f"Unknown tool {call.name!r}; the tools are craft, get_info, view_inventory and "
                              "finish.", error=True)
        return handler(dict(call.arguments or {}))

    def gains(self) -> dict[str, int]:
        return {item: self.inventory.get(item, 0) - self.start.get(item, 0) for item, _ in self.task.targets}

    def outcome(self) -> Outcome:
        gains = self.gains()
        done = all(gains[item] >= n for item, n in self.task.targets)
        reward = 1.0 if done and self.finish_message else 0.0
        return Outcome(reward, reward == 1.0, {"finished": self.finish_message is not None, "gains": gains})

    # the tools

    def _craft(self, args: dict[str, Any]) -> ToolResult:
        parsed = _craft_arguments(args)
        if isinstance(parsed, str):
            return ToolResult(parsed, error=True)
        given, item, total = parsed
        if item not in self.world.depth:
            return ToolResult(f"Unknown item {item!r}.", error=True)
        recipes = self.world.recipes.get(item, ())
        if not recipes:
            return ToolResult(f"{item} is a base item; it cannot be crafted.", error=True)
        reasons: list[str] = []
        for recipe in recipes:
            why = _mismatch(recipe, given, total)
            if why is None:
                short = {i: n for i, n in given.items() if self.inventory.get(i, 0) < n}
                if not short:
                    return self._apply(given, item, total)
                why = "not enough in the inventory: " + ", ".join(
                    f"{i} (have {self.inventory.get(i, 0)}, need {n})" for i, n in short.items())
            reasons.append(f"recipe {recipe.text()}: {why}")
        return ToolResult(f"Could not craft {total} {item}; nothing changed. " + "; ".join(reasons), error=True)

    def _apply(self, given: Mapping[str, int], item: str, total: int) -> ToolResult:
        for name, n in given.items():
            self.inventory[name] -= n
            if not self.inventory[name]:
                del self.inventory[name]
        self.inventory[item] = self.inventory.get(item, 0) + total
        used = ", ".join(f"{n} {i}" for i, n in given.items())
        return ToolResult(f"Crafted {total} {item} from {used}. You now hold {self.inventory[item]} {item}.",
                          content={"crafted": [item, total], "used": dict(given)})

    def _get_info(self, args: dict[str, Any]) -> ToolResult:
        items = args.get("items")
        if isinstance(items, str):
            items = [items]
        if not isinstance(items, list) or not items or not all(isinstance(i, str) for i in items):
            return ToolResult("get_info takes items: a non-empty list of item names.", error=True)
        infos = [self._info(i) for i in items]
        lines = []
        for info in infos:
            if not info["known"]:
                lines.append(f"{info['item']}: unknown item")
                continue
            recipes = "; ".join(info["recipes"]) or "none"
            lines.append(f"{info['item']}: craftable: {'yes' if info['craftable'] else 'no'}, base: "
                         f"{'yes' if info['base'] else 'no'}, in inventory: {info['count']}, depth: {info['depth']}, "
                         f"recipes: {recipes}")
        # a line break between spaces: the next line's first item stays a word of the tiny tokenizer's
        return ToolResult(" \n ".join(lines), content=infos)

    def _info(self, item: str) -> dict[str, Any]:
        known = item in self.world.depth
        recipes = self.world.recipes.get(item, ()) if known else ()
        return {"item": item, "known": known, "craftable": bool(recipes), "base": self.world.is_base(item),
                "count": self.inventory.get(item, 0), "depth": self.world.depth.get(item),
                "recipes": [r.text() for r in recipes]}

    def _view_inventory(self, args: dict[str, Any]) -> ToolResult:
        if not self.inventory:
            return ToolResult("Your inventory is empty.", content={})
        held = ", ".join(f"{n} {i}" for i, n in sorted(self.inventory.items()))
        return ToolResult(f"Inventory: {held}", content=dict(sorted(self.inventory.items())))

    def _finish(self, args: dict[str, Any]) -> ToolResult:
        message = args.get("message")
        self.ended = True
        self.finish_message = message.strip() if isinstance(message, str) and message.strip() else None
        if self.finish_message is None:
            return ToolResult("Finished without a message (finish takes a non-empty message).", error=True,
                              done=True)
        return ToolResult("Finished.", done=True)


def _craft_arguments(args: dict[str, Any]) -> tuple[dict[str, int], str, int] | str:
    """``(ingredients, item, total)`` from the call's arguments, or the text saying what is wrong with them."""
    target, ingredients = args.get("target"), args.get("ingredients")
    if not (isinstance(target, list | tuple) and len(target) == 2 and isinstance(target[0], str)
            and _positive(target[1])):
        return "craft takes target: [item, total_count] with a positive integer count."
    if not (isinstance(ingredients, dict) and ingredients
            and all(isinstance(k, str) and _positive(v) for k, v in ingredients.items())):
        return "craft takes ingredients: a non-empty object of item names to positive integer counts."
    return {k: int(v) for k, v in ingredients.items()}, target[0], int(target[1])


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _mismatch(recipe: Recipe, given: Mapping[str, int], total: int) -> str | None:
    """Why ``given`` is not ``recipe``'s ingredients for ``total`` of its result, or None when it is."""
    if total % recipe.count:
        return f"the total must be a multiple of {recipe.count}"
    times = total // recipe.count
    if _assign(recipe, given, times, 0, set()):
        return None
    need = ", ".join(f"{i.count * times} {i.label}" for i in recipe.ingredients)
    return f"it takes {need} for {total}"


def _assign(recipe: Recipe, given: Mapping[str, int], times: int, at: int, used: set[str]) -> bool:
    """Whether each ingredient from ``at`` on can take a distinct given item of its options in its exact count,
    every given item taken (a small backtracking search: recipes have at most nine ingredients)."""
    if at == len(recipe.ingredients):
        return len(used) == len(given)
    ing = recipe.ingredients[at]
    for item in ing.options:
        if item not in used and given.get(item) == ing.count * times:
            used.add(item)
            if _assign(recipe, given, times, at + 1, used):
                return True
            used.discard(item)
    return False
