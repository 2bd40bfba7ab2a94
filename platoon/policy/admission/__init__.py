"""Group admission: whether a settled training group counts toward the batch (experimental; docs/group-admission.md).

The package is read through this one name, ``platoon.policy.admission``; its modules hold one idea each:

- ``rules``: the verdict (``Admission``, ``accept_answer``), the rule API (``AdmissionRule``, ``GroupAdmission``,
  ``AdmissionSetup``, ``AdmissionCheckContext``), a rule as the layer receives it (``ResolvedRule``) and the
  built-ins ``all`` and ``informative`` (``CORE_RULES``);
- ``rule_set``: ``AdmissionSet``, which the dispatcher asks at each settle, with its counts, warnings and records
  (``options_json``); and ``step_cap``, ``carries_datums``.

A rule by name or ``module:Class`` is found above this layer (``platoon.components.admission``: imports, entry
points), which hands ``AdmissionSet`` the classes and their parsed options.

Rules it keeps: a module here imports only the ones listed above it; and each public class is named by this
package's path (``platoon.policy.admission:Informative``), the path ``lock.json`` records for a rule
(docs/run-directory.md) and the one a ``module:Class`` reference uses, whichever module defines it.
"""

from platoon.policy.admission.rule_set import AdmissionSet, carries_datums, options_json, step_cap
from platoon.policy.admission.rules import (
    ADMITTED,
    CORE_RULES,
    FAILED,
    MAX_REASON_LENGTH,
    Admission,
    AdmissionCheckContext,
    AdmissionRule,
    AdmissionSetup,
    AdmitAll,
    GroupAdmission,
    Informative,
    ResolvedRule,
    accept_answer,
)

for _cls in (Admission, AdmissionRule, AdmissionSet, AdmissionSetup, AdmitAll, GroupAdmission, Informative):
    _cls.__module__ = __name__
del _cls

__all__ = [
    "ADMITTED",
    "CORE_RULES",
    "FAILED",
    "MAX_REASON_LENGTH",
    "Admission",
    "AdmissionCheckContext",
    "AdmissionRule",
    "AdmissionSet",
    "AdmissionSetup",
    "AdmitAll",
    "GroupAdmission",
    "Informative",
    "ResolvedRule",
    "accept_answer",
    "carries_datums",
    "options_json",
    "step_cap",
]
