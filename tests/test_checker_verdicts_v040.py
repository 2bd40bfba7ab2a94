"""Our contract checkers give platoon 0.4.0's verdicts on the same components: pass or fail, and the checks that fail.

The components are ``tests/fixtures/v040/checker_components.py``; 0.4.0's verdicts on them were recorded, by 0.4.0
itself, into ``tests/fixtures/v040/checker_verdicts.json`` (``record_checker_verdicts.py`` says how).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from platoon._checks.admission import CHECKS as RULE_CHECKS
from platoon._checks.samplers import CHECKS as SAMPLER_CHECKS
from platoon.testing import check_group_admission, check_task_sampler

FIXTURES = Path(__file__).parent / "fixtures" / "v040"
VERDICTS = json.loads((FIXTURES / "checker_verdicts.json").read_text())
SYSPATH_MODULE = "syspath_only_components"


@pytest.fixture(autouse=True)
def components_importable(monkeypatch):
    """The components' folder on sys.path and on PYTHONPATH, as 0.4.0's run had it: the replays import them."""

    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")]))


def failed_checks(message: str, names: tuple[str, ...]) -> list[str]:
    found = re.findall(r"^\s*-?\s*([a-z-]+)(?: \[[^\]]*\])?:", message, flags=re.M)
    return list(dict.fromkeys(name for name in found if name in names))


def our_verdict(checker, target, kwargs: dict, names: tuple[str, ...]) -> dict:
    try:
        checker(target, **kwargs)
    except AssertionError as exc:
        return {"passed": False, "failed": failed_checks(str(exc), names), "message": str(exc)}
    return {"passed": True, "failed": [], "message": ""}


def target_of(spec: str):
    import checker_components

    return spec if ":" in spec else getattr(checker_components, spec)


def cases(kind: str) -> list:
    return [pytest.param(name, case, id=name) for name, case in VERDICTS[kind].items()]


def syspath_only(tmp_path, monkeypatch) -> None:
    """A module that only ``sys.path.insert`` makes importable, never the environment's PYTHONPATH."""

    (tmp_path / f"{SYSPATH_MODULE}.py").write_text("from checker_components import ByVerdict, Rotating  # noqa: F401\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, SYSPATH_MODULE, raising=False)


@pytest.mark.parametrize(("name", "case"), cases("task_samplers"))
def test_check_task_sampler_agrees_with_040(name, case, tmp_path, monkeypatch):
    if case["target"].startswith(SYSPATH_MODULE):
        syspath_only(tmp_path, monkeypatch)
    ours = our_verdict(check_task_sampler, target_of(case["target"]), case["kwargs"], SAMPLER_CHECKS)
    assert (ours["passed"], ours["failed"]) == (case["passed"], case["failed"]), ours["message"]


@pytest.mark.parametrize(("name", "case"), cases("group_admissions"))
def test_check_group_admission_agrees_with_040(name, case, tmp_path, monkeypatch):
    if case["target"].startswith(SYSPATH_MODULE):
        syspath_only(tmp_path, monkeypatch)
    ours = our_verdict(check_group_admission, target_of(case["target"]), case["kwargs"], RULE_CHECKS)
    assert (ours["passed"], ours["failed"]) == (case["passed"], case["failed"]), ours["message"]


def test_the_syspath_only_module_fails_only_in_the_replay(tmp_path, monkeypatch):
    """What fails it is the replay's import, not the module: given as a class, the same sampler passes."""

    syspath_only(tmp_path, monkeypatch)
    message = our_verdict(check_task_sampler, f"{SYSPATH_MODULE}:Rotating", {"levels": ["run"], "budget_ms": None},
                          SAMPLER_CHECKS)["message"]
    assert SYSPATH_MODULE in message and "ModuleNotFoundError" in message
    import syspath_only_components

    check_task_sampler(syspath_only_components.Rotating, levels=["run"], budget_ms=None)
