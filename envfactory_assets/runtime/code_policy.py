"""What generated environment code may use: the single source of truth for the static check
(:mod:`.static_check`) and for the restricted execution namespace (:mod:`.restricted`).

The policy is deny-by-default for modules and deny-listed for names and attributes. The deny lists
close the known escapes from a pure-Python namespace: reaching ``object.__subclasses__`` or a
function's ``__globals__`` (dunder attributes), frames (``gi_frame``/``f_back``/``f_globals``...),
private module members (``collections._sys``), and the few standard-library helpers that evaluate
strings or resolve dotted attribute paths (``typing.get_type_hints``, ``functools.singledispatch``,
``string.Formatter.get_field``).
"""

from __future__ import annotations

# Top-level modules generated code may import. Everything else (os, sys, time, random, socket,
# subprocess, importlib, inspect, pickle, ...) is rejected by omission.
ALLOWED_MODULES: frozenset[str] = frozenset(
    {
        "math",
        "re",
        "json",
        "copy",
        "itertools",
        "functools",
        "collections",
        "string",
        "decimal",
        "fractions",
        "dataclasses",
        "typing",
        "enum",
        "datetime",
    }
)

# Dotted submodules that may be imported (``json.tool`` would read files, ``re._parser`` is private).
ALLOWED_SUBMODULES: frozenset[str] = frozenset({"collections.abc"})

# Builtins that do I/O, evaluate code, or expose namespaces. Removed from the execution namespace
# and rejected by the static check wherever the name appears.
FORBIDDEN_BUILTINS: frozenset[str] = frozenset(
    {
        "open",
        "exec",
        "eval",
        "compile",
        "__import__",
        "globals",
        "locals",
        "vars",
        "input",
        "breakpoint",
        "help",
        "exit",
        "quit",
        "copyright",
        "credits",
        "license",
    }
)

# Builtins that take an attribute name as a string: allowed only as direct calls with a constant
# name that passes the attribute rules below.
REFLECTIVE_BUILTINS: frozenset[str] = frozenset({"getattr", "setattr", "delattr", "hasattr"})

# Clock reads: "current time" lives in the saved state's ``meta.now``, never in the clock.
CLOCK_ATTRIBUTES: frozenset[str] = frozenset({"now", "today", "utcnow", "fromtimestamp", "utcfromtimestamp"})

# Attributes of generators, coroutines, frames, tracebacks and code objects: they lead to frames,
# and frames lead to the globals of trusted code.
INTROSPECTION_ATTRIBUTES: frozenset[str] = frozenset(
    {
        "gi_frame",
        "gi_code",
        "gi_yieldfrom",
        "cr_frame",
        "cr_code",
        "cr_await",
        "cr_origin",
        "ag_frame",
        "ag_code",
        "ag_await",
        "f_back",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_code",
        "f_trace",
        "tb_frame",
        "tb_next",
        "co_code",
        "co_consts",
        "co_names",
    }
)

# Standard-library members that evaluate strings as code, resolve attribute paths from strings, or
# are interpreter-wide mutable state shared by every environment in a worker (decimal's context
# templates). Removed from the module proxies given to generated code; their import and attribute
# access are rejected by the static check.
DENIED_MODULE_MEMBERS: dict[str, frozenset[str]] = {
    "typing": frozenset({"get_type_hints", "ForwardRef"}),
    # update_wrapper/wraps copy attributes named by run-time strings: a getattr/setattr in disguise.
    "functools": frozenset({"singledispatch", "singledispatchmethod", "update_wrapper", "wraps"}),
    # make_dataclass(namespace=...) defines class hooks from run-time strings.
    "dataclasses": frozenset({"make_dataclass"}),
    "string": frozenset({"Formatter"}),
    "decimal": frozenset({"DefaultContext", "BasicContext", "ExtendedContext"}),
}
DENIED_MEMBER_NAMES: frozenset[str] = frozenset().union(*DENIED_MODULE_MEMBERS.values())

# Underscore-prefixed attributes that are public API (namedtuple methods).
PUBLIC_UNDERSCORE_ATTRIBUTES: frozenset[str] = frozenset({"_asdict", "_replace", "_fields", "_field_defaults", "_make"})

# Receivers on which private (single underscore) attributes may be used: the code's own objects.
PRIVATE_ATTRIBUTE_RECEIVERS: frozenset[str] = frozenset({"self", "cls"})

# The only dunder name generated code may read.
ALLOWED_DUNDER_NAMES: frozenset[str] = frozenset({"__name__"})
#: Special methods generated code may define on its own classes; hooks such as __instancecheck__,
#: __getattr__ or __match_args__ change how the interpreter looks things up and are refused.
DEFINABLE_DUNDER_METHODS: frozenset[str] = frozenset(
    {
        "__init__",
        "__repr__",
        "__str__",
        "__eq__",
        "__ne__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__hash__",
        "__len__",
        "__iter__",
        "__contains__",
        "__getitem__",
        "__bool__",
    }
)

# Dunder attributes that lead nowhere dangerous on their own and are common in ordinary code
# (``type(v).__name__`` in error messages, ``super().__init__(...)`` in exception classes). Every
# other dunder attribute is denied, including ``__dict__``, ``__class__``, ``__globals__``.
SAFE_DUNDER_ATTRIBUTES: frozenset[str] = frozenset({"__name__", "__qualname__", "__doc__", "__init__"})


def is_dunder(name: str) -> bool:
    """True for ``__x__`` style names (at least 5 characters, two underscores on each side)."""
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def attribute_violation(attr: str, receiver: str | None = None) -> str | None:
    """Why reading or writing attribute ``attr`` is forbidden, or ``None`` when it is allowed.

    Args:
        attr: the attribute name, e.g. ``"__class__"``, ``"now"``, ``"_sys"``.
        receiver: the plain name the attribute is taken from (``"self"`` in ``self._rows``), or
            ``None`` when the receiver is an expression or unknown.

    Returns:
        A short human-readable reason, or ``None``.
    """
    if is_dunder(attr):
        if attr in SAFE_DUNDER_ATTRIBUTES:
            return None
        return f"access to dunder attribute '{attr}' is not allowed"
    if attr in INTROSPECTION_ATTRIBUTES:
        return f"access to introspection attribute '{attr}' is not allowed"
    if attr in CLOCK_ATTRIBUTES:
        return f"clock read '.{attr}' is not allowed (use the state's meta['now'])"
    if attr in DENIED_MEMBER_NAMES:
        return f"'{attr}' is not allowed (evaluates strings, resolves names, or shares global state)"
    if (
        attr.startswith("_")
        and attr not in PUBLIC_UNDERSCORE_ATTRIBUTES
        and receiver not in PRIVATE_ATTRIBUTE_RECEIVERS
    ):
        return f"access to private attribute '{attr}' is only allowed on self or cls"
    return None
