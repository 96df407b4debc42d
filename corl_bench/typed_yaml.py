"""YAML values -> frozen dataclasses: the generic loading machinery behind :mod:`corl_bench.config`.

``_build(cls, mapping, prefix)`` builds a (nested) dataclass from plain YAML data, converting every value to its
field's annotated type and refusing unknown keys and wrong types in one line (:class:`ConfigError`, naming the dotted
field and the fix); ``parse_override`` reads one ``--set section.key=value``. Nothing here knows the config's
sections.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import yaml

from corl_bench.errors import ConfigError


def _plain(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def _coerce(path: str, tp: Any, value: Any) -> Any:
    """Convert a YAML value to the annotated field type, or raise a one-line ConfigError."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(path, args[0], value)
    if dataclasses.is_dataclass(tp):
        if value is None:  # an empty YAML section
            value = {}
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path} must be a mapping of {', '.join(f.name for f in fields(tp))} (got {value!r})")
        return _build(tp, value, path)
    if origin is tuple:
        args = typing.get_args(tp)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path} must be a list (got {value!r}); write e.g. {path}=[a,b]")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(f"{path}[{i}]", args[0], v) for i, v in enumerate(value))
        if len(value) != len(args):
            raise ConfigError(f"{path} must have {len(args)} items (got {len(value)}); write e.g. {path}=[0.9,0.99]")
        return tuple(_coerce(f"{path}[{i}]", a, v) for i, (a, v) in enumerate(zip(args, value)))
    if origin in (Mapping, dict) or tp in (dict, Mapping):
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path} must be a mapping of option: value (got {value!r}); write e.g. "
                              f"{path}={{name: value}}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path} must be true or false (got {value!r}); set {path}=true or {path}=false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{path} must be an integer (got {value!r}); set e.g. {path}=1")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{path} must be a number (got {value!r}); set e.g. {path}=0.5")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{path} must be a string (got {value!r}); quote it, e.g. {path}='text'")
    return value


def _build(cls: type, data: Mapping[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in fields(cls)]
    kwargs = {}
    for key, value in data.items():
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean {prefix}.{close[0]}?" if close else f"; valid: {', '.join(names)}"
            shown = key if re.fullmatch(r"[\w-]+", str(key)) else repr(key)
            raise ConfigError(f"unknown config key {prefix}.{shown}{hint}".lstrip("."))
        kwargs[key] = _coerce(f"{prefix}.{key}".lstrip("."), hints[key], value)
    try:
        return cls(**kwargs)
    except TypeError as e:  # a required field missing (AgentSpec)
        raise ConfigError(f"{prefix or 'config'}: {e}") from None


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for k in keys[:-1]:
        nxt = node.setdefault(k, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"override {dotted}: {k} is not a section")
        node = nxt
    node[keys[-1]] = value


def parse_override(item: str) -> tuple[str, Any]:
    """``grpo.lr=3e-5`` -> ("grpo.lr", 3e-05); values are parsed as YAML (``[a,b]``, ``true``, numbers)."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like section.key=value, e.g. grpo.lr=3e-5")
    key, raw = item.split("=", 1)
    if not key.strip():
        raise ConfigError(f"override {item!r} has no key; write section.key=value, e.g. grpo.lr=3e-5")
    if not re.fullmatch(r"[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)*", key.strip()):
        raise ConfigError(f"override key {key.strip()!r} is not a dotted field name; write section.key=value, "
                          "e.g. grpo.lr=3e-5")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value
