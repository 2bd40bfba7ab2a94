"""The pool's task ids: platoon 0.4.0's ``<entry>::<task id>`` in a mixture, the environment's id with one entry."""

import pytest

from platoon.policy.pool import EntrySpec, TaskPool, pool_task_id, split_pool_task_id


def test_one_entry_keeps_the_environments_ids():
    pool = TaskPool.from_entries([EntrySpec("easy", ["n4-g2-t1", "n4-g2-t2"], 2)])
    assert pool.task_ids == ("n4-g2-t1", "n4-g2-t2")
    assert [r.env_task_id for r in pool.rows] == ["n4-g2-t1", "n4-g2-t2"]
    assert pool.entries["easy"].task_ids == pool.task_ids


def test_a_mixture_names_each_task_by_its_entry():
    # both entries list the same environment task: two tasks of the pool, each its own statistics and draws
    pool = TaskPool.from_entries([EntrySpec("easy", ["t1", "t2"], 2), EntrySpec("hard", ["t1"], 4)])
    assert pool.task_ids == ("easy::t1", "easy::t2", "hard::t1")
    assert [r.env_task_id for r in pool.rows] == ["t1", "t2", "t1"]
    assert (pool.first_index("easy::t1"), pool.first_index("hard::t1"), pool.first_index("t1")) == (0, 2, None)
    assert pool.entries["hard"].task_ids == ("hard::t1",)
    assert (pool[2].entry, pool[2].group_size) == ("hard", 4)


def test_a_repeated_task_of_one_entry_is_drawn_as_its_first_row():
    pool = TaskPool.from_entries([EntrySpec("a", ["t", "u", "t"], 2), EntrySpec("b", ["t"], 2)])
    assert pool.first_index("a::t") == 0 and pool.task_ids.count("a::t") == 2


def test_the_id_splits_back_into_entry_and_task():
    for mixture in (False, True):
        pid = pool_task_id("easy", "n4-g2-t1", mixture)
        assert pid == ("easy::n4-g2-t1" if mixture else "n4-g2-t1")
        assert split_pool_task_id(pid, mixture) == ("easy" if mixture else None, "n4-g2-t1")
    # an environment id may hold "::" itself: the entry's name holds none, so the first one splits
    assert split_pool_task_id(pool_task_id("a", "x::y", True), True) == ("a", "x::y")
    with pytest.raises(ValueError, match="<entry>::<task id>"):
        split_pool_task_id("t1", True)


def test_a_mixtures_entry_name_holds_no_separator():
    with pytest.raises(ValueError, match="holds no '::'"):
        TaskPool.from_entries([EntrySpec("a::b", ["t"], 2), EntrySpec("c", ["t"], 2)])
    assert TaskPool.from_entries([EntrySpec("a::b", ["t"], 2)]).task_ids == ("t",)
