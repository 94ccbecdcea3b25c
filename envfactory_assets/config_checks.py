"""Checks for stage settings, run before a stage reads or writes anything.

Dagster types each config field, but it lets through values no stage can use (``n_chains: 0``,
``max_bytes: -1``, a NaN float, an unknown name), and the plain settings dataclasses the assets map to are
also built directly (scripts, tests), where nothing checks types at all. A setting that slips through
surfaces late, as a crash after minutes of work or as an empty result that replaces good rows; these
helpers refuse it up front with a message naming the setting, its value and what is allowed.

Each setting is stated once, in a stage's settings dataclass, with :func:`setting` (the default and the help
text as field metadata, as Hugging Face TRL's config dataclasses do); the Dagster run configs and
docs/configuration.md are derived from those fields.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any


class SettingError(ValueError):
    """A setting a stage cannot use; the message reads ``<owner> setting <name>=<value>: expected ...``.

    Raised by the helpers below it also carries ``owner``, ``name``, ``value`` and ``expected`` (None when
    raised with a free-form message), so that a Dagster config that builds a plain spec can report the
    spec's own check under the config's name (:meth:`for_owner`) instead of repeating the check.
    """

    def __init__(
        self,
        message: str,
        owner: str | None = None,
        name: str | None = None,
        value: Any = None,
        expected: str | None = None,
    ) -> None:
        super().__init__(message)
        self.owner, self.name, self.value, self.expected = owner, name, value, expected

    def for_owner(self, owner: str, prefix: str = "") -> SettingError:
        """The same refusal named as ``<owner> setting <prefix><name>=...`` (e.g. ``tool_chains`` for a
        :class:`~envfactory_assets.synth.sampling.sampler.SamplerConfig` check); a free-form message gets
        ``<owner>: `` in front instead."""
        if self.name is None or self.expected is None:
            return SettingError(f"{owner}: {self}")
        return _fail(owner, prefix + self.name, self.value, self.expected)


def setting(
    default: Any = dataclasses.MISSING, help: str = "", *, factory: Any = dataclasses.MISSING, required: bool = False
) -> Any:
    """A dataclass field holding one setting's default (or ``factory`` for a mutable one) and its help text
    (``metadata={"help": ...}``, the convention of Hugging Face TRL's config dataclasses). ``required``: the
    setting has no default (a run must give it; such fields come before those with defaults).

    Raises:
        ValueError: ``help`` is blank, or not exactly one of ``default``, ``factory`` and ``required`` is given.
    """
    if not help.strip():
        raise ValueError("setting(): help must say what the setting does")
    if (default is not dataclasses.MISSING) + (factory is not dataclasses.MISSING) + bool(required) != 1:
        raise ValueError("setting(): give exactly one of default, factory and required=True")
    if required:
        return dataclasses.field(metadata={"help": help})
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


def help_of(spec: Any, name: str) -> str:
    """The help text of the field ``name`` of the settings dataclass ``spec`` (a class or an instance).

    Raises:
        KeyError: ``spec`` has no such field, or the field was not declared with :func:`setting`.
    """
    for field in dataclasses.fields(spec):
        if field.name == name:
            if "help" not in field.metadata:
                raise KeyError(f"{getattr(spec, '__name__', type(spec).__name__)}.{name} has no help text")
            return field.metadata["help"]
    raise KeyError(f"{getattr(spec, '__name__', type(spec).__name__)} has no field {name!r}")


def default_of(spec: Any, name: str) -> Any:
    """The default of the field ``name`` of the settings dataclass ``spec`` (a factory's default is built).

    Raises:
        KeyError: ``spec`` has no such field, or it has no default.
    """
    for field in dataclasses.fields(spec):
        if field.name == name:
            if field.default is not dataclasses.MISSING:
                return field.default
            if field.default_factory is not dataclasses.MISSING:
                return field.default_factory()
            raise KeyError(f"{spec.__name__}.{name} has no default")
    raise KeyError(f"{spec.__name__} has no field {name!r}")


def _fail(owner: str, name: str, value: Any, expected: str) -> SettingError:
    shown = repr(value)
    if len(shown) > 120:
        shown = shown[:120] + "..."
    return SettingError(f"{owner} setting {name}={shown}: expected {expected}", owner, name, value, expected)


def _bounds(low: float | None, high: float | None, low_open: bool = False) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low:g}, {high:g}]"
    if low is not None:
        return f" {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f" <= {high:g}"
    return ""


def whole_number(owner: str, name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) within ``[low, high]`` (a bound of None is open);
    otherwise raise :class:`SettingError` naming ``owner``, ``name``, the value and the allowed range."""
    expected = "a whole number" + _bounds(low, high)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _fail(owner, name, value, expected)
    if (low is not None and value < low) or (high is not None and value > high):
        raise _fail(owner, name, value, expected)
    return value


def finite_number(
    owner: str, name: str, value: Any, low: float | None = None, high: float | None = None, low_open: bool = False
) -> float:
    """``value`` if it is a finite ``int``/``float`` (not a ``bool``, not NaN or infinite) within the bounds
    (``low_open``: ``low`` itself is excluded); otherwise raise :class:`SettingError`."""
    expected = "a finite number" + _bounds(low, high, low_open)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise _fail(owner, name, value, expected)
    too_low = low is not None and (value <= low if low_open else value < low)
    if too_low or (high is not None and value > high):
        raise _fail(owner, name, value, expected)
    return float(value)


def one_of(owner: str, name: str, value: Any, allowed: Iterable[str]) -> str:
    """``value`` if it is one of ``allowed``; otherwise raise :class:`SettingError` listing them."""
    allowed = list(allowed)
    if not isinstance(value, str) or value not in allowed:
        raise _fail(owner, name, value, "one of " + ", ".join(repr(a) for a in allowed))
    return value


def flag(owner: str, name: str, value: Any) -> bool:
    """``value`` if it is a ``bool``; otherwise raise :class:`SettingError`."""
    if not isinstance(value, bool):
        raise _fail(owner, name, value, "true or false")
    return value


def non_blank_string(owner: str, name: str, value: Any, what: str = "") -> str:
    """``value`` if it is a ``str`` with a non-space character; otherwise raise :class:`SettingError`
    (``what``, e.g. ``"a model name or a model directory"``, is added to the message in brackets)."""
    if not isinstance(value, str) or not value.strip():
        raise _fail(owner, name, value, "a non-blank string" + (f" ({what})" if what else ""))
    return value


def strings(owner: str, name: str, value: Any, non_empty: bool = False) -> list[str]:
    """``value`` as a list if it is a list (or tuple) of non-blank strings (and, with ``non_empty``, has at
    least one); otherwise raise :class:`SettingError`."""
    expected = "a " + ("non-empty " if non_empty else "") + "list of non-blank strings"
    if not isinstance(value, (list, tuple)) or (non_empty and not value):
        raise _fail(owner, name, value, expected)
    if any(not isinstance(v, str) or not v.strip() for v in value):
        raise _fail(owner, name, value, expected)
    return list(value)


def number_types(spec: Any, owner: str) -> None:
    """Raise :class:`SettingError` when a field of the dataclass ``spec`` annotated ``int`` is not a whole
    number, one annotated ``float`` is not a finite number, or one annotated ``bool`` is not a bool."""
    for field in dataclasses.fields(spec):
        value = getattr(spec, field.name)
        if field.type in ("int", int):
            whole_number(owner, field.name, value)
        elif field.type in ("float", float):
            finite_number(owner, field.name, value)
        elif field.type in ("bool", bool):
            flag(owner, field.name, value)
