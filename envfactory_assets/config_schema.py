"""Each asset's settings read from the settings dataclasses that state them (name, type, default, help text).

A Dagster run config (under ``envfactory_assets/defs/``) is generated from these (``defs/config_fields.py``),
docs/configuration.md is written from them (:func:`configuration_markdown`), and :func:`config_drift` compares
any pydantic-style model's fields with them, so a hand-written mirror that drifts is caught by a test. This
module never imports Dagster.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any

from envfactory_assets.config_checks import SettingError, default_of, help_of

#: The default of a setting declared ``setting(help=..., required=True)``: a run must give it (pydantic's
#: marker for a required field, so a generated run config requires it too).
REQUIRED: Any = ...


@dataclass(frozen=True)
class Source:
    """The fields of the settings dataclass ``spec`` an asset exposes, named ``prefix + field`` there; ``skip``
    lists the fields it leaves at the spec's default (each with the reason in a comment where it is named)."""

    spec: type
    prefix: str = ""
    skip: tuple[str, ...] = ()


@dataclass(frozen=True)
class Setting:
    """One run-config setting: its name, its run-config type, its default (:data:`REQUIRED` when it has none),
    its help and where it is stated."""

    name: str
    annotation: Any
    default: Any
    help: str
    stated_in: str


def _without_none(annotation: Any) -> Any:
    """``annotation`` without its ``| None`` (``int | None`` is ``int``)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def run_config_type(annotation: Any) -> Any:
    """The run-config type of a dataclass field's type: ``X | None`` is ``X`` (the run config has no null; a
    separate setting lifts such a limit), a ``tuple[X, ...]`` is ``list[X]`` (YAML has lists), a ``Literal`` of
    strings is ``str`` (the spec's check names the allowed values)."""
    annotation = _without_none(annotation)
    origin = typing.get_origin(annotation)
    if origin is tuple:
        args = typing.get_args(annotation)
        return list[args[0]] if args else list
    if origin is typing.Literal:
        return type(typing.get_args(annotation)[0])
    return annotation


def settings_of(*sources: Source) -> list[Setting]:
    """The settings the ``sources`` state, in field order.

    Raises:
        KeyError: a field has no help text, or ``skip`` names a field the spec lacks.
        ValueError: two sources state a setting of the same name.
    """
    out: list[Setting] = []
    for source in sources:
        names = {f.name for f in dataclasses.fields(source.spec)}
        unknown = set(source.skip) - names
        if unknown:
            raise KeyError(f"{source.spec.__name__} has no fields {sorted(unknown)} to skip")
        hints = typing.get_type_hints(source.spec)
        for field in dataclasses.fields(source.spec):
            if field.name in source.skip:
                continue
            has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
            default = default_of(source.spec, field.name) if has_default else REQUIRED
            if isinstance(default, tuple):
                default = list(default)
            out.append(
                Setting(
                    source.prefix + field.name,
                    run_config_type(hints[field.name]),
                    default,
                    help_of(source.spec, field.name),
                    f"{source.spec.__name__}.{field.name}",
                )
            )
    seen: set[str] = set()
    for s in out:
        if s.name in seen:
            raise ValueError(f"setting {s.name!r} is stated by two sources")
        seen.add(s.name)
    return out


def build_spec(source: Source, config: Any, owner: str | None = None, **fixed: Any) -> Any:
    """``source.spec`` built from the run config ``config``: each field not in ``source.skip`` and not in
    ``fixed`` from the attribute ``source.prefix + name`` of ``config``, as the run config holds it (a list
    for a spec's tuple: a refusal shows the value as the user wrote it), plus ``fixed`` (fields the config
    derives, e.g. a shared seed). So a field added to a spec with
    :func:`~envfactory_assets.config_checks.setting` reaches the spec without a line here.

    Raises:
        SettingError: the spec's own check refused a value; with ``owner`` (the asset whose config it is) the
            refusal is renamed ``<owner> setting <prefix><name>=...`` (:meth:`SettingError.for_owner`).
    """
    values = dict(fixed)
    for field in dataclasses.fields(source.spec):
        if field.name not in source.skip and field.name not in fixed:
            values[field.name] = getattr(config, source.prefix + field.name)
    try:
        return source.spec(**values)
    except SettingError as exc:
        if owner is None:
            raise
        raise exc.for_owner(owner, prefix=source.prefix) from exc


def _field_default(info: Any) -> Any:
    factory = getattr(info, "default_factory", None)
    return factory() if factory is not None else info.default


def config_drift(model_fields: dict[str, Any], expected: list[Setting]) -> list[str]:
    """Every difference between a run config's fields (pydantic ``model_fields``: ``annotation``, ``default``
    or ``default_factory``, ``description``) and the settings that should generate it; empty when none.

    Each difference is one line naming the setting and what differs (missing, extra, type, default, help).
    """
    problems = []
    want = {s.name: s for s in expected}
    for name in sorted(set(model_fields) - set(want)):
        problems.append(f"{name}: in the run config but stated by no settings dataclass")
    for name, s in want.items():
        info = model_fields.get(name)
        if info is None:
            problems.append(f"{name}: stated by {s.stated_in} but missing from the run config")
            continue
        if info.annotation != s.annotation:
            problems.append(f"{name}: type {info.annotation!r}, {s.stated_in} says {s.annotation!r}")
        if s.default is REQUIRED or info.is_required():
            if not (s.default is REQUIRED and info.is_required()):
                shown = "required" if info.is_required() else f"default {_field_default(info)!r}"
                stated = "required" if s.default is REQUIRED else f"default {s.default!r}"
                problems.append(f"{name}: {shown}, {s.stated_in} says {stated}")
        else:
            default = _field_default(info)
            if type(default) is not type(s.default) or default != s.default:
                problems.append(f"{name}: default {default!r}, {s.stated_in} says {s.default!r}")
        if info.description != s.help:
            problems.append(f"{name}: help {info.description!r}, {s.stated_in} says {s.help!r}")
    return problems
