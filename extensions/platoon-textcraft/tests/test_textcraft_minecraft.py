"""TextCraft on real recipe files: reading shaped and shapeless recipes and tags, tasks, and every gold solution,
on the small recipe set under tests/recipes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from platoon.environments import ToolCall
from platoon_textcraft.minecraft import RecipeError, TextCraft, read_recipes, read_tags

RECIPES = Path(__file__).resolve().parent / "recipes"


@pytest.fixture(scope="module")
def env() -> TextCraft:
    return TextCraft(recipes_dir=RECIPES, train_tasks=40, val_tasks=10)


def test_tags_resolve_nested_and_object_entries() -> None:
    tags = read_tags(RECIPES / "tags")
    assert tags["oak_logs"] == ("oak_log", "stripped_oak_log", "stripped_oak_wood")
    assert tags["planks"] == ("oak_planks", "birch_planks")


def test_shaped_shapeless_and_result_forms(env: TextCraft) -> None:
    recipes = env.world.recipes
    assert set(recipes) == {"oak_planks", "birch_planks", "stick", "crafting_table", "chest", "wooden_pickaxe",
                            "torch", "ladder", "iron_block", "iron_ingot", "iron_nugget", "iron_pickaxe"}
    assert "charcoal" not in recipes  # the smelting recipe is skipped
    assert [r.text() for r in recipes["iron_ingot"]] == ["9 iron_ingot <- 1 iron_block", "1 iron_ingot <- 9 iron_nugget"]
    assert [r.text() for r in recipes["wooden_pickaxe"]] == ["1 wooden_pickaxe <- 3 #planks, 2 stick"]
    assert [r.text() for r in recipes["chest"]] == ["1 chest <- 8 #planks"]
    assert [r.text() for r in recipes["ladder"]] == ["3 ladder <- 7 stick"]  # 1.21's string key and "id" result
    assert [r.text() for r in recipes["torch"]] == ["4 torch <- 1 coal or charcoal, 1 stick"]
    assert [r.text() for r in recipes["oak_planks"]] == ["4 oak_planks <- 1 #oak_logs"]


def test_depths_base_items_and_cycles(env: TextCraft) -> None:
    depth = env.world.depth
    assert {i: depth[i] for i in ("oak_log", "oak_planks", "stick", "chest", "wooden_pickaxe", "torch")} == {
        "oak_log": 0, "oak_planks": 1, "stick": 2, "chest": 2, "wooden_pickaxe": 3, "torch": 3}
    # they only make each other (the game smelts ingots): base, and still craftable
    assert (depth["iron_block"], depth["iron_ingot"], depth["iron_nugget"], depth["iron_pickaxe"]) == (0, 0, 0, 3)
    assert env.world.base_items == ("birch_log", "charcoal", "coal", "iron_block", "iron_ingot", "iron_nugget",
                                    "oak_log", "stripped_oak_log", "stripped_oak_wood")


def test_tasks_ask_for_one_to_three_targets_of_depth_2_to_5(env: TextCraft) -> None:
    train, val = env.task_ids("train"), env.task_ids("val")
    assert len(train) == 40 and 1 <= len(val) <= 10
    train_targets = {i for t in train for i, _ in env.craft_task(t).targets}
    val_targets = {i for t in val for i, _ in env.craft_task(t).targets}
    assert not train_targets & val_targets
    for task_id in train + val:
        task, spec = env.task(task_id), env.craft_task(task_id)
        assert 1 <= len(spec.targets) <= 3 and all(1 <= n <= 3 for _, n in spec.targets)
        assert all(2 <= env.world.depth[i] <= 5 for i, _ in spec.targets)
        assert (task.max_turns, task.columns["difficulty"]) == (50, "easy")
    assert env.task_ids("train-easy") == train and env.task_ids("train-hard") == []
    again = TextCraft(recipes_dir=RECIPES, train_tasks=40, val_tasks=10)
    assert [again.craft_task(t) for t in train] == [env.craft_task(t) for t in train]


def test_every_gold_solution_succeeds(env: TextCraft) -> None:
    for task_id in env.task_ids("train") + env.task_ids("val"):
        episode = env.episode(env.task(task_id))
        episode.reset()
        for call in env.gold_solution(task_id):
            result = episode.call(call)
            assert not result.error, (task_id, call, result.text)
        assert episode.outcome().success, task_id


def test_a_base_item_on_a_cycle_is_still_craftable(env: TextCraft) -> None:
    from platoon_textcraft.episode import CraftingEpisode, CraftTask

    episode = CraftingEpisode(env.world, CraftTask((("iron_ingot", 1),), (("iron_nugget", 9),)))
    episode.reset()
    info = episode.call(ToolCall("get_info", {"items": ["iron_ingot"]})).text
    assert info.startswith("iron_ingot: craftable: yes, base: yes, in inventory: 0, depth: 0")
    craft = ToolCall("craft", {"ingredients": {"iron_nugget": 9}, "target": ["iron_ingot", 1]})
    assert not episode.call(craft).error and episode.inventory == {"iron_ingot": 1}


def test_a_tag_ingredient_takes_any_one_of_its_items(env: TextCraft) -> None:
    from platoon_textcraft.episode import CraftingEpisode, CraftTask

    episode = CraftingEpisode(env.world, CraftTask((("stick", 4),), (("stripped_oak_wood", 1),)))
    episode.reset()
    craft = [ToolCall("craft", {"ingredients": {"stripped_oak_wood": 1}, "target": ["oak_planks", 4]}),
             ToolCall("craft", {"ingredients": {"oak_planks": 2}, "target": ["stick", 4]}),
             ToolCall("finish", {"message": "made four sticks"})]
    assert [episode.call(c).error for c in craft] == [False, False, False]
    assert episode.outcome().reward == 1.0


def test_a_tags_json_file_serves_as_well(tmp_path: Path) -> None:
    tags = tmp_path / "tags.json"
    tags.write_text(json.dumps({"minecraft:planks": ["minecraft:oak_planks"], "oak_logs": ["minecraft:oak_log"]}))
    recipes = read_recipes(RECIPES, read_tags(tags))
    assert [r.text() for r in recipes["stick"]] == ["4 stick <- 2 #planks"]
    assert recipes["stick"][0].ingredients[0].options == ("oak_planks",)


def test_a_recipe_naming_an_unknown_tag_is_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    recipes = read_recipes(RECIPES, {"oak_logs": ("oak_log",)})
    assert "stick" not in recipes and "oak_planks" in recipes
    assert "planks" in caplog.text


@pytest.mark.parametrize(("make", "why"), [
    (lambda p: p / "missing", "is not a directory"),
    (lambda p: p, "holds no crafting recipe"),
])
def test_a_missing_or_empty_recipe_directory_is_a_clear_error(tmp_path: Path, make, why: str) -> None:
    with pytest.raises(RecipeError, match=why):
        TextCraft(recipes_dir=make(tmp_path))
    with pytest.raises(RecipeError, match="textcraft needs recipes_dir"):
        TextCraft()


def test_a_broken_recipe_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(RecipeError, match="bad.json: cannot read it as JSON"):
        TextCraft(recipes_dir=tmp_path)
