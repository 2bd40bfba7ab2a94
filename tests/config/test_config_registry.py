"""The component registry: name rules, reserved names, one registration per name, module:Class imports, and the
refusal of an extension whose requirement on platoon excludes the running version."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from platoon import __version__
from platoon.config import registry
from platoon.config.errors import ExtensionError


class Sampler:
    def next(self, ctx): ...  # noqa: ANN001, D102


@pytest.fixture
def clean() -> Iterator[list[tuple[str, str]]]:
    """Names registered by a test, forgotten afterwards."""
    added: list[tuple[str, str]] = []
    yield added
    for kind, name in added:
        registry.unregister(kind, name)


@pytest.mark.parametrize("name", ["has space", "mod:Cls", "at@entry", "", "tab\there"])
def test_a_name_has_no_whitespace_colon_or_at(name: str) -> None:
    with pytest.raises(ValueError, match="must be non-empty, without whitespace"):
        registry.register("task_sampler", name, Sampler)


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("task_sampler", "auto"),
        ("task_sampler", "Pass-Rate"),
        ("task_sampler", "PASS_RATE"),
        ("task_sampler", "Weighted"),
        ("group_admission", "Informative"),
        ("group_admission", "ALL"),
    ],
)
def test_core_names_are_reserved_after_casefolding(kind: str, name: str) -> None:
    with pytest.raises(ValueError, match=f"{kind} name '{name}' is core's; choose another name"):
        registry.register(kind, name, Sampler)


def test_a_core_name_of_another_kind_is_free(clean: list[tuple[str, str]]) -> None:
    registry.register("group_admission", "uniform", Sampler)
    clean.append(("group_admission", "uniform"))
    assert registry.lookup("group_admission", "uniform") is Sampler


def test_a_name_registers_once(clean: list[tuple[str, str]]) -> None:
    @registry.task_sampler("reg_once")
    class First(Sampler):
        pass

    clean.append(("task_sampler", "reg_once"))
    with pytest.raises(ValueError, match="task_sampler 'reg_once' is registered twice"):
        registry.task_sampler("reg_once")(Sampler)
    assert registry.lookup("task_sampler", "reg_once") is First
    assert registry.is_registered("task_sampler", "reg_once")
    assert "reg_once" in registry.registered_names("task_sampler", load=False)


def test_decorating_a_function_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="decorates a class, not function"):
        registry.task_sampler("reg_fn")(lambda: None)


def test_options_and_check_are_attached(clean: list[tuple[str, str]]) -> None:
    def check(options, ctx):  # noqa: ANN001, ANN202
        return None

    @registry.group_admission("reg_opts", options=dict, check=check)
    class Rule:
        pass

    clean.append(("group_admission", "reg_opts"))
    assert Rule.options_schema is dict and Rule.check is check


def test_unknown_name_message_suggests_and_names_core() -> None:
    assert registry.unknown_name_message("task_sampler", "uniformm", known=[]) == (
        "unknown task sampler 'uniformm'; did you mean 'uniform'? Core's: auto, weighted, uniform and pass_rate."
    )
    assert registry.unknown_name_message("group_admission", "zzz", known=[]) == (
        "unknown group admission 'zzz'. Core's: all and informative."
    )


def test_import_ref(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "reg_mod_ok.py").write_text("class Outer:\n    class Inner:\n        pass\n")
    (tmp_path / "reg_mod_bad.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert registry.import_ref("reg_mod_ok:Outer.Inner").__qualname__ == "Outer.Inner"
        with pytest.raises(
            ExtensionError, match=r"cannot import 'reg_mod_bad' for 'reg_mod_bad:X': RuntimeError: boom"
        ):
            registry.import_ref("reg_mod_bad:X")
        with pytest.raises(
            ExtensionError, match=r"'reg_mod_ok' has no 'Missing' \(for 'reg_mod_ok:Missing'\)"
        ):
            registry.import_ref("reg_mod_ok:Missing")
        with pytest.raises(ExtensionError, match="cannot import 'reg_no_such_mod'.*ModuleNotFoundError"):
            registry.import_ref("reg_no_such_mod:X")
        for bad in ("no_colon", ":Cls", "mod:"):
            with pytest.raises(ExtensionError, match="is not module:Class"):
                registry.import_ref(bad)
    finally:
        for name in ("reg_mod_ok", "reg_mod_bad"):
            sys.modules.pop(name, None)


# --- extension requirements ------------------------------------------------------------------------------------


def test_an_extension_that_excludes_this_platoon_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLATOON_IGNORE_EXTENSION_REQUIREMENTS", raising=False)
    with pytest.raises(ExtensionError) as info:
        registry.check_extension_requirement(
            "platoon-textcraft", "0.2.0", ["platoon[ors]<0.4,>=0.3; extra == 'platoon'"], extras=["platoon"]
        )
    assert str(info.value) == (
        f'platoon-textcraft 0.2.0 requires platoon[ors]<0.4,>=0.3; extra == "platoon", but platoon {__version__} '
        "is running: install a version of platoon-textcraft that supports this platoon, or set "
        "PLATOON_IGNORE_EXTENSION_REQUIREMENTS=1 to load it anyway"
    )


def test_a_requirement_without_a_marker_applies_without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLATOON_IGNORE_EXTENSION_REQUIREMENTS", raising=False)
    with pytest.raises(ExtensionError, match="platoon-old 1.0 requires platoon<0.4"):
        registry.check_extension_requirement("platoon-old", "1.0", ["platoon<0.4"], extras=[])


def test_requirements_that_admit_this_platoon_or_do_not_apply_pass() -> None:
    check = registry.check_extension_requirement
    check("platoon-textcraft", "0.3.0", ["platoon[ors]<0.5,>=0.4; extra == 'platoon'"], extras=["platoon"])
    check("ext", "1", ["platoon"], extras=[])  # no range: nothing to refuse
    check("ext", "1", ["numpy<1", "not a requirement !!"], extras=[])
    check("ext", "1", ["platoon<0.4; extra == 'other'"], extras=["platoon"])  # an extra it does not provide


@pytest.mark.parametrize("flag", ["1", "true", " YES ", "on"])
def test_the_ignore_flag_loads_it_with_a_warning(
    flag: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PLATOON_IGNORE_EXTENSION_REQUIREMENTS", flag)
    with caplog.at_level(logging.WARNING, logger="platoon.config.registry"):
        registry.check_extension_requirement("platoon-textcraft", "0.2.0", ["platoon>=0.3,<0.4"], extras=[])
    [record] = caplog.records
    assert "platoon-textcraft 0.2.0 requires platoon<0.4,>=0.3" in record.getMessage()
    assert record.getMessage().endswith(
        "loading it anyway, since PLATOON_IGNORE_EXTENSION_REQUIREMENTS is set"
    )


@pytest.mark.parametrize("flag", ["0", "", "no", "false"])
def test_other_flag_values_still_refuse(flag: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATOON_IGNORE_EXTENSION_REQUIREMENTS", flag)
    with pytest.raises(ExtensionError):
        registry.check_extension_requirement("x", "1", ["platoon>=0.3,<0.4"], extras=[])
