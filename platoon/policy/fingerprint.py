"""The sampling fingerprint a dispatch state carries, and what changed between two of them.

A resume goes on drawing from a saved position and saved sampler states; if the config behind them changed (another
sampler, other entries, other tasks, another seed, another admission rule) the draws that follow are not the ones
the run would have made. The resume still goes on — the user may mean it — but warns with one line per change and
records them in ``lock.json`` under ``sampling_changed``.

Keys are written only for what can change draws (docs/run-directory.md): each entry's seed only where seeds matter
(the run hands slots by weight, or some sampler is not uniform), ``train.seed`` only where a sampler reads decision
keys (one not of the static core), an entry's own sampler only when it is not ``uniform``, the run sampler's options
only for a sampler that takes them, ``admission`` only in rule mode.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from platoon.policy.dispatcher import Dispatcher

STATIC_CORE = ("auto", "weighted", "uniform")


def sampling_fingerprint(d: Dispatcher) -> dict[str, Any]:
    """The fingerprint of what decides ``d``'s draws (JSON-safe)."""
    records = d.samplers.component_records()
    run_sampler = d.samplers.run_name
    entry_samplers: dict[str, tuple[str, Any]] = {}
    for rec in records[1:]:
        for label in rec["environments"]:
            entry_samplers[label] = (rec["ref"], rec["options"][label])
    entries = d.pool.entries
    seeds_matter = (run_sampler == "weighted" or (run_sampler == "auto" and len(entries) > 1)
                    or run_sampler not in (*STATIC_CORE, "pass_rate")
                    or any(ref != "uniform" for ref, _ in entry_samplers.values()))
    fp: dict[str, Any] = {"task_sampler": run_sampler, "batch_size": d.config.batch_size,
                          "label_by": d.pool.label_column, "order": list(entries), "entries": {}}
    for label, info in entries.items():
        ids = "\n".join(info.task_ids).encode()
        entry: dict[str, Any] = {"weight": info.weight, "tasks": len(info.task_ids),
                                 "pool": hashlib.sha256(ids).hexdigest()[:16]}
        if seeds_matter:
            entry["seed"] = info.seed
        ref, options = entry_samplers.get(label, ("uniform", {}))
        if ref != "uniform":
            entry["task_sampler"], entry["task_sampler_options"] = ref, options
        fp["entries"][label] = entry
    if run_sampler not in STATIC_CORE or any(ref != "uniform" for ref, _ in entry_samplers.values()):
        fp["seed"] = d.samplers.seed  # train.seed: the decision keys of every sampler but the static core's read it
    if run_sampler not in STATIC_CORE:
        fp["task_sampler_options"] = records[0]["options"]["train"]
    if d.admission is not None:
        rules: dict[str, Any] = {}
        for rec in d.admission.records():
            for label in rec["environments"]:
                opts = rec["options"].get("train", rec["options"].get(label))
                rules[label] = {"rule": rec["ref"], "options": opts}
        fp["admission"] = {"max_groups_per_step": d.config.max_groups_per_step, "entries": rules}
    return fp


def fingerprint_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """One line per change from ``old`` to ``new`` (none when ``old`` is missing: a state that kept none)."""
    if not old:
        return []
    lines = [f"train.{key}: {old.get(key)} -> {new.get(key)}"
             for key in ("task_sampler", "batch_size", "label_by", "task_sampler_options")
             if old.get(key) != new.get(key)]
    if "seed" in old and "seed" in new and old["seed"] != new["seed"]:  # written only where it matters
        lines.append(f"train.seed: {old['seed']} -> {new['seed']}")
    old_entries, new_entries = old.get("entries", {}), new.get("entries", {})
    lines += [f"environments[{e}] left the run" for e in old_entries if e not in new_entries]
    lines += [f"environments[{e}] joined the run" for e in new_entries if e not in old_entries]
    for e in (e for e in new_entries if e in old_entries):
        a, b = old_entries[e], new_entries[e]
        if a.get("tasks") != b.get("tasks") or a.get("pool") != b.get("pool"):
            same = " (as many, but others)" if a.get("tasks") == b.get("tasks") else ""
            lines.append(f"environments[{e}]: its training tasks, {a.get('tasks')} -> {b.get('tasks')}{same}")
        for key in ("weight", "seed", "task_sampler", "task_sampler_options"):
            if key == "seed" and not ("seed" in a and "seed" in b):
                continue  # a seed is written only where it matters: one side's draws do not read it
            if a.get(key) != b.get(key):
                lines.append(f"environments[{e}].{key}: {a.get(key)} -> {b.get(key)}")
    if list(old_entries) != list(new_entries) and set(old_entries) == set(new_entries):
        lines.append(f"the entries' order: {list(old_entries)} -> {list(new_entries)}")
    everyone_all: dict[str, Any] = {"entries": {}}
    a_rules, b_rules = old.get("admission", everyone_all), new.get("admission", everyone_all)
    for e in new_entries:
        ra = a_rules["entries"].get(e, {"rule": "all", "options": {}})
        rb = b_rules["entries"].get(e, {"rule": "all", "options": {}})
        if ra != rb:
            lines.append(f"environments[{e}].group_admission: {ra['rule']} {ra['options']} -> "
                         f"{rb['rule']} {rb['options']}")
    if "admission" in old and "admission" in new and (
            old["admission"]["max_groups_per_step"] != new["admission"]["max_groups_per_step"]):
        lines.append(f"train.refill.max_groups_per_step: {old['admission']['max_groups_per_step']} -> "
                     f"{new['admission']['max_groups_per_step']}")
    return lines
