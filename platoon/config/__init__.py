"""The run config: its schema, the one-report loader (exit 78), and what a config means for a run.

``load_config(path, overrides)`` reads, overrides and validates a config and raises one ``ConfigError`` with every
problem; ``resolve_components(cfg)`` resolves its task samplers and admission rules before a run starts (the
records lock.json keeps). The policy layer and the runtimes read a run's effective settings through the helpers
re-exported here (``is_rule_mode``, ``entry_sampler``, ``max_concurrent_rollouts``, ...).
"""

from platoon.config.config_warnings import config_warnings
from platoon.config.effective import (
    effective_group_size,
    entry_admission,
    entry_max_staleness,
    entry_sampler,
    entry_sim,
    entry_workflow,
    group_size,
    is_rule_mode,
    max_concurrent_rollouts,
    run_sampler,
    step_cap,
    straggler_policy,
)
from platoon.config.errors import EXIT_CONFIG, EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, ConfigError, ExtensionError
from platoon.config.loader import (
    check_config,
    config_from_lock,
    config_problems,
    load_config,
    load_config_warnings,
    to_yaml,
)
from platoon.config.lock_records import ComponentRecord
from platoon.config.models import (
    EnvironmentConfig,
    ModelConfig,
    OptimizerConfig,
    RefillConfig,
    RunConfig,
    SimConfig,
    TrainConfig,
    WorkflowConfig,
)
from platoon.config.resolve import AdmissionCheckContext, SamplerCheckContext, resolve_components
from platoon.config.steps import event_interval, planned_steps, steps_per_epoch

__all__ = [
    "EXIT_CONFIG",
    "EXIT_OK",
    "EXIT_RUNTIME",
    "EXIT_USAGE",
    "AdmissionCheckContext",
    "ComponentRecord",
    "ConfigError",
    "EnvironmentConfig",
    "ExtensionError",
    "ModelConfig",
    "entry_workflow",
    "event_interval",
    "group_size",
    "planned_steps",
    "steps_per_epoch",
    "straggler_policy",
    "OptimizerConfig",
    "RefillConfig",
    "RunConfig",
    "SamplerCheckContext",
    "SimConfig",
    "TrainConfig",
    "WorkflowConfig",
    "check_config",
    "config_from_lock",
    "config_problems",
    "config_warnings",
    "effective_group_size",
    "entry_admission",
    "entry_max_staleness",
    "entry_sampler",
    "entry_sim",
    "is_rule_mode",
    "load_config",
    "load_config_warnings",
    "max_concurrent_rollouts",
    "resolve_components",
    "run_sampler",
    "step_cap",
    "to_yaml",
]
