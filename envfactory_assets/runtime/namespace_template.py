"""A fresh environment module namespace without executing the module again.

Every episode runs its environment in its own module namespace, so module-level objects (counters, caches,
tables of metadata) never leak between episodes. Executing the module for each fork costs more than the
rest of the fork, so :func:`make_template` studies two executions of the module once and, when every
module-level value is of a kind it can reproduce, :meth:`NamespaceTemplate.instantiate` builds the namespace a
third execution would: the functions the module defines, rebound to the new namespace; its plain data
(dicts and lists of JSON values) as copy-on-write views of a frozen copy (:mod:`.cow_state`); a fresh proxy
of each imported module; a fresh builtins mapping; and the values every execution shares anyway (the same
object both times: builtins, members imported from allowed modules) or that cannot change (numbers,
strings). Anything else (a class, an object, a closure, a function with attributes or mutable defaults, one
container reachable from two names) makes the module ineligible, and it is executed for every episode as
before.
"""

from __future__ import annotations

import dis
import types
from collections.abc import Callable
from typing import Any

from envfactory_assets.runtime.cow_state import Snapshot, fork_view, freeze

_IMMUTABLE = (str, int, float, bool, type(None), bytes)


def _immutable(value: Any) -> bool:
    """Numbers, strings, builtin types (no attribute of theirs can be set) and tuples of those."""
    if type(value) in _IMMUTABLE:
        return True
    if isinstance(value, type):
        return value.__module__ == "builtins"
    return type(value) is tuple and all(_immutable(item) for item in value)


class NamespaceTemplate:
    """How to build one more namespace of a module; see the module docstring."""

    def __init__(self, plan: list[tuple[str, str, Any]], builtins_scope: dict[str, Any], module_proxy: Any) -> None:
        self._plan = plan
        self._builtins = builtins_scope
        self._module_proxy = module_proxy

    def instantiate(self) -> dict[str, Any]:
        """A new namespace, as executing the module once more would leave it."""
        namespace: dict[str, Any] = {}
        for name, kind, value in self._plan:
            if kind == "same":
                namespace[name] = value
            elif kind == "builtins":
                namespace[name] = dict(self._builtins)
            elif kind == "data":
                namespace[name] = fork_view(value)
            elif kind == "module":
                namespace[name] = self._module_proxy(value)
            else:  # "function": its code, rebound to the new namespace (name, qualname, doc and module
                # follow from the code and the namespace, as make_template checked)
                function = types.FunctionType(value.__code__, namespace, value.__name__, value.__defaults__)
                if value.__kwdefaults__:
                    function.__kwdefaults__ = dict(value.__kwdefaults__)
                namespace[name] = function
        return namespace


def make_template(
    first: dict[str, Any], second: dict[str, Any], module_proxy: Callable[[str], types.ModuleType]
) -> NamespaceTemplate | None:
    """A template from two executions of one module (``first`` is kept as the template's source and must
    never run), or None when the module holds a value the template cannot reproduce.

    Args:
        first, second: the namespaces left by two executions of the module.
        module_proxy: makes the fresh proxy of an allowed module that an ``import`` would give.
    """
    if list(first) != list(second):
        return None
    plan: list[tuple[str, str, Any]] = []
    claimed: set[int] = set()
    builtins_scope: dict[str, Any] = {}
    for name, value in first.items():
        other = second[name]
        if name == "__builtins__":
            if any(kind == "function" for _, kind, _ in plan):  # a function takes its builtins when made
                return None
            if type(value) is not dict or value.keys() != other.keys():
                return None
            if any(value[key] is not other[key] for key in value):
                return None
            builtins_scope = value
            plan.append((name, "builtins", None))
        elif value is other or (_immutable(value) and value == other and type(value) is type(other)):
            plan.append((name, "same", value))
        elif isinstance(value, types.FunctionType):
            if not _plain_function(value, first) or not _plain_function(other, second):
                return None
            plan.append((name, "function", value))
        elif isinstance(value, types.ModuleType):
            kind = _module_kind(value, other, module_proxy)
            if kind is None:
                return None
            plan.append((name, "module", kind))
        else:
            snapshot = _data(value, other, claimed)
            if snapshot is None:
                return None
            plan.append((name, "data", snapshot))
    return NamespaceTemplate(plan, builtins_scope, module_proxy)


def _plain_function(function: types.FunctionType, namespace: dict[str, Any]) -> bool:
    rebuilt = types.FunctionType(function.__code__, namespace, function.__name__, function.__defaults__)
    return (
        (rebuilt.__qualname__, rebuilt.__doc__, rebuilt.__module__)
        == (function.__qualname__, function.__doc__, function.__module__)
        and function.__globals__ is namespace
        and function.__closure__ is None
        and not function.__dict__
        and all(_immutable(d) for d in function.__defaults__ or ())
        and all(_immutable(d) for d in (function.__kwdefaults__ or {}).values())
        and not _rebinds_globals(function.__code__)
    )


def _rebinds_globals(code: types.CodeType) -> bool:
    """Whether ``code`` (or a function or comprehension nested in it) assigns or deletes a module-level name
    (a ``global`` statement): a ``load`` that does so sets up module state per episode, which a namespace
    built without running ``load`` again would lack."""
    if any(op.opname in ("STORE_GLOBAL", "DELETE_GLOBAL") for op in dis.get_instructions(code)):
        return True
    return any(isinstance(const, types.CodeType) and _rebinds_globals(const) for const in code.co_consts)


def _module_kind(value: types.ModuleType, other: types.ModuleType, module_proxy: Callable[[str], Any]) -> str | None:
    """The module's name when both executions hold an unaltered proxy of it, else None."""
    name = getattr(value, "__name__", None)
    if not isinstance(name, str):
        return None
    try:
        fresh = module_proxy(name)
    except ImportError:
        return None
    for proxy in (value, other):
        if proxy is fresh or vars(proxy).keys() != vars(fresh).keys():
            return None
        if any(
            vars(proxy)[key] is not vars(fresh)[key] and not isinstance(vars(fresh)[key], types.ModuleType)
            for key in vars(fresh)
            if not key.startswith("__")
        ):
            return None
    return name


def _data(value: Any, other: Any, claimed: set[int]) -> Snapshot | None:
    """A frozen copy of module-level plain data, or None; no container may be claimed twice."""
    if type(value) not in (dict, list) or value != other:
        return None
    snapshot = freeze(value, _immutable)
    if snapshot is None or not snapshot.origins.isdisjoint(claimed):
        return None
    claimed |= snapshot.origins
    return snapshot


__all__ = ["NamespaceTemplate", "make_template"]
