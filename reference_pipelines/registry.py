"""Pipelines by name: their config class and their `run`."""

from __future__ import annotations

import importlib
from typing import Any, Iterable

from rlbench.config.core import ConfigError, load_config
from reference_pipelines import PIPELINES

_CONFIGS = {"grpo": "GRPOConfig", "ppo": "PPOConfig", "dpo": "DPOConfig", "sft": "SFTConfig"}


def pipeline_names() -> list[str]:
    return list(PIPELINES)


def _module(name: str):
    if name not in PIPELINES:
        raise ConfigError(f"unknown pipeline '{name}'; allowed: {', '.join(PIPELINES)}")
    return importlib.import_module(PIPELINES[name])


def config_class(name: str) -> type:
    return getattr(_module(name), _CONFIGS[name])


def load_pipeline_config(name: str, overrides: Iterable[str] = (), config_file: str | None = None) -> Any:
    """Defaults of the pipeline, then `config_file` (YAML, e.g. ray_configs/grpo-actors.yaml), then
    `key=value` overrides."""
    return load_config(config_class(name), config_file, overrides=overrides,
                       source_name=config_file or f"pipeline {name}")


def run_pipeline(name: str, cfg: Any) -> dict[str, Any]:
    return _module(name).run(cfg)
