"""A sampler member's precomputed maps over its pool rows, with distinct and with repeated task ids."""

from __future__ import annotations

import pytest

from platoon.policy.pool import EntrySpec, TaskPool
from platoon.policy.samplers.member import Member
from platoon.policy.samplers.uniform import UniformSampler


def pool(ids_a: list[str]) -> TaskPool:
    labels = ["x" if i % 3 else "w" for i in range(len(ids_a))]
    return TaskPool.from_entries([EntrySpec("a", ids_a, 4, label=labels), EntrySpec("b", ["t0", "t9"], 8, label="x")])


@pytest.mark.parametrize("ids_a", [[f"t{i}" for i in range(7)], ["t1", "t2", "t1", "t3", "t2", "t4", "t5"]])
def test_maps_follow_each_ids_first_row(ids_a):
    p = pool(ids_a)
    m = Member("uniform", UniformSampler, None, level="run", entry=None, rows=range(len(p)), pool=p, batch_size=4,
               seed=0)
    ids = list(m.setup.task_ids)
    uids = list(m.setup.unique_ids)
    assert list(m.setup.first_index.items()) == [(t, ids.index(t)) for t in uids]
    assert m.uid_of_row.tolist() == [uids.index(t) for t in ids]
    kinds = [(p.rows[ids.index(t)].label, p.rows[ids.index(t)].group_size) for t in uids]
    classes = list(dict.fromkeys(kinds))
    assert m.uid_class.tolist() == [classes.index(k) for k in kinds]
    assert m.class_task == [uids[kinds.index(c)] for c in classes]
    assert m.class_size.tolist() == [size for _, size in classes]
