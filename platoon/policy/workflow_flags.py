"""Workflow class flags: ``runs_rollouts_on_lease`` (rolling starts) and ``gives_verdicts`` (admission rules).

What this module owns: reading the two class flags a training workflow declares, by the rules the dispatcher and
the config check rely on. It reads classes only (``__dict__`` and ``__mro__``); it never instantiates a workflow
and imports nothing from the live runtime, so the base class is passed in or found by name in the MRO.

Rules it keeps (docs/live-runtime.md, docs/group-admission.md):

- ``runs_rollouts_on_lease`` is read by **MRO ownership**, not by plain attribute lookup. A subclass that overrides
  ``arun_episode``, ``_run_group_rollouts`` or ``_run_group_member`` -- in its own body, through a mixin, or down a
  diamond branch -- may run rollouts outside the lease, so it inherits ``True`` only from a class that declared the
  flag *and* already owned that override. Getting this wrong lets more rollouts run than the permits allow.
- ``gives_verdicts`` is read by plain inheritance of the nearest declaration: an override of ``arun_episode`` that
  returns its ``super()``'s output keeps the verdicts, and a class that stops giving them says so with
  ``gives_verdicts = False``. A class of the ``GroupRolloutWorkflow`` family that declares nothing gives them.
- A declared flag must be a bool; anything else is a TypeError naming the class, since reading ``"yes"`` as True or
  as False would both be a guess.
"""

from __future__ import annotations

LEASE_FLAG = "runs_rollouts_on_lease"
VERDICTS_FLAG = "gives_verdicts"
BASE_NAME = "GroupRolloutWorkflow"
LEASE_METHODS = ("arun_episode", "_run_group_rollouts", "_run_group_member")
"""The methods whose override can take a member's rollout off its lease block."""


def find_base(cls: type, name: str = BASE_NAME) -> type | None:
    """The class named ``name`` in ``cls``'s MRO, the one furthest from ``cls`` when several share the name.

    Furthest, because a user's subclass that happens to reuse the name overrides the real base's methods and must
    be judged as a subclass, not taken for the base.
    """
    found = None
    for klass in cls.__mro__:
        if klass.__name__ == name:
            found = klass
    return found


def _declared(klass: type, flag: str) -> tuple[bool, bool]:
    """(whether ``klass``'s own body sets ``flag``, the value it sets). A non-bool value is a TypeError."""
    if flag not in klass.__dict__:
        return False, False
    value = klass.__dict__[flag]
    if not isinstance(value, bool):
        raise TypeError(
            f"{klass.__module__}.{klass.__qualname__}.{flag} must be True or False, got {value!r}"
        )
    return True, value


def _owner(cls: type, method: str) -> type | None:
    """The nearest class in ``cls``'s MRO whose own body defines ``method``."""
    for klass in cls.__mro__:
        if method in klass.__dict__:
            return klass
    return None


def runs_rollouts_on_lease(cls: type, *, base: type | None = None) -> bool:
    """Whether workflow class ``cls`` runs each member's rollout in a block of its group's lease.

    ``base`` is the class whose own methods run members on the lease (the live backend's
    ``GroupRolloutWorkflow``); when None it is found by name in ``cls``'s MRO (``find_base``).

    The rule (docs/live-runtime.md):

    - if ``cls``'s own body sets the flag, that value;
    - else let ``D`` be the nearest class in the MRO whose body sets it (none: False). For each method ``m`` of
      ``LEASE_METHODS`` let ``O`` be the nearest class in the MRO that defines ``m``; if some ``O`` is not ``base``
      and ``D`` is not a subclass of ``O`` (``D`` declared the flag without knowing that override), False;
    - else ``D``'s value.

    So overriding one of the three methods without re-declaring the flag reads False, and a class that declares
    True beside its overrides covers its subclasses that do not override them again.
    """
    if not isinstance(cls, type):
        raise TypeError(f"runs_rollouts_on_lease takes a workflow class, not {type(cls).__name__}")
    if base is None:
        base = find_base(cls)
    own, value = _declared(cls, LEASE_FLAG)
    if own:
        return value
    declarer = None
    for klass in cls.__mro__[1:]:
        has, value = _declared(klass, LEASE_FLAG)
        if has:
            declarer = klass
            break
    if declarer is None:
        return False
    for method in LEASE_METHODS:
        owner = _owner(cls, method)
        if owner is None or owner is base:
            continue
        if not issubclass(declarer, owner):
            return False
    return value


def gives_verdicts(cls: type, *, base: type | None = None) -> bool:
    """Whether workflow class ``cls`` gives each group a verdict (``informative`` may load beside it).

    The nearest declaration of ``gives_verdicts`` in the MRO (the class's own body first) decides; with none, the
    class gives verdicts when it derives from ``base`` (found by name when None), as ``GroupRolloutWorkflow`` does.
    """
    if not isinstance(cls, type):
        raise TypeError(f"gives_verdicts takes a workflow class, not {type(cls).__name__}")
    for klass in cls.__mro__:
        has, value = _declared(klass, VERDICTS_FLAG)
        if has:
            return value
    if base is None:
        base = find_base(cls)
    return base is not None and issubclass(cls, base)
