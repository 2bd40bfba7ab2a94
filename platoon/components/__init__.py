"""Plug-in components resolved for the policy layer: task samplers and admission rules by name or ``module:Class``.

Why a package of its own, between ``platoon.policy`` and ``platoon.runs`` (rank 1.5 in ``tests/test_layering.py``):
resolution needs both the policy layer's core classes (``CORE_SAMPLER_CLASSES``, ``CORE_RULES``, the sets it builds)
and the config layer's plug-in loader (``platoon.config.registry``: imports, entry points, environment variables).
The config layer (rank 0) may not import the policy layer, and the sans-I/O policy layer may not load plug-ins; the
run directory (``platoon.runs``) is about writing a run, not about finding its components. So the one place that
turns a config's references into classes and parsed options sits just above the policy, and the policy receives
resolved objects (``SamplerSpec``, ``ResolvedRule``) only.

Modules: ``samplers`` (``resolve_task_sampler``, ``parse_options``, ``resolve_samplers``, ``sampler_set``),
``admission`` (``resolve_group_admission``, ``parse_rule_options``, ``resolve_rules``, ``admission_set``) and
``assemble`` (``build_policy``: resolve, then ``platoon.policy.assemble_policy``). Messages are the ones the
policy layer raised before resolution moved here, word for word.
"""

from platoon.components.admission import (
    admission_set,
    parse_rule_options,
    resolve_group_admission,
    resolve_rules,
)
from platoon.components.assemble import build_policy
from platoon.components.samplers import (
    parse_options,
    resolve_samplers,
    resolve_task_sampler,
    sampler_set,
    validate_sampler_class,
)

__all__ = [
    "admission_set",
    "build_policy",
    "parse_options",
    "parse_rule_options",
    "resolve_group_admission",
    "resolve_rules",
    "resolve_samplers",
    "resolve_task_sampler",
    "sampler_set",
    "validate_sampler_class",
]
