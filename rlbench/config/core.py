"""Load a dataclass schema from YAML and `key=value` overrides, failing early and clearly.

Every error names the key, the value and what is allowed, before any work starts: a benchmark run
that dies twenty minutes in on a typo wastes a cluster slot.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from pathlib import Path
from typing import Any, Iterable, Mapping, TypeVar

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf import errors as oc_errors

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value or key is wrong; the message says which and what is allowed."""


def _allowed_keys(schema: type, dotted: str) -> list[str]:
    """Field names of the dataclass reached by following `dotted` from `schema`."""
    cls: Any = schema
    for part in [p for p in dotted.split(".") if p][:-1]:
        if not dataclasses.is_dataclass(cls):
            return []
        hints = typing.get_type_hints(cls)
        if part not in hints:
            return []
        cls = _unwrap_optional(hints[part])
    if not dataclasses.is_dataclass(cls):
        return []
    return [f.name for f in dataclasses.fields(cls)]


def _unwrap_optional(tp: Any) -> Any:
    args = typing.get_args(tp)
    if typing.get_origin(tp) is typing.Union and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else tp
    return tp


def _explain(exc: oc_errors.OmegaConfBaseException, schema: type, source: str) -> ConfigError:
    key = getattr(exc, "full_key", None) or getattr(exc, "key", None) or "?"
    key = str(key)
    if isinstance(exc, (oc_errors.ConfigKeyError, oc_errors.ConfigAttributeError)):
        allowed = _allowed_keys(schema, key)
        hint = f"; allowed keys here: {', '.join(allowed)}" if allowed else ""
        return ConfigError(f"{source}: unknown key '{key}'{hint}")
    if isinstance(exc, oc_errors.MissingMandatoryValue):
        return ConfigError(f"{source}: key '{key}' is required but has no value")
    tp = _field_type(schema, key)
    value = getattr(exc, "value", None)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        allowed = ", ".join(m.value for m in tp)
        return ConfigError(f"{source}: key '{key}': value '{value}' is not allowed; allowed: {allowed}")
    if tp is not None:
        name = getattr(tp, "__name__", str(tp))
        return ConfigError(f"{source}: key '{key}': value '{value}' is not a valid {name}")
    msg = str(exc).splitlines()[0]
    return ConfigError(f"{source}: key '{key}': {msg}")


def parse_overrides(overrides: Iterable[str], schema: type | None = None) -> DictConfig:
    """`a.b=1` strings into a config; anything without `=` is refused by name. With a schema, a
    value that YAML reads as null (`agent=null`) stays the string where the field is a plain str
    (or a list of str): `null` is the name of an agent, not a missing value."""
    items = list(overrides or [])
    for item in items:
        if "=" not in item or item.startswith("="):
            raise ConfigError(f"override '{item}' is not of the form key=value")
    try:
        cfg = OmegaConf.from_dotlist(items)
    except oc_errors.OmegaConfBaseException as exc:  # pragma: no cover - grammar errors
        raise ConfigError(f"overrides: {exc}") from exc
    if schema is not None:
        for item in items:
            key, _, raw = item.partition("=")
            kind = _field_type(schema, key.strip())
            value = OmegaConf.select(cfg, key.strip())
            if kind is str and value is None:
                OmegaConf.update(cfg, key.strip(), raw.strip(), merge=False)
            elif kind == list[str] and isinstance(value, ListConfig) and any(v is None for v in value):
                OmegaConf.update(cfg, key.strip(), [str(v) if v is not None else "null" for v in value], merge=False)
    return cfg


def _field_type(schema: type, dotted: str) -> Any:
    kind: Any = schema
    for part in dotted.split("."):
        if not dataclasses.is_dataclass(kind):
            return None
        hints = typing.get_type_hints(kind)
        if part not in hints:
            return None
        kind = hints[part]
    return kind


def load_config(
    schema: type[T],
    *sources: Mapping[str, Any] | Path | str | None,
    overrides: Iterable[str] = (),
    source_name: str | None = None,
) -> T:
    """Merge YAML files / mappings and overrides onto `schema` and return a checked dataclass.

    Every dataclass in the result that has a `validate()` method is checked after the merge, so
    range checks written there apply to files and command lines alike.
    """
    base = OmegaConf.structured(schema)
    label = source_name or schema.__name__
    merged: Any = base
    for src in sources:
        if src is None:
            continue
        if isinstance(src, (str, Path)):
            path = Path(src)
            label = source_name or str(path)
            if not path.exists():
                raise ConfigError(f"config file not found: {path}")
            try:
                data = OmegaConf.load(path)
            except Exception as exc:  # yaml errors come in many types
                raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        else:
            data = OmegaConf.create(dict(src))
        try:
            merged = OmegaConf.merge(merged, data)
        except oc_errors.OmegaConfBaseException as exc:
            raise _explain(exc, schema, label) from exc
    if overrides:
        try:
            merged = OmegaConf.merge(merged, parse_overrides(overrides, schema))
        except oc_errors.OmegaConfBaseException as exc:
            raise _explain(exc, schema, "override") from exc
    try:
        obj = OmegaConf.to_object(merged)
    except oc_errors.OmegaConfBaseException as exc:
        raise _explain(exc, schema, label) from exc
    try:
        _validate_tree(obj)
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc}") from None
    return typing.cast(T, obj)


def _validate_tree(obj: Any) -> None:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _validate_tree(getattr(obj, f.name))
        hook = getattr(obj, "validate", None)
        if callable(hook):
            hook()


def to_dict(obj: Any) -> dict[str, Any]:
    """A plain, JSON-ready dict of a schema dataclass (enums as their values)."""
    cfg = OmegaConf.structured(obj)
    return typing.cast(dict, OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))


def check(cond: bool, key: str, value: Any, allowed: str) -> None:
    """Range checks for `validate()`: same message shape as the type checks."""
    if not cond:
        raise ConfigError(f"key '{key}': value '{value}' is not allowed; allowed: {allowed}")
