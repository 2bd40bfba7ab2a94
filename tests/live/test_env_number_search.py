"""number_search: the task grid, the splits, the answers, the rewards, and resolving environments by name."""

from __future__ import annotations

import asyncio
import math
import sys
import types

import pytest

from platoon.config import registry
from platoon.config.errors import ExtensionError
from platoon.live.envs import (
    NumberSearch,
    Outcome,
    Task,
    TextEnvironment,
    TextEpisode,
    ToolCall,
    ToolResult,
    acall,
    is_text_environment,
    resolve_environment,
)
from platoon.live.envs.number_search import GUESS, guarantee, optimal_success


def guess(k: object) -> ToolCall:
    return ToolCall("guess", {"number": k})


def play(env: NumberSearch, task: Task, guesses: list[int]) -> tuple[list[ToolResult], Outcome]:
    ep = env.episode(task)
    ep.reset()
    results = []
    for g in guesses:
        results.append(ep.call(guess(g)))
        if results[-1].done:
            break
    return results, ep.outcome()


def binary_search(env: NumberSearch, task: Task) -> Outcome:
    ep = env.episode(task)
    ep.reset()
    lo, hi = 1, task.columns["range"]
    while True:
        mid = (lo + hi) // 2
        result = ep.call(guess(mid))
        if result.done:
            return ep.outcome()
        if result.text == "higher":
            lo = mid + 1
        else:
            hi = mid - 1


def test_it_is_a_text_environment_with_one_tool():
    env = NumberSearch()
    assert isinstance(env, TextEnvironment) and is_text_environment(env)
    episode = env.episode(env.task(env.task_ids("train")[0]))
    assert isinstance(episode, TextEpisode) and tuple(episode.tools) == (GUESS,)
    assert list(GUESS.parameters["properties"]) == ["number"] and not GUESS.terminal


def test_the_grid_spans_ranges_and_guess_offsets():
    env = NumberSearch(ranges=(4, 8), guess_offsets=(-1, 0, 1))
    ids = env.task_ids("train") + env.task_ids("val")
    assert len(ids) == len(set(ids)) == 3 * (4 + 8)
    cells = {(env.task(t).columns["range"], env.task(t).columns["guesses"]) for t in ids}
    assert cells == {(4, 2), (4, 3), (4, 4), (8, 3), (8, 4), (8, 5)}
    task = env.task("n8-g3-t5")
    assert task.columns == {"range": 8, "guesses": 3, "target": 5, "offset": -1, "optimal": 7 / 8}
    assert (task.max_turns, task.max_action_tokens) == (3, 2)
    assert NumberSearch(action_tokens=64).task("n8-g3-t5").max_action_tokens == 64
    numbers = [w for w in env.words if w.isdigit()]
    assert numbers == [str(k) for k in range(1, 9)]  # up to the largest range (and the most guesses)
    assert {"guess", "number", "higher", "lower", "found", "invalid"} <= set(env.words)


def test_guarantee_is_the_binary_search_bound():
    for n in range(2, 70):
        g = guarantee(n)
        assert 2**g - 1 >= n > 2 ** (g - 1) - 1
        assert optimal_success(n, g) == 1.0 and optimal_success(n, g - 1) < 1.0


def test_splits_are_stratified_by_range_and_guesses_and_fixed_by_the_seed():
    env = NumberSearch(val_fraction=0.25)
    held = [env.task(t) for t in env.task_ids("val")]
    by_cell: dict[tuple[int, int], int] = {}
    for t in held:
        assert t.split == "val"
        key = (t.columns["range"], t.columns["guesses"])
        by_cell[key] = by_cell.get(key, 0) + 1
    for (n, _), count in by_cell.items():
        assert count == max(1, round(0.25 * n))
    assert set(env.task_ids("train")).isdisjoint(env.task_ids("val"))
    assert NumberSearch().task_ids("val") == env.task_ids("val")
    assert NumberSearch(split_seed=1).task_ids("val") != env.task_ids("val")
    # Held-out tasks are triples: a held-out target of one (N, g) is a training target of another.
    targets_train = {(env.task(t).columns["range"], env.task(t).columns["target"]) for t in env.task_ids("train")}
    assert any((t.columns["range"], t.columns["target"]) in targets_train for t in held)


def test_unknown_split_and_task_are_key_errors_naming_what_exists():
    env = NumberSearch()
    with pytest.raises(KeyError, match="train, val"):
        env.task_ids("test")
    with pytest.raises(KeyError, match="n<range>-g<guesses>-t<target>"):
        env.task("n3-g1-t9")


def test_answers_and_a_find():
    env = NumberSearch(ranges=(16,))
    task = env.task("n16-g5-t11")
    ep = env.episode(task)
    assert ep.reset() == "guess the number from 1 to 16 in 5 guesses"
    results, outcome = play(env, task, [8, 12, 17 - 6, 3])
    assert [r.text for r in results] == ["higher", "lower", "found"]
    assert [r.done for r in results] == [False, False, True] and results[2].content == {"answer": "found",
                                                                                       "range_left": 1}
    assert outcome == Outcome(1.0, True, {"guesses": 3, "range_left": 1})


@pytest.mark.parametrize("call", [guess(9), guess(0), guess("3"), guess(True), guess(2.0), ToolCall("guess"),
                                  ToolCall("look", {"number": 3})])
def test_a_bad_call_is_answered_invalid_and_changes_nothing(call):
    env = NumberSearch(ranges=(8,))
    ep = env.episode(env.task("n8-g4-t3"))
    ep.reset()
    result = ep.call(call)
    assert result == ToolResult("invalid", content={"answer": "invalid"}, error=True)
    assert ep.call(guess(8)).text == "lower" and ep.guesses == [8] and ep.guesses_left == 3


def test_partial_credit_for_narrowing_and_binary_reward():
    env = NumberSearch(ranges=(16,), partial_weight=0.5)
    task = env.task("n16-g4-t11")
    # 8 (higher) -> 9..16, 12 (lower) -> 9..11, 10 (higher) -> 11..11, 16 (lower): narrowed to one number.
    _, outcome = play(env, task, [8, 12, 10, 16])
    assert not outcome.success and outcome.reward == pytest.approx(0.5)
    _, outcome = play(env, task, [1, 1, 1, 1])
    assert outcome.reward == pytest.approx(0.5 * (1 - math.log(15) / math.log(16)))
    _, outcome = play(env, task, [16, 16, 16, 16])
    assert outcome.reward == pytest.approx(0.5 * (1 - math.log(15) / math.log(16)))
    binary = NumberSearch(ranges=(16,), reward="binary")
    _, outcome = play(binary, binary.task("n16-g4-t11"), [8, 12, 10, 16])
    assert outcome == Outcome(0.0, False, {"guesses": 4, "range_left": 1})


def test_binary_search_wins_every_task_it_can_and_rewards_stay_in_range():
    env = NumberSearch()
    for split in ("train", "val"):
        wins = {}
        for tid in env.task_ids(split):
            task = env.task(tid)
            outcome = binary_search(env, task)
            assert 0.0 <= outcome.reward <= 1.0
            assert outcome.success == (outcome.reward == 1.0)
            if task.columns["offset"] >= 0:
                assert outcome.success, tid
            wins.setdefault(task.columns["offset"], []).append(outcome.success)
        # With one guess short binary search loses some targets: those tasks stay mixed for any policy.
        assert 0 < sum(wins[-1]) < len(wins[-1])


def test_the_episode_refuses_calls_out_of_order_and_grades_whenever_asked():
    env = NumberSearch()
    ep = env.episode(env.task("n4-g2-t1"))
    with pytest.raises(RuntimeError, match="reset first"):
        ep.call(guess(1))
    with pytest.raises(RuntimeError, match="not started"):
        ep.outcome()
    assert ep.reset() == "guess the number from 1 to 4 in 2 guesses"
    with pytest.raises(RuntimeError, match="already started"):
        ep.reset()
    assert ep.outcome() == Outcome(0.0, False, {"guesses": 0, "range_left": 4})  # the turns ran out: no credit
    assert ep.call(guess(1)).done
    with pytest.raises(RuntimeError, match="over"):
        ep.call(guess(1))


def test_the_guesses_running_out_end_the_episode():
    env = NumberSearch(ranges=(8,))
    results, outcome = play(env, env.task("n8-g3-t5"), [1, 2, 3])
    assert [r.done for r in results] == [False, False, True] and not outcome.success


def test_show_range_adds_the_consistent_range_to_each_answer():
    env = NumberSearch(ranges=(16,), show_range=True)
    ep = env.episode(env.task("n16-g5-t11"))
    ep.reset()
    assert ep.call(guess(8)).text == "higher 9 16"
    assert ep.call(guess(99)).text == "invalid 9 16"
    assert ep.call(guess(11)).text == "found"


@pytest.mark.parametrize("options, match", [
    ({"ranges": (1, 4)}, "at least 2"),
    ({"guess_offsets": ()}, "must not be empty"),
    ({"val_fraction": 1.0}, "strictly between"),
    ({"reward": "dense"}, "'partial' or 'binary'"),
    ({"partial_weight": 1.0}, r"\[0, 1\)"),
    ({"action_tokens": 0}, "at least 1"),
])
def test_bad_options_are_value_errors(options, match):
    with pytest.raises(ValueError, match=match):
        NumberSearch(**options)


def test_resolve_by_name_by_reference_and_unknown():
    env = resolve_environment("platoon-number-search", {"ranges": [4, 8]})
    assert isinstance(env, NumberSearch) and env.max_range == 8
    assert registry.lookup("environment", "platoon-number-search") is NumberSearch
    env = resolve_environment("platoon.live.envs.number_search:NumberSearch", {})
    assert isinstance(env, NumberSearch)
    with pytest.raises(ExtensionError, match="did you mean 'platoon-number-search'"):
        resolve_environment("platoon-number-serch")
    with pytest.raises(TypeError):
        resolve_environment("platoon-number-search", {"no_such_option": 1})


FLIP = ToolCall("flip", {"side": "heads"})


class _AsyncCoin:
    """A one-task text environment whose calls are awaitables (an environment that does I/O)."""

    speaks_text = True

    def task_ids(self, split):
        return ["coin"]

    def task(self, task_id):
        return Task("coin", "train", max_turns=1)

    def episode(self, task):
        return _AsyncCoinEpisode()


class _AsyncCoinEpisode:
    tools = ()

    def reset(self):
        return "call heads"

    async def _answer(self, call):
        await asyncio.sleep(0)
        self.won = call.arguments.get("side") == "heads"
        return ToolResult("won" if self.won else "lost", done=True)

    def call(self, call):
        return self._answer(call)

    def outcome(self):
        return Outcome(float(self.won), self.won)


def test_a_package_registers_an_environment_with_awaitable_calls(monkeypatch):
    module = types.ModuleType("coin_env_pkg")

    def register():
        registry.environment("coin")(_AsyncCoin)

    module.register = register
    monkeypatch.setitem(sys.modules, "coin_env_pkg", module)
    register()
    try:
        env = resolve_environment("coin", {}, package="coin_env_pkg")
        ep = env.episode(env.task("coin"))
        ep.reset()
        result = asyncio.run(acall(ep, FLIP))
        assert result.done and ep.outcome() == Outcome(1.0, True)
    finally:
        registry.unregister("environment", "coin")


def test_a_class_that_does_not_speak_text_is_refused():
    with pytest.raises(ExtensionError, match="does not speak the text protocol"):
        resolve_environment("collections:OrderedDict")


def test_outcome_reward_outside_unit_interval_is_refused():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        Outcome(1.5, True)
