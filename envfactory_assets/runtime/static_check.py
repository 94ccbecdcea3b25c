"""AST-based static check of generated environment code (the first of two sandbox layers; the
second is the restricted namespace of :mod:`.restricted`, the third the worker's process limits).

Usage::

    violations = static_check(source)
    if violations:            # ["line 3: import of 'os' is not allowed", ...]
        reject(violations)
"""

from __future__ import annotations

import ast
import re
import string

import envfactory_assets.runtime.code_policy as code_policy

# Arity of the reflective builtins: (min positional args, max positional args).
_REFLECTIVE_ARITY: dict[str, tuple[int, int]] = {
    "getattr": (2, 3),
    "hasattr": (2, 2),
    "setattr": (3, 3),
    "delattr": (2, 2),
}
_REFLECTIVE_WRITERS = frozenset({"setattr", "delattr"})
_FORMAT_FIELD_ATTRIBUTE = re.compile(r"\.([^.\[\]]+)")


def static_check(source: str) -> list[str]:
    """Check generated environment code before it is executed.

    Args:
        source: the text of one Python module.

    Returns:
        Human-readable violations, each ``"line N: <reason>"``, sorted by line and de-duplicated.
        An empty list means the code is accepted. Rules:

        - the code parses (``"line N: syntax error: ..."`` otherwise) and is not nested so deeply
          that it cannot be walked (``"line 0: code is nested too deeply to check"``);
        - imports only from :data:`code_policy.ALLOWED_MODULES` (plus ``collections.abc``); no relative
          imports, no ``import *``, no private or denied members (``typing.get_type_hints``,
          ``functools.singledispatch``, ``string.Formatter``, decimal's global contexts);
        - no use of ``open``, ``exec``, ``eval``, ``compile``, ``__import__``, ``globals``,
          ``locals``, ``vars``, ``input``, ``breakpoint``, ``help``, ``exit``, ``quit``;
        - ``getattr``/``setattr``/``delattr``/``hasattr`` only as direct calls whose name argument is
          a string constant that passes the attribute rules;
        - attribute rules (also for ``match`` class patterns and ``str.format`` fields in string
          constants): no dunder attributes (``__class__``, ``__subclasses__``, ``__globals__``,
          ``__dict__``...) except the harmless ``__name__``, ``__qualname__``, ``__doc__``,
          ``__init__``; no frame/generator/code introspection (``gi_frame``, ``f_back``...); no clock
          reads (``.now``, ``.today``, ``.utcnow``, ``.fromtimestamp``, ``.utcfromtimestamp``); no
          private ``_x`` attributes except on ``self``/``cls`` (not through ``getattr``) and
          namedtuple's ``_asdict``/``_replace``/``_fields``/``_field_defaults``/``_make``;
        - no dunder names other than ``__name__`` (``__builtins__``, ``__loader__``...);
        - no ``global``/``nonlocal`` statements;
        - no assignment to, or deletion of, attributes of imported names (``json.dumps = f``).

    Raises:
        TypeError: if ``source`` is not a ``str``.
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be str, not {type(source).__name__}")
    try:
        tree = ast.parse(source, filename="<environment>", mode="exec")
    except SyntaxError as exc:
        return [f"line {exc.lineno or 0}: syntax error: {exc.msg}"]
    except (ValueError, RecursionError, MemoryError) as exc:
        return [f"line 0: source cannot be parsed: {type(exc).__name__}: {exc}"]
    checker = _Checker(_imported_names(tree))
    try:
        checker.visit(tree)
    except RecursionError:
        return ["line 0: code is nested too deeply to check"]
    return checker.report()


def _imported_names(tree: ast.AST) -> frozenset[str]:
    """Names bound by import statements anywhere in the module (``import a.b`` binds ``a``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add(alias.asname or alias.name.split(".")[0])
    return frozenset(names)


def _root_name(node: ast.expr) -> str | None:
    """The plain name an attribute/subscript chain starts from (``a`` in ``a.b[0].c``), if any."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_module_allowed(dotted: str) -> bool:
    return dotted in code_policy.ALLOWED_MODULES or dotted in code_policy.ALLOWED_SUBMODULES


def _format_field_attributes(text: str) -> list[str]:
    """Attribute names used in ``str.format`` replacement fields of ``text`` (nested specs too)."""
    found: list[str] = []
    try:
        parsed = list(string.Formatter().parse(text))
    except (ValueError, IndexError):
        return found
    for _literal, field_name, format_spec, _conversion in parsed:
        if field_name:
            found.extend(_FORMAT_FIELD_ATTRIBUTE.findall(field_name))
        if format_spec and "{" in format_spec:
            found.extend(_format_field_attributes(format_spec))
    return found


class _Checker(ast.NodeVisitor):
    """Collects ``(line, reason)`` pairs while walking one module's AST."""

    def __init__(self, imported_names: frozenset[str]) -> None:
        self._imported = imported_names
        self._found: list[tuple[int, str]] = []

    def report(self) -> list[str]:
        unique = sorted(set(self._found))
        return [f"line {line}: {reason}" for line, reason in unique]

    def _flag(self, node: ast.AST, reason: str) -> None:
        self._found.append((getattr(node, "lineno", 0), reason))

    def _check_binding(self, node: ast.AST, name: str | None) -> None:
        if name and code_policy.is_dunder(name) and name not in code_policy.ALLOWED_DUNDER_NAMES:
            self._flag(node, f"binding dunder name '{name}' is not allowed")

    # -- imports ------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not _is_module_allowed(alias.name):
                self._flag(node, f"import of '{alias.name}' is not allowed")
            self._check_binding(node, alias.asname)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self._flag(node, "relative imports are not allowed")
            return
        if not _is_module_allowed(module):
            self._flag(node, f"import from '{module}' is not allowed")
            return
        denied = code_policy.DENIED_MODULE_MEMBERS.get(module, frozenset())
        for alias in node.names:
            if alias.name == "*":
                self._flag(node, f"'from {module} import *' is not allowed")
            elif alias.name in denied:
                self._flag(node, f"import of '{module}.{alias.name}' is not allowed")
            elif alias.name.startswith("_"):
                self._flag(node, f"import of private member '{module}.{alias.name}' is not allowed")
            self._check_binding(node, alias.asname)

    # -- names and statements -----------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if node.id in code_policy.FORBIDDEN_BUILTINS:
            self._flag(node, f"use of '{node.id}' is not allowed")
        elif node.id in code_policy.REFLECTIVE_BUILTINS:
            self._flag(node, f"'{node.id}' may only be called directly with a constant name")
        elif code_policy.is_dunder(node.id) and node.id not in code_policy.ALLOWED_DUNDER_NAMES:
            self._flag(node, f"use of dunder name '{node.id}' is not allowed")

    def visit_Global(self, node: ast.Global) -> None:
        self._flag(node, "'global' statements are not allowed")

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self._flag(node, "'nonlocal' statements are not allowed")

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self._check_binding(node, node.name)
        self.generic_visit(node)

    def visit_Match(self, node: ast.Match) -> None:
        # Class patterns read the attributes a class lists in __match_args__ by name at run time,
        # out of reach of the attribute rules (a sandbox escape found in review).
        self._flag(node, "'match' statements are not allowed")
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._check_binding(node, node.name)
        for keyword in node.keywords:
            self._flag(node, f"class keyword '{keyword.arg}' is not allowed (no metaclasses)")
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id == "type":
                self._flag(node, "subclassing 'type' is not allowed (no metaclasses)")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if code_policy.is_dunder(node.name) and node.name not in code_policy.DEFINABLE_DUNDER_METHODS:
            self._flag(node, f"defining dunder method '{node.name}' is not allowed")
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        self._check_binding(node, node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        self._check_binding(node, node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        self._check_binding(node, node.rest)
        self.generic_visit(node)

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        for attr in node.kwd_attrs:  # `case C(attr=x)` reads C-instance.attr
            reason = code_policy.attribute_violation(attr)
            if reason:
                self._flag(node, reason)
        self.generic_visit(node)

    # -- attributes ---------------------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        receiver = node.value.id if isinstance(node.value, ast.Name) else None
        reason = code_policy.attribute_violation(node.attr, receiver)
        if reason:
            self._flag(node, reason)
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            root = _root_name(node)
            if root in self._imported:
                self._flag(node, f"assigning or deleting attributes of imported '{root}' is not allowed")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in code_policy.REFLECTIVE_BUILTINS:
            self._check_reflective_call(func.id, node)
            for child in [*node.args, *node.keywords]:
                self.visit(child)
            return
        self.generic_visit(node)

    def _check_reflective_call(self, name: str, node: ast.Call) -> None:
        low, high = _REFLECTIVE_ARITY[name]
        args = node.args
        if node.keywords or any(isinstance(a, ast.Starred) for a in args) or not low <= len(args) <= high:
            self._flag(node, f"'{name}' must be called with {low}-{high} plain positional arguments")
            return
        attr = args[1]
        if not (isinstance(attr, ast.Constant) and isinstance(attr.value, str)):
            self._flag(node, f"'{name}' needs a constant string attribute name")
            return
        reason = code_policy.attribute_violation(attr.value)  # as strict as the run-time check
        if reason:
            self._flag(node, f"{name}(): {reason}")
        if name in _REFLECTIVE_WRITERS and _root_name(args[0]) in self._imported:
            self._flag(node, f"{name}() on imported '{_root_name(args[0])}' is not allowed")

    # -- string constants used as format strings ----------------------------------------------
    def visit_Constant(self, node: ast.Constant) -> None:
        if (
            isinstance(node.value, str)
            and code_policy.is_dunder(node.value)
            and node.value not in code_policy.SAFE_DUNDER_ATTRIBUTES
        ):
            self._flag(node, f"dunder string constant '{node.value}' is not allowed")
        if isinstance(node.value, str) and "{" in node.value and "." in node.value:
            for attr in _format_field_attributes(node.value):
                if attr in code_policy.CLOCK_ATTRIBUTES:
                    continue  # a format field cannot call; reading `.now` there is harmless
                reason = code_policy.attribute_violation(attr)
                if reason:
                    self._flag(node, f"format field: {reason}")
