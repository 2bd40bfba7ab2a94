"""What a `SamplerSet` writes down: each sampler's record in a dispatch state (format 2's ``samplers``), loading one
back, and ``lock.json``'s task sampler component records.

Rules it keeps (docs/run-directory.md, 6.4.1 and 6.6):
- a record is ``{name, class, decisions, state?}``; ``class`` names a core class by platoon 0.4.0's path
  (``saved_class_ref``) and a record naming it either way loads; ``state`` is left out, with a warning once, when
  ``state_dict`` fails or gives no JSON data (an unsaved state only costs a fresh start on resume);
- a record loads only onto the member it names (same qualified name and class); one that does not fit, or whose
  ``load_state_dict`` raises, is a warning and a fresh start, never an error;
- component records name each class by ``module:Qualname`` and carry the options as parsed, JSON-safe; entries that
  share a reference and a class share one record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from platoon.policy.samplers.answers import check_json, options_json
from platoon.policy.samplers.core import class_ref, saved_class_ref, saved_class_refs
from platoon.policy.samplers.member import Member


def member_record(m: Member) -> dict[str, Any]:
    """``m``'s record in the dispatch state's ``samplers``."""
    rec: dict[str, Any] = {"name": m.name, "class": saved_class_ref(m.cls), "decisions": m.decisions}
    try:
        state = m.sampler.state_dict()
        check_json(state)
        rec["state"] = json.loads(json.dumps(state, allow_nan=False))
    except Exception as exc:  # noqa: BLE001 - an unsaved state only costs a fresh start on resume
        m.warn_once("state", f"state_dict gave no JSON state ({type(exc).__name__}: {exc}); not saved")
    return rec


def load_member_record(m: Member, rec: Any, warnings: list[str]) -> bool:
    """Load ``rec`` onto ``m`` (its sampler's state; the caller sets the count); False, with a line in ``warnings``
    where it does not fit or does not load (then ``m``'s sampler is fresh), and False for no record."""
    if rec is None:
        return False
    ok = (
        isinstance(rec, Mapping)
        and rec.get("name") == m.name
        and rec.get("class") in saved_class_refs(m.cls)
        and isinstance(rec.get("decisions"), int)
        and not isinstance(rec.get("decisions"), bool)
        and rec["decisions"] >= 0
        and "state" in rec
    )
    if not ok:
        saved = (rec.get("name"), rec.get("class")) if isinstance(rec, Mapping) else rec
        warnings.append(f"task sampler {m.name}: the checkpoint's record {saved!r} does not fit; starting afresh")
        return False
    try:
        m.sampler.load_state_dict(rec["state"])
    except Exception as exc:  # noqa: BLE001
        warnings.append(
            f"task sampler {m.name}: load_state_dict raised {type(exc).__name__}: {exc}; starting it afresh"
        )
        m.sampler = m.fresh()
        return False
    return True


def component_records(run: Member, entries: Mapping[str, Member], labels: list[str]) -> list[dict[str, Any]]:
    """lock.json's task sampler components (6.6) of a set whose run sampler is ``run`` over entries ``labels`` and
    whose entries' own are ``entries``, without the distribution fields the run directory adds."""
    records = [
        {
            "kind": "task_sampler",
            "ref": run.name,
            "resolved": class_ref(run.cls),
            "level": "run",
            "environments": list(labels),
            "options": {"train": options_json(run.options)},
        }
    ]
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for label, m in entries.items():
        ref = m.name.rsplit("@", 1)[0]
        rec = groups.setdefault(
            (ref, class_ref(m.cls)),
            {
                "kind": "task_sampler",
                "ref": ref,
                "resolved": class_ref(m.cls),
                "level": "entry",
                "environments": [],
                "options": {},
            },
        )
        rec["environments"].append(label)
        rec["options"][label] = options_json(m.options)
    return records + list(groups.values())
