"""The import layering of envfactory_assets, read from the source with ``ast`` (function-level imports
included): imports point down, ``cli`` -> ``runner`` -> ``definitions`` / ``defs`` -> core packages ->
``store`` / ``runtime`` / ``llm``, and only the Dagster layer imports Dagster."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "envfactory_assets"
# The Dagster layer and what starts runs; nothing else may import Dagster or be imported by core code.
DAGSTER_LAYER = {
    "envfactory_assets.defs",
    "envfactory_assets.definitions",
    "envfactory_assets.cli",
    "envfactory_assets.runner",
}
# The lowest layer: each imports nothing of envfactory_assets outside itself.
FOUNDATIONS = {"envfactory_assets.store", "envfactory_assets.runtime", "envfactory_assets.llm"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it. ``from pkg import name`` imports ``pkg.name`` when
    that is a module, else ``pkg`` (a package's ``__init__``); relative imports are resolved."""
    name = module_name(path)
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            submodules = {f"{source}.{alias.name}" for alias in node.names} & set(modules())
            out |= submodules or {source}
            if len(submodules) < len(node.names):
                out.add(source)
    return out


def internal_graph() -> dict[str, set[str]]:
    return {name: {m for m in imported(path) if m in modules() and m != name} for name, path in modules().items()}


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as a path that starts and ends on the same node), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_reader_sees_every_kind_of_import():
    graph = internal_graph()
    assert "envfactory_assets.defs.pipeline_runs" in graph["envfactory_assets.runner.materialize"]  # top level
    assert "envfactory_assets.definitions" in graph["envfactory_assets.cli"]  # inside a function
    assert "envfactory_assets.mcp_server" in graph["envfactory_assets.cli"]  # a package's __init__
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_among_modules():
    assert find_cycle(internal_graph()) is None


def test_no_import_cycle_among_packages():
    packages: dict[str, set[str]] = {}
    for module, targets in internal_graph().items():
        packages.setdefault(package_of(module), set()).update(
            package_of(t) for t in targets if package_of(t) != package_of(module)
        )
    assert find_cycle(packages) is None


def test_only_the_dagster_layer_imports_dagster():
    importers = {
        name
        for name, path in modules().items()
        if any(m.split(".")[0] == "dagster" or m.startswith("dagster_") for m in imported(path))
    }
    assert importers and all(package_of(name) in DAGSTER_LAYER for name in importers), sorted(
        n for n in importers if package_of(n) not in DAGSTER_LAYER
    )


def test_core_packages_never_import_the_dagster_layer():
    leaks = sorted(
        (name, target)
        for name, targets in internal_graph().items()
        if package_of(name) not in DAGSTER_LAYER
        for target in targets
        if package_of(target) in DAGSTER_LAYER
    )
    assert leaks == []


def test_the_dagster_layer_never_imports_the_runner_or_the_cli():
    up = {"envfactory_assets.runner", "envfactory_assets.cli"}
    leaks = sorted(
        (name, target)
        for name, targets in internal_graph().items()
        if package_of(name) in {"envfactory_assets.defs", "envfactory_assets.definitions"}
        for target in targets
        if package_of(target) in up
    )
    assert leaks == []


def test_store_runtime_and_llm_import_nothing_above_them():
    leaks = sorted(
        (name, target)
        for name, targets in internal_graph().items()
        if package_of(name) in FOUNDATIONS
        for target in targets
        if package_of(target) != package_of(name)
    )
    assert leaks == []


def test_tool_use_sits_below_the_stages_that_share_it():
    """``tooluse`` (template, parser, episode, reward, split) is shared by training, evaluation, synthesis
    and exports, so it may reach down to the foundations only; and evaluation, synthesis and exports take
    nothing from ``training`` but the base model (which the evaluation loads)."""
    allowed_below = FOUNDATIONS | {"envfactory_assets.tooluse"}
    leaks = sorted(
        (name, target)
        for name, targets in internal_graph().items()
        if package_of(name) == "envfactory_assets.tooluse"
        for target in targets
        if package_of(target) not in allowed_below
    )
    assert leaks == []
    reach_up = sorted(
        (name, target)
        for name, targets in internal_graph().items()
        if package_of(name) in {"envfactory_assets.evaluation", "envfactory_assets.synth", "envfactory_assets.exports"}
        for target in targets
        if package_of(target) == "envfactory_assets.training"
        and target not in {"envfactory_assets.training.base_model", "envfactory_assets.training.threads"}
    )
    assert reach_up == []


# The packages that may read the benchmarks bfcl-eval ships: the evaluation runs them, decontamination
# compares environments with them. No synthesis stage, training or export may see them.
BENCHMARK_READERS = {"envfactory_assets.evaluation", "envfactory_assets.decontam"}


def bfcl_eval_uses(path: Path) -> set[str]:
    """Imports of ``bfcl_eval`` in ``path`` and string constants naming it (``importlib.resources.files(
    "bfcl_eval")``, ``import_module("bfcl_eval...")``), which read the wheel without an import statement."""
    uses = {m for m in imported(path) if m.split(".")[0] == "bfcl_eval"}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and (node.value == "bfcl_eval" or node.value.startswith("bfcl_eval."))
        ):
            uses.add(node.value)
    return uses


def test_the_reader_sees_bfcl_eval_in_imports_and_resource_names():
    sample = PACKAGE / "evaluation" / "bfcl.py"
    assert "bfcl_eval" in bfcl_eval_uses(sample)  # importlib.resources.files("bfcl_eval")
    assert "bfcl_eval.constants.executable_backend_config" in bfcl_eval_uses(sample)  # function-level import


def test_only_evaluation_and_decontamination_read_bfcl_eval():
    readers = {name for name, path in modules().items() if bfcl_eval_uses(path)}
    assert readers & {"envfactory_assets.evaluation.bfcl_single_turn", "envfactory_assets.decontam.benchmarks"}
    assert sorted(n for n in readers if package_of(n) not in BENCHMARK_READERS) == []


def own_package_imports(name: str, path: Path) -> list[str]:
    """The ``from P import ...`` statements of module ``name`` whose ``P`` is a package that contains it: such an
    import runs ``P/__init__.py``, which may be importing ``name`` itself at that moment (an import cycle)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                here = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
                source = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
            if name.startswith(source + ".") and path.name != "__init__.py" or source == name:
                found.append(f"line {node.lineno}: from {source} import ...")
    return found


def test_the_reader_sees_a_module_importing_its_own_package(tmp_path):
    module = tmp_path / "static_check.py"
    module.write_text("from envfactory_assets.runtime import policy\nfrom envfactory_assets.store import db\n")
    assert own_package_imports("envfactory_assets.runtime.static_check", module) == [
        "line 1: from envfactory_assets.runtime import ..."
    ]


def reexporting_packages() -> set[str]:
    """Packages whose ``__init__`` imports modules of their own (re-exports): importing one runs those imports."""
    graph = internal_graph()
    return {
        name
        for name, path in modules().items()
        if path.name == "__init__.py" and any(m.startswith(name + ".") for m in graph[name])
    }


def test_no_module_imports_the_package_that_contains_it():
    """A module must not import a containing package that re-exports (``from envfactory_assets.runtime import x``
    inside ``runtime``), or the package's ``__init__`` and the module import each other."""
    reexporting = reexporting_packages()
    assert "envfactory_assets.runtime" in reexporting
    offenders = {
        name: found
        for name, path in modules().items()
        if (
            found := [
                f for f in own_package_imports(name, path) if f.split("from ")[1].split(" import")[0] in reexporting
            ]
        )
    }
    assert offenders == {}
