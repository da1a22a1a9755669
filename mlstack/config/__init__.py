"""Blueprint files -> validated, frozen configuration (the only input the stacks take)."""

from mlstack.config.blueprint import BlueprintConfig, EnvConfig
from mlstack.config.loader import BLUEPRINTS_DIR, DEFAULT_BLUEPRINT, json_schema, load, resolve
from mlstack.config.network import NetworkConfig

__all__ = [
    "BLUEPRINTS_DIR",
    "DEFAULT_BLUEPRINT",
    "BlueprintConfig",
    "EnvConfig",
    "NetworkConfig",
    "json_schema",
    "load",
    "resolve",
]
