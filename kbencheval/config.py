"""One config system for kbencheval and smart: typed dataclasses, YAML files, key=value overrides.

    cfg = load_config(EvalConfig, "configs/eval.yaml", ["trials=3", "timing.warmup=5"])

Overrides use pydra-config's grammar (the one KernelBench users type: `level=1 verbose=True`,
nested keys with dots). Unknown keys are errors that name the closest valid key. Values are
coerced to each field's declared type, then the dataclass's `validate()` runs (if it has one).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Callable, TypeVar

import pydra
import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A bad config key or value; the message names the setting to change."""


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _unknown_key(key: str, cls: type, where: str, hidden: dict | None = None) -> ConfigError:
    """`key` is dotted from the top (an override) or a bare name (in a YAML section); the keys suggested
    are spelt the same way, so they can be pasted. `hidden`: keys set from elsewhere, never suggested."""
    parent, _, name = key.rpartition(".")
    prefix = f"{parent}." if parent else ""
    if name in getattr(cls, "RENAMED", {}):  # a key users may still have in a config or a command
        return ConfigError(f"config key '{key}' in {where} was renamed '{prefix}{cls.RENAMED[name]}' so that each word "
                           "has one meaning (docs/architecture.md): set that instead")
    names = [f.name for f in dataclasses.fields(cls) if f.name not in (hidden or {})]
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean '{prefix}{close[0]}'?)" if close else \
        f"; valid keys: {', '.join(prefix + n for n in names)}"
    return ConfigError(f"unknown config key '{key}' in {where}{hint}")


def set_elsewhere(**keys: str) -> dict:
    """Field metadata for a section some of whose keys another key sets, e.g. a command's `device=` that
    sets each evaluator's `eval.device`: `dataclasses.field(..., metadata=set_elsewhere(device="device"))`.
    Such keys are left out of --help, and setting one is an error that names the key to set instead."""
    return {"set_elsewhere": keys}


def _set_elsewhere(f: dataclasses.Field) -> dict[str, str]:
    return f.metadata.get("set_elsewhere", {})


def _set_elsewhere_error(key: str, by: str) -> ConfigError:
    return ConfigError(f"config key '{key}' is set from '{by}'; set {by}=... instead")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Cast a parsed YAML/CLI value to the annotated type, or raise a ConfigError naming the key."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in typing.get_args(tp):
                return None
        for arg in args:
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(f"config key '{key}': cannot read {value!r} as {tp}")
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"config key '{key}' must be one of {list(typing.get_args(tp))}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}' is a section; give a mapping, got {value!r}")
        return from_dict(tp, value, where=key)
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, (list, tuple)):
            value = [value]
        inner = typing.get_args(tp)
        item_tp = inner[0] if inner else Any
        return origin(_coerce(v, item_tp, key) for v in value)
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}' must be a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "t"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "0", "no", "f"):
            return False
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ConfigError(f"config key '{key}' must be true or false, got {value!r}")
    if tp in (int, float, str):
        if tp is int and isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"config key '{key}' must be an integer, got {value!r}")
        if tp is str and not isinstance(value, str):
            return str(value)
        try:
            return tp(value)
        except (TypeError, ValueError):
            raise ConfigError(f"config key '{key}' must be {tp.__name__}, got {value!r}") from None
    return value


def section_chosen_by(key: str, classes: Callable[[str], type], default: str) -> Any:
    """A config section whose dataclass depends on another key's value (e.g. `train:` by `backend:`).

        train: Any = section_chosen_by("backend", backend_config_class, "torch")

    `classes(name)` is called only when a config is built, so the owning module imports nothing heavy.
    """
    return dataclasses.field(default=None, metadata={"chosen_by": (key, classes, default)})


def from_dict(cls: type[T], data: dict, where: str = "config") -> T:
    """Build a (nested) config dataclass from a mapping; unknown keys are errors."""
    types_by_name = _field_types(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    chosen = {name: f.metadata["chosen_by"] for name, f in fields.items() if "chosen_by" in f.metadata}
    kwargs = {}
    data = data or {}
    for key, value in sorted(data.items(), key=lambda kv: kv[0] in chosen):  # choosers before chosen
        if key not in types_by_name:
            raise _unknown_key(key, cls, where)
        tp = types_by_name[key]
        for name, by in _set_elsewhere(fields[key]).items():
            if isinstance(value, dict) and name in value:
                raise _set_elsewhere_error(f"{key}.{name}", by)
        if key in chosen:
            chooser, classes, default = chosen[key]
            tp = classes(kwargs.get(chooser, default))
        kwargs[key] = _coerce(value, tp, f"{where}.{key}" if where != "config" else key)
    for key, (chooser, classes, default) in chosen.items():
        if key not in kwargs:
            kwargs[key] = classes(kwargs.get(chooser, default))()
    cfg = cls(**kwargs)
    _validate(cfg)
    return cfg


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)


def _validate(cfg: Any) -> None:
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            _validate(value)
    if hasattr(cfg, "validate"):
        cfg.validate()


def _check_override_keys(cfg: Any, key: str) -> None:
    obj, parts, hidden = cfg, key.split("."), {}
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(obj):
            raise ConfigError(f"config key '{'.'.join(parts[:i])}' is a value, not a section: "
                              f"set {'.'.join(parts[:i])}=... without '.{'.'.join(parts[i:])}'")
        fields = {f.name: f for f in dataclasses.fields(obj)}
        if part in hidden:
            raise _set_elsewhere_error(".".join(parts[: i + 1]), hidden[part])
        if part not in fields:
            raise _unknown_key(".".join(parts[: i + 1]), type(obj), "overrides", hidden)
        obj, hidden = getattr(obj, part), _set_elsewhere(fields[part])


def apply_overrides(cfg: T, overrides: list[str] | tuple[str, ...]) -> T:
    """Apply `key=value` strings (pydra-config grammar) in place, then coerce and validate."""
    overrides = [o for o in overrides if o]
    for item in overrides:
        if "=" not in item and not item.startswith("--"):
            raise ConfigError(f"cannot read override '{item}': write it as key=value")
    for item in overrides:  # one at a time, so the error names the override pydra cannot read
        try:
            pydra.parser.parse([item])
        except ValueError as e:
            raise ConfigError(f"cannot read override '{item}': {e}; quote strings inside lists, "
                              "e.g. 'data.problems=[\"L1_1_ReLU\"]'") from None
    parsed = pydra.parser.parse(list(overrides))
    for command in parsed.commands:
        if not isinstance(command, pydra.parser.Assignment):
            raise ConfigError(f"unsupported override {command}: write key=value")
        _check_override_keys(cfg, command.kv_pair.key)
    pydra.apply_overrides(cfg, list(overrides), enforce_required=False, finalize=False)
    _recoerce(cfg)
    _validate(cfg)
    return cfg


def _recoerce(cfg: Any, prefix: str = "") -> None:
    for name, tp in _field_types(type(cfg)).items():
        value = getattr(cfg, name)
        if dataclasses.is_dataclass(value):
            _recoerce(value, f"{prefix}{name}.")
        else:
            setattr(cfg, name, _coerce(value, tp, prefix + name))


def load_config(cls: type[T], path: str | Path | None = None, overrides=()) -> T:
    """YAML file (optional) + key=value overrides -> validated config of type `cls`."""
    data = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist; pass the path to a YAML file in configs/")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path} is not valid YAML: {str(e).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path} must hold a mapping of keys to values")
    cfg = from_dict(cls, data, where=str(path) if path else "config")
    return apply_overrides(cfg, list(overrides))


def _type_name(tp: Any) -> str:
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each field (the convention of every config dataclass here)."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, nxt in zip(body, body[1:]):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
                docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


def config_help(cls: type, usage: str, example: str, aliases: dict[str, str] | None = None, prefix: str = "",
                hidden: dict[str, str] | None = None) -> str:
    """`--help` text for a key=value command: every key (nested ones dotted) with its type, default and doc;
    each setting once (`hidden`: a section's keys that another key sets, see set_elsewhere)."""
    lines = [f"usage: {usage}", "", "keys (key=value; nested sections take dotted keys):"] if not prefix else []
    defaults = cls() if not prefix else None
    docs = _field_docs(cls)
    for f in dataclasses.fields(cls):
        if f.name in (hidden or {}):
            continue
        value = getattr(defaults, f.name) if defaults is not None else _default_of(f)
        if dataclasses.is_dataclass(value):
            lines.append(f"  {prefix}{f.name}.*  ({type(value).__name__}){'  ' + docs[f.name] if f.name in docs else ''}")
            lines += config_help(type(value), usage, example, prefix=f"{prefix}{f.name}.",
                                 hidden=_set_elsewhere(f)).splitlines()
            continue
        tp = _type_name(_field_types(cls)[f.name])
        doc = f"  {docs[f.name]}" if f.name in docs else ""
        lines.append(f"  {prefix}{f.name}: {tp} = {value!r}{doc}")
    if prefix:
        return "\n".join(lines)
    if aliases:
        lines += ["", "aliases (KernelBench names):"] + [f"  {a} -> {k}" for a, k in aliases.items()]
    lines += ["", "example:", f"  {example}"]
    return "\n".join(lines)


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def wants_help(argv: list[str] | tuple[str, ...]) -> bool:
    return any(a in ("-h", "--help", "help=true", "help=True") for a in argv)
