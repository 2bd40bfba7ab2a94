"""The crafting rule, the tools and the grade, on a small world built by hand."""

from __future__ import annotations

import pytest

from platoon.environments import ToolCall
from platoon_textcraft.episode import TOOLS, CraftingEpisode, CraftTask
from platoon_textcraft.world import Ingredient, Recipe, World


def one(item: str, count: int) -> Ingredient:
    return Ingredient((item,), count, item)


PLANKS = Ingredient(("oak_planks", "birch_planks"), 2, "#planks")
WORLD = World({
    "oak_planks": (Recipe("oak_planks", 4, (one("oak_log", 1),)),),
    "birch_planks": (Recipe("birch_planks", 4, (one("birch_log", 1),)),),
    "stick": (Recipe("stick", 4, (PLANKS,)),),
    "torch": (Recipe("torch", 4, (one("coal", 1), one("stick", 1))),
              Recipe("torch", 4, (one("charcoal", 1), one("stick", 1)))),
})


def episode(inventory: dict[str, int], targets=(("stick", 4),)) -> CraftingEpisode:
    ep = CraftingEpisode(WORLD, CraftTask(tuple(targets), tuple(inventory.items())))
    ep.reset()
    return ep


def craft(ep: CraftingEpisode, ingredients: dict, item: str, total: int):
    return ep.call(ToolCall("craft", {"ingredients": ingredients, "target": [item, total]}))


def test_the_tools_are_the_four_and_only_finish_is_terminal() -> None:
    assert [(t.name, t.terminal) for t in TOOLS] == [("craft", False), ("get_info", False),
                                                     ("view_inventory", False), ("finish", True)]
    assert TOOLS[0].schema()["function"]["parameters"]["required"] == ["target", "ingredients"]


def test_depths_and_base_items() -> None:
    assert WORLD.depth == {"birch_log": 0, "birch_planks": 1, "charcoal": 0, "coal": 0, "oak_log": 0,
                           "oak_planks": 1, "stick": 2, "torch": 3}
    assert WORLD.base_items == ("birch_log", "charcoal", "coal", "oak_log")


def test_a_craft_takes_exact_counts_scaled_by_the_result_count() -> None:
    ep = episode({"oak_log": 3})
    result = craft(ep, {"oak_log": 2}, "oak_planks", 8)
    assert not result.error and ep.inventory == {"oak_log": 1, "oak_planks": 8}
    assert "Crafted 8 oak_planks" in result.text


@pytest.mark.parametrize(("ingredients", "total", "why"), [
    ({"oak_log": 1}, 3, "the total must be a multiple of 4"),
    ({"oak_log": 2}, 4, "it takes 1 oak_log for 4"),
    ({"oak_log": 1, "coal": 1}, 4, "it takes 1 oak_log for 4"),
    ({"birch_log": 1}, 4, "it takes 1 oak_log for 4"),
])
def test_a_failed_craft_changes_nothing_and_says_why(ingredients: dict, total: int, why: str) -> None:
    ep = episode({"oak_log": 3, "birch_log": 1, "coal": 1})
    before = dict(ep.inventory)
    result = craft(ep, ingredients, "oak_planks", total)
    assert result.error and why in result.text and "nothing changed" in result.text
    assert ep.inventory == before


def test_not_enough_in_the_inventory_names_what_is_short() -> None:
    ep = episode({"oak_log": 1})
    result = craft(ep, {"oak_log": 2}, "oak_planks", 8)
    assert result.error and "oak_log (have 1, need 2)" in result.text and ep.inventory == {"oak_log": 1}


def test_a_tag_takes_one_concrete_item_of_it() -> None:
    ep = episode({"oak_planks": 4, "birch_planks": 4})
    assert craft(ep, {"oak_planks": 1, "birch_planks": 1}, "stick", 4).error  # two kinds for one ingredient
    assert craft(ep, {"#planks": 2}, "stick", 4).error  # the tag itself is no item
    assert not craft(ep, {"birch_planks": 2}, "stick", 4).error
    assert ep.inventory == {"oak_planks": 4, "birch_planks": 2, "stick": 4}


def test_every_recipe_of_the_item_is_tried() -> None:
    ep = episode({"charcoal": 1, "stick": 1})
    assert not craft(ep, {"charcoal": 1, "stick": 1}, "torch", 4).error
    assert ep.inventory == {"torch": 4}
    ep = episode({"charcoal": 1, "stick": 1})
    result = craft(ep, {"coal": 1, "stick": 1}, "torch", 4)
    assert result.error and "coal (have 0, need 1)" in result.text and "recipe 4 torch <- 1 charcoal" in result.text


@pytest.mark.parametrize(("arguments", "why"), [
    ({"ingredients": {"oak_log": 1}}, "target: [item, total_count]"),
    ({"ingredients": {"oak_log": 1}, "target": ["oak_planks", 0]}, "positive integer"),
    ({"ingredients": {"oak_log": True}, "target": ["oak_planks", 4]}, "ingredients: a non-empty object"),
    ({"ingredients": {}, "target": ["oak_planks", 4]}, "ingredients: a non-empty object"),
    ({"ingredients": {"oak_log": 1}, "target": ["diamond", 4]}, "Unknown item 'diamond'"),
    ({"ingredients": {"oak_log": 1}, "target": ["oak_log", 1]}, "oak_log is a base item"),
])
def test_bad_craft_arguments_are_errors(arguments: dict, why: str) -> None:
    ep = episode({"oak_log": 3})
    result = ep.call(ToolCall("craft", arguments))
    assert result.error and why in result.text and ep.inventory == {"oak_log": 3}


def test_get_info_and_view_inventory() -> None:
    ep = episode({"oak_log": 3})
    info = ep.call(ToolCall("get_info", {"items": ["stick", "oak_log", "diamond"]}))
    assert info.text.split(" \n ") == [  # a line break between spaces: items stay words of the tiny tokenizer
        "stick: craftable: yes, base: no, in inventory: 0, depth: 2, recipes: 4 stick <- 2 #planks",
        "oak_log: craftable: no, base: yes, in inventory: 3, depth: 0, recipes: none",
        "diamond: unknown item",
    ]
    assert ep.call(ToolCall("get_info", {"items": []})).error
    assert ep.call(ToolCall("view_inventory", {})).text == "Inventory: 3 oak_log"
    assert ep.call(ToolCall("dance", {})).error


def test_reward_needs_the_gain_and_a_finish_with_a_message() -> None:
    ep = episode({"oak_log": 1, "stick": 4})  # holding the target at the start is no gain
    craft(ep, {"oak_log": 1}, "oak_planks", 4)
    assert ep.call(ToolCall("finish", {"message": "done"})).done
    assert ep.outcome().reward == 0.0
    ep = episode({"oak_log": 1})
    craft(ep, {"oak_log": 1}, "oak_planks", 4)
    craft(ep, {"oak_planks": 2}, "stick", 4)
    result = ep.call(ToolCall("finish", {"message": "  "}))
    assert result.done and result.error and ep.outcome().reward == 0.0
    ep = episode({"oak_log": 1})
    craft(ep, {"oak_log": 1}, "oak_planks", 4)
    craft(ep, {"oak_planks": 2}, "stick", 4)
    assert ep.outcome().reward == 0.0  # not finished
    assert ep.call(ToolCall("finish", {"message": "crafted 4 sticks"})).done
    outcome = ep.outcome()
    assert (outcome.reward, outcome.success, outcome.info["gains"]) == (1.0, True, {"stick": 4})
    late = ep.call(ToolCall("view_inventory", {}))
    assert late.error and late.done


def test_a_plan_crafts_each_item_once_bottom_up_rounding_to_result_counts() -> None:
    crafts, base = WORLD.plan([("torch", 4), ("stick", 1)])
    assert [c.arguments() for c in crafts] == [
        {"ingredients": {"birch_log": 1}, "target": ["birch_planks", 4]},
        {"ingredients": {"birch_planks": 2}, "target": ["stick", 4]},  # 1 for the torches, 1 asked for
        {"ingredients": {"coal": 1, "stick": 1}, "target": ["torch", 4]},  # the first of equal recipes
    ]
    assert base == {"birch_log": 1, "coal": 1}
