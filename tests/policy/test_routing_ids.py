"""Routing-id notices and warnings (docs/live-runtime.md, "Routing ids"): one info line a start for a service that
sends none, a warning per rollout for a partial or a lost coverage, and for the first rollout to get any after
rollouts without them."""

import pytest

from platoon.policy.routing_ids import RoutingIdWatch


def test_a_service_that_sends_none_is_noted_once_a_start_for_training_and_evaluation_together():
    watch = RoutingIdWatch("train")
    (first,) = watch.rollout_ended("r0", calls=3, present=0)
    assert first == ("info", "the model service sends no routing ids, as expected for a dense model (a "
                             "mixture-of-experts model's would mean no rollout routing replay, R3)")
    assert all(watch.rollout_ended(f"r{i}", calls=2, present=0) == [] for i in range(1, 50))
    assert RoutingIdWatch("eval", watch.told).rollout_ended("e0", calls=1, present=0) == []  # the same start
    assert len(RoutingIdWatch("eval").rollout_ended("e0", calls=1, present=0)) == 1  # a start of its own
    assert watch.metrics() == {"train/rollout_worker_routing_id_coverage": 0.0}
    assert watch.metrics() == {}  # nothing since the last read


def test_the_first_rollout_with_ids_after_some_without_names_the_first_three():
    watch = RoutingIdWatch("eval")
    for i in range(5):
        watch.rollout_ended(f"r{i}", calls=1, present=0)
    ((level, warning),) = watch.rollout_ended("r5", calls=2, present=2)
    assert level == "warning"
    assert warning.startswith("evaluation r5 is the first to get routing ids") and "after 5 without them" in warning
    assert "(r0, r1, r2 and 2 more)" in warning
    assert watch.rollout_ended("r6", calls=2, present=2) == []
    assert watch.metrics() == {"eval/rollout_worker_routing_id_coverage": pytest.approx(4 / 9)}


def test_partial_coverage_and_none_after_some_are_warned_about_for_each_rollout():
    watch = RoutingIdWatch("train")
    assert watch.rollout_ended("a", calls=2, present=2) == []
    for name in ("b", "c"):
        ((level, warning),) = watch.rollout_ended(name, calls=4, present=1)
        assert level == "warning"
        assert f"{name} got routing ids for 1 of its 4 model calls" in warning
    for name in ("d", "e"):
        ((level, warning),) = watch.rollout_ended(name, calls=3, present=0)
        assert level == "warning"
        assert f"{name} got no routing id for its 3 model calls, after the service had sent some" in warning


def test_a_first_rollout_with_partial_ids_gets_both_warnings_and_one_without_calls_counts_nothing():
    watch = RoutingIdWatch("train")
    assert watch.rollout_ended("idle", calls=0, present=0) == []
    assert watch.without == 0 and watch.metrics() == {}
    watch.rollout_ended("r0", calls=1, present=0)
    warnings = watch.rollout_ended("r1", calls=2, present=1)
    assert [(level, w.split(" ")[2]) for level, w in warnings] == [("warning", "is"), ("warning", "got")]
    with pytest.raises(ValueError):
        watch.rollout_ended("bad", calls=1, present=2)
