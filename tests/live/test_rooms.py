"""platoon/live in rooms: at most ten top-level entries, and the modules' paths from before the rooms still import.

A module that moved into a room (``platoon.live.workflow`` -> ``platoon.live.rollouts.workflow``) imports under its
old path as the very same module object, keeping its own name and spec, so that code written against the old path
(an extension, a user's workflow, a patch by string) sees and changes what the backend runs.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import platoon.live as live

LIVE = Path(live.__file__).parent
MAX_ROOMS = 10


def top_level_entries(folder: Path) -> list[str]:
    """What issue 40 counts: the modules and folders at the top of ``folder``, less ``__init__.py`` and caches."""
    return sorted(p.name for p in folder.iterdir()
                  if (p.suffix == ".py" or p.is_dir()) and p.name not in ("__init__.py", "__pycache__"))


def test_live_has_at_most_ten_rooms():
    entries = top_level_entries(LIVE)
    assert len(entries) <= MAX_ROOMS, entries


def test_the_count_sees_a_module_added_at_the_top(tmp_path):
    for name in [*(f"m{i}.py" for i in range(MAX_ROOMS)), "__init__.py", "notes.txt"]:
        (tmp_path / name).write_text("")
    (tmp_path / "__pycache__").mkdir()
    assert len(top_level_entries(tmp_path)) == MAX_ROOMS
    (tmp_path / "room").mkdir()
    assert len(top_level_entries(tmp_path)) == MAX_ROOMS + 1


@pytest.mark.parametrize("old", sorted(live._MOVED))
def test_an_old_path_imports_as_the_module_of_its_room(old):
    new = live._MOVED[old]
    assert (LIVE.parent.parent / (new.replace(".", "/") + ".py")).is_file()
    assert not (LIVE.parent.parent / (old.replace(".", "/") + ".py")).exists()
    module = importlib.import_module(old)
    assert module is importlib.import_module(new) is sys.modules[old]
    assert module.__name__ == module.__spec__.name == new


def test_an_old_path_imported_first_in_a_fresh_process():
    # the old path imported before the new one (as platoon/live/resume.py does): one module, its own spec
    code = ("from platoon.live.workflow import GroupRolloutWorkflow\n"
            "import platoon.live.rollouts.workflow as w, platoon.live.workflow as old\n"
            "print(old is w, w.__spec__.name, GroupRolloutWorkflow.__module__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "platoon.live.rollouts.workflow", "platoon.live.rollouts.workflow"]


def test_a_name_that_never_was_a_module_is_still_missing():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("platoon.live.no_such_room")


def test_an_old_module_imports_from_the_package_by_name():
    # ``from platoon.live import command``, as the TextCraft extension's tests wrote it before the rooms
    from platoon.live import command, toolchain
    from platoon.live.agent import toolchain as room_toolchain
    from platoon.live.launch import command as room_command

    assert command is room_command and toolchain is room_toolchain
