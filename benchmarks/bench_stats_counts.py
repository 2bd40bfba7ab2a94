"""What does ``TaskStatsView.counts(task)`` for every task of a 4,096-task pool cost (the read an adaptive sampler
makes for each task of its pool, each decision)?

Target: no more than platoon 0.4.0's, whose store keeps a Python record per task and reads it back as a tuple.
Printed, as medians over 201 passes after a warm-up:

- ``ours``: the 4,096 reads through the view, the cache warm (no write since the last pass);
- ``ours, 16 writes between passes``: 8 settles and 8 draws between passes, as between two decisions of a run, so
  that those tasks' cached counts are rebuilt;
- ``numpy yardstick``: the straightforward vectorised computation of the same 4,096 ``TaskCounts``: one
  ``count_arrays`` read, each array to a list, a ``TaskCounts`` tuple per task built with ``tuple.__new__``, and the ratio of ours to it, measured in the same run.

This script uses only names both this project and platoon 0.4.0 export (``platoon.experimental``), so it also runs
against 0.4.0 (which has no ``count_arrays``: it prints the first two lines only). Run from outside the repository,
so that ``platoon`` is 0.4.0's::

    cd /tmp && PYTHONPATH=/work/stub040 /work/v040/bin/python <repo>/benchmarks/bench_stats_counts.py

Measured back to back on the development machine (2 shared cores under load: absolute times vary 2-5x from run to
run, so compare runs made together), five runs each: 0.4.0 10.4-13.2 ms (11-12 ms with the writes); ours
0.56-0.87 ms warm and 1.2-1.8 ms with the writes, the numpy yardstick 2.2-11.6 ms. Before the per-task cache, ours
took about twice 0.4.0's time (3.7 ms against 1.5 ms on a quiet machine).

Run: ``PYTHONPATH=. python benchmarks/bench_stats_counts.py``.
"""

from __future__ import annotations

import random
import statistics
import time

from platoon.experimental import EntryInfo, GroupRecord, MemberResult, TaskStatsStore, TaskStatsView

TASKS = 4096
PASSES = 201
WARMUP = 20
VERSION = 4


def group(rng: random.Random, task: str, entry: str, seq: int, version: int) -> GroupRecord:
    members = []
    for _ in range(8):
        scored = 1.0 if rng.random() < 0.5 else 0.0
        members.append(
            MemberResult(
                reward=scored,
                scored=scored,
                valid=True,
                outcome="scored",
                disposition="completed",
                reward_key=None,
                steps=3,
                output_tokens=10,
                seconds=1.0,
                versions={"main": (version, version)},
            )
        )
    return GroupRecord(
        start=1,
        seq=seq,
        task_id=task,
        entry=entry,
        labels={"label": "x"},
        harness=None,
        group_size=8,
        sampler="bench",
        reason="order",
        score=None,
        position=seq,
        drawn_at={"main": version},
        members=tuple(members),
        verdict="trained",
    )


def build() -> tuple[TaskStatsStore, list[tuple[str, str, str]]]:
    """The pool: half of its tasks with two settled groups, every seventh with a draw outstanding."""
    tasks = [(f"t{i}", "a" if i % 2 else "b", "x") for i in range(TASKS)]
    store = TaskStatsStore(tasks, {"a": EntryInfo(8), "b": EntryInfo(8)}, column="label")
    rng = random.Random(0)
    seq = 0
    for task, entry, _ in tasks[: TASKS // 2]:
        for version in range(2):
            store.draw(1, seq, task, seq)
            store.settle(group(rng, task, entry, seq, version))
            store.fate(1, seq, "consumed")
            seq += 1
    for i in range(0, TASKS, 7):
        store.draw(2, i, f"t{i}")
    return store, tasks


def median_ms(run, between=None) -> float:
    times = []
    for n in range(WARMUP + PASSES):
        if between is not None:
            between(n)
        t0 = time.perf_counter()
        run()
        if n >= WARMUP:
            times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def main() -> None:
    store, tasks = build()
    view = TaskStatsView(store, now=VERSION)
    ids = view.task_ids()

    def ours() -> None:
        for task in ids:
            view.counts(task)

    task_counts = type(view.counts(ids[0]))

    def yardstick() -> None:
        arrays = view.count_arrays(ids)
        columns = [a.tolist() for a in arrays[:5]]
        versions = [None if v != v else int(v) for v in arrays[5].tolist()]  # NaN: no evidence yet
        new = tuple.__new__  # a tuple per task without the namedtuple's checks: the cheapest build there is
        for row in zip(*columns, versions, strict=True):
            new(task_counts, row)

    rng = random.Random(1)
    seq = [10**6]

    def writes(_: int) -> None:
        for _ in range(8):
            task, entry, _label = tasks[rng.randrange(TASKS)]
            store.draw(3, seq[0], task)
            store.settle(group(rng, task, entry, seq[0], VERSION))
            seq[0] += 1
            store.draw(3, seq[0], tasks[rng.randrange(TASKS)][0])
            seq[0] += 1

    warm, written = median_ms(ours), median_ms(ours, writes)
    if not hasattr(view, "count_arrays"):  # platoon 0.4.0
        print(f"{TASKS} tasks, median of {PASSES} passes:\n  counts: {warm:7.3f} ms\n  16 writes between: {written:7.3f} ms")
        return
    yard = median_ms(yardstick)
    print(f"{TASKS} tasks, median of {PASSES} passes:")
    print(f"  ours:                           {warm:7.3f} ms  ({warm / yard:.2f}x the numpy yardstick)")
    print(f"  ours, 16 writes between passes: {written:7.3f} ms  ({written / yard:.2f}x the numpy yardstick)")
    print(f"  numpy yardstick:                {yard:7.3f} ms")


if __name__ == "__main__":
    main()
