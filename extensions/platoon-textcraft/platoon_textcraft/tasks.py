"""The task set both variants share: splits, difficulty by depth, starting inventories, and the environment class
that serves tasks and episodes over them.

Rules it keeps:
- difficulty is a target's crafting depth binned: easy 2-3, medium 4-6, hard 7-9, extreme 10-12;
- splits are ``train`` and ``val`` (the evaluation split), and ``<split>-<difficulty>`` for each;
- a starting inventory holds the base items the gold plan consumes, each with a buffer of 0-50% (rounded down),
  plus a few distractors: base items the plan does not use;
- task ids are ``<split>-<n>`` (``train-00042``); ``task(id)`` rebuilds the same ``Task`` every time;
- a split lists its tasks' targets; a task's inventory and gold plan are made when it is first asked for, from a
  generator of its own (the variant's ``inventory_seed`` and the task's id), so that listing thousands of tasks
  costs no planning and a task is the same whenever it is asked for.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Mapping, Sequence

from platoon.environments import Task, ToolCall
from platoon_textcraft.episode import CraftingEpisode, CraftTask, vocabulary
from platoon_textcraft.world import World

__all__ = ["DIFFICULTIES", "CraftingEnvironment", "difficulty_of", "starting_inventory"]

DIFFICULTIES = {"easy": (2, 3), "medium": (4, 6), "hard": (7, 9), "extreme": (10, 12)}


def difficulty_of(depth: int) -> str:
    for name, (low, high) in DIFFICULTIES.items():
        if low <= depth <= high:
            return name
    raise ValueError(f"no difficulty covers depth {depth} (tasks take depths 2-12)")


def starting_inventory(world: World, targets: Sequence[tuple[str, int]], rng: random.Random,
                       distractors: tuple[int, int] = (2, 4)) -> CraftTask:
    """The task for ``targets``: the gold plan, its base items with a 0-50% buffer, and a few distractors."""
    crafts, base = world.plan(targets)
    inventory = {item: n + math.floor(n * rng.uniform(0.0, 0.5)) for item, n in base.items()}
    spare = [i for i in world.base_items if i not in base]
    for item in rng.sample(spare, min(len(spare), rng.randint(*distractors))):
        inventory[item] = rng.randint(1, 8)
    return CraftTask(tuple(targets), tuple(sorted(inventory.items())), tuple(crafts))


class CraftingEnvironment:
    """Tasks per split over one ``World``, and episodes of them. A variant builds ``world``, ``targets`` (each task's
    targets, per split, in order) and ``inventory_seed``, sets ``max_turns``, then calls ``_index``."""

    speaks_text = True
    eval_split = "val"
    max_turns = 50
    max_action_tokens = 256

    world: World
    targets: Mapping[str, Sequence[tuple[tuple[str, int], ...]]]
    inventory_seed: str

    def _index(self) -> None:
        """Task ids, splits and the lookup by id, from ``tasks``."""
        self._by_id: dict[str, tuple[str, tuple[tuple[str, int], ...]]] = {}
        self._made: dict[str, CraftTask] = {}
        self._splits: dict[str, list[str]] = {}
        for split, tasks in self.targets.items():
            width = max(5, len(str(len(tasks))))
            ids = [f"{split}-{n:0{width}d}" for n in range(len(tasks))]
            self._splits[split] = ids
            for name in DIFFICULTIES:
                self._splits[f"{split}-{name}"] = []
            for task_id, targets in zip(ids, tasks, strict=True):
                self._by_id[task_id] = (split, targets)
                self._splits[f"{split}-{difficulty_of(self.depth(targets))}"].append(task_id)

    @functools.cached_property
    def words(self) -> tuple[str, ...]:
        """The words its episodes write and read (``vocabulary`` of the world's items): the tiny model's tokenizer
        gives each one token."""
        return vocabulary(self.world.items)

    def depth(self, targets: Sequence[tuple[str, int]]) -> int:
        """A task's depth: its deepest target's."""
        return max(self.world.depth[item] for item, _ in targets)

    def task_ids(self, split: str) -> list[str]:
        if split not in self._splits:
            raise KeyError(f"unknown split {split!r}; the splits are {', '.join(self._splits)}")
        return list(self._splits[split])

    def craft_task(self, task_id: str) -> CraftTask:
        """The targets, starting inventory and gold crafts of ``task_id``."""
        if task_id not in self._by_id:
            raise KeyError(f"unknown task {task_id!r}")
        if task_id not in self._made:
            rng = random.Random(f"{self.inventory_seed}:{task_id}")
            self._made[task_id] = starting_inventory(self.world, self._by_id[task_id][1], rng)
        return self._made[task_id]

    def task(self, task_id: str) -> Task:
        if task_id not in self._by_id:
            raise KeyError(f"unknown task {task_id!r}")
        split, targets = self._by_id[task_id]
        depth = self.depth(targets)
        crafts = len(self.craft_task(task_id).gold)
        return Task(task_id, split, {"difficulty": difficulty_of(depth), "depth": depth, "crafts": crafts},
                    max_turns=self.max_turns, max_action_tokens=self.max_action_tokens)

    def episode(self, task: Task) -> CraftingEpisode:
        return CraftingEpisode(self.world, self.craft_task(task.task_id))

    def demonstration(self, task_id: str) -> list[list[ToolCall]]:
        """An expert's play of ``task_id``, a list of calls per turn (``platoon sft`` trains on it,
        docs/warm-start.md): ``get_info`` of the targets, then of each level of the ingredients the gold crafts use
        that are not base (in the order their recipes name them), then the gold crafts, one a turn, each item's
        ingredients before it in the order its recipe names them, then ``finish``. Every recipe a craft copies was
        read from an answer before it, and the next craft is the next ingredient its parent's recipe names, so
        what a model learns from it carries over to items it never saw."""
        by_item = {c.item: c for c in self.craft_task(task_id).gold}
        targets = [item for item, _ in self._by_id[task_id][1]]
        turns: list[list[ToolCall]] = []
        level, asked = targets, set(targets)
        while level:
            turns.append([ToolCall("get_info", {"items": level})])
            level = list(dict.fromkeys(name for item in level for name, _ in by_item[item].ingredients
                                       if name in by_item and name not in asked))
            asked.update(level)
        order: list[str] = []

        def craft(item: str) -> None:  # after its ingredients (the plan crafts each item once, in its total)
            for name, _ in by_item[item].ingredients:
                if name in by_item and name not in order:
                    craft(name)
            order.append(item)

        for item in targets:
            if item not in order:
                craft(item)
        turns += [[ToolCall("craft", by_item[item].arguments())] for item in order]
        return [*turns, [ToolCall("finish", {"message": "done"})]]

    def gold_solution(self, task_id: str) -> list[ToolCall]:
        """The gold crafts of ``task_id`` as tool calls, then ``finish``."""
        crafts = self.craft_task(task_id).gold
        return [*(ToolCall("craft", c.arguments()) for c in crafts), ToolCall("finish", {"message": "done"})]
