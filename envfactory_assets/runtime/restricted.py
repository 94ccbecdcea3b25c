"""The restricted execution namespace for generated environment code (second sandbox layer, run
inside the worker process after :func:`.static_check.static_check` accepted the code).

- Builtins: the interpreter's builtins minus :data:`code_policy.FORBIDDEN_BUILTINS` and dunder entries;
  ``__import__`` is replaced by :func:`restricted_import`; ``getattr``/``setattr``/``delattr``/
  ``hasattr`` re-check the attribute name at run time.
- Imports return *module proxies*: fresh module objects holding only the public, non-module,
  non-denied members of an allowed module, so ``collections._sys`` or ``re.enum.sys`` do not exist.
"""

from __future__ import annotations

import builtins
import importlib
import types
from typing import Any

import envfactory_assets.runtime.code_policy as code_policy
from envfactory_assets.runtime.cow_state import visible_type

_MISSING = object()
# Filtered member dictionaries of allowed modules, computed once per worker process.
_MEMBER_CACHE: dict[str, dict[str, Any]] = {}


def _check_attribute_name(func: str, name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{func}(): attribute name must be str")
    reason = code_policy.attribute_violation(name)  # receiver unknown: private names are refused too
    if reason:
        raise AttributeError(f"{func}(): {reason}")
    return name


def safe_getattr(obj: Any, name: str, default: Any = _MISSING) -> Any:
    """``getattr`` that refuses dunder, private, introspection and clock attribute names."""
    _check_attribute_name("getattr", name)
    if default is _MISSING:
        return getattr(obj, name)
    return getattr(obj, name, default)


def safe_hasattr(obj: Any, name: str) -> bool:
    """``hasattr`` with the same name rules as :func:`safe_getattr`."""
    return hasattr(obj, _check_attribute_name("hasattr", name))


def safe_setattr(obj: Any, name: str, value: Any) -> None:
    """``setattr`` with the same name rules as :func:`safe_getattr`; refuses module objects."""
    _check_attribute_name("setattr", name)
    if isinstance(obj, types.ModuleType):
        raise AttributeError("setattr(): modules are read-only")
    setattr(obj, name, value)


def safe_delattr(obj: Any, name: str) -> None:
    """``delattr`` with the same name rules as :func:`safe_getattr`; refuses module objects."""
    _check_attribute_name("delattr", name)
    if isinstance(obj, types.ModuleType):
        raise AttributeError("delattr(): modules are read-only")
    delattr(obj, name)


def _public_members(module_name: str) -> dict[str, Any]:
    cached = _MEMBER_CACHE.get(module_name)
    if cached is not None:
        return cached
    module = importlib.import_module(module_name)
    denied = code_policy.DENIED_MODULE_MEMBERS.get(module_name, frozenset())
    members: dict[str, Any] = {}
    for key, value in vars(module).items():
        if key.startswith("_") or key in denied or isinstance(value, types.ModuleType):
            continue
        members[key] = value
    _MEMBER_CACHE[module_name] = members
    return members


def module_proxy(module_name: str) -> types.ModuleType:
    """A fresh read-mostly copy of an allowed module's public members.

    Args:
        module_name: a name in :data:`code_policy.ALLOWED_MODULES` or :data:`code_policy.ALLOWED_SUBMODULES`.

    Returns:
        A new ``types.ModuleType`` named ``module_name`` holding the module's public members that
        are not modules and not denied, plus proxies of allowed submodules (``collections.abc``).
        A fresh object on every call, so one environment cannot alter another's modules.

    Raises:
        ImportError: if the module is not allowed.
    """
    if module_name not in code_policy.ALLOWED_MODULES and module_name not in code_policy.ALLOWED_SUBMODULES:
        raise ImportError(f"import of {module_name!r} is not allowed")
    proxy = types.ModuleType(module_name)
    proxy.__dict__.update(_public_members(module_name))
    for submodule in code_policy.ALLOWED_SUBMODULES:
        parent, _, child = submodule.rpartition(".")
        if parent == module_name:
            setattr(proxy, child, module_proxy(submodule))
    return proxy


def restricted_import(
    name: str,
    globals: Any = None,  # noqa: A002 - the signature of builtins.__import__
    locals: Any = None,  # noqa: A002
    fromlist: Any = (),
    level: int = 0,
) -> types.ModuleType:
    """Replacement for ``builtins.__import__`` that hands out :func:`module_proxy` objects.

    Follows the ``__import__`` protocol: ``import a.b`` gets the proxy of ``a`` (which holds ``b``),
    ``from a.b import c`` gets the proxy of ``a.b``.

    Raises:
        ImportError: relative imports, and modules outside the allowlist.
    """
    if level:
        raise ImportError("relative imports are not allowed")
    if name not in code_policy.ALLOWED_MODULES and name not in code_policy.ALLOWED_SUBMODULES:
        raise ImportError(f"import of {name!r} is not allowed")
    if fromlist:
        proxy = module_proxy(name)
        for member in fromlist:
            # Without this, `from json import decoder` falls back to sys.modules["json.decoder"]: the real
            # module, and through it the real sys (an escape found by the hostile-code corpus).
            if member != "*" and not hasattr(proxy, member):
                raise ImportError(f"cannot import {member!r} from {name!r} (not an allowed public member)")
        return proxy
    return module_proxy(name.split(".")[0])


def safe_type(*args: Any) -> type:
    """``type(obj)`` only: the three-argument form builds classes whose hooks come from run-time strings."""
    if len(args) != 1:
        raise TypeError("type() with three arguments (dynamic class creation) is not allowed")
    # an episode's copy-on-write dicts and lists are dicts and lists to the code (type(x) is dict holds)
    return visible_type(args[0])


def restricted_builtins() -> dict[str, Any]:
    """A fresh builtins mapping for one execution namespace (``namespace["__builtins__"]``).

    Returns:
        ``dict`` of builtin name -> object: every public builtin except
        :data:`code_policy.FORBIDDEN_BUILTINS`, plus ``__build_class__`` (needed by ``class`` statements)
        and ``__import__`` = :func:`restricted_import`, with the reflective builtins replaced by
        their checked versions.
    """
    allowed = {
        key: value
        for key, value in vars(builtins).items()
        if not key.startswith("_") and key not in code_policy.FORBIDDEN_BUILTINS
    }
    allowed["__build_class__"] = builtins.__build_class__
    allowed["__import__"] = restricted_import
    allowed["type"] = safe_type
    allowed["getattr"] = safe_getattr
    allowed["hasattr"] = safe_hasattr
    allowed["setattr"] = safe_setattr
    allowed["delattr"] = safe_delattr
    return allowed
