"""Structured configuration: dataclass schemas, loaded and overridden through OmegaConf."""

from rlbench.config.core import ConfigError, load_config, parse_overrides

__all__ = ["ConfigError", "load_config", "parse_overrides"]
