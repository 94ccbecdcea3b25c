"""Store rows of the ``environments`` and ``verified_environments`` stages."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from envfactory_assets.envgen.builder import MAX_RESOURCES, BuildError, build_environment, build_mcp_environment

# as_environment is also re-exported: the environments asset and the tests import it from here
from envfactory_assets.envgen.environment_dict import ENV_FIELDS, as_environment
from envfactory_assets.envgen.model_tools import write_unmapped_tools
from envfactory_assets.envgen.revision import DEFAULT_MAX_REVISIONS, build_with_revisions
from envfactory_assets.envgen.tools import BEYOND_CRUD
from envfactory_assets.envgen.verify import verify_environment
from envfactory_assets.llm.base import BackendConfigError, concurrency_of
from envfactory_assets.runtime.sandbox import SandboxLimits
from envfactory_assets.sources.mcp_resources import unmapped_tool_operations
from envfactory_assets.sources.mcp_tools import MCP_KIND, load_tool_list
from envfactory_assets.sources.scan import load_document
from envfactory_assets.sources.unmapped import unmapped_operations
from envfactory_assets.store.ids import content_id

#: resources a selected document has before its operations beyond CRUD rank it: fewer makes a small environment
FULL_RESOURCES = 3
#: operation kinds that write the state
_WRITES = ("create", "update", "delete", "action", "relation_add", "relation_remove", "transfer", "side_effect")


def select_resources(
    resources: list[dict[str, Any]], per_domain: int, include: Iterable[str] = (), exclude: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """Pick up to ``per_domain`` resources per domain, deterministically.

    Documents with at least :data:`FULL_RESOURCES` stateful resources come first (an environment's size),
    then those with more operations beyond CRUD among the kept resources (:data:`BEYOND_CRUD`: the corpus has
    few, about 5% of the operations it maps within the cap of 4 resources, so every one counts), then those
    with more resources (up to 4), then those whose tables can be written (a document of read-only catalogues
    teaches less), then a stable hash of the resource key spreads the choice over providers. ``include`` keys
    are always taken, ``exclude`` never.
    MCP tool lists (``kind = "mcp_tool_list"``) are all taken, in addition to ``per_domain``.

    Raises:
        ValueError: ``per_domain`` is not a non-negative integer; ``include`` or ``exclude`` is a string or
            holds something other than keys (:func:`_key_set`); a row's ``resource_key`` or ``domain`` is not a
            string, or its ``n_resources`` or ``operations_by_kind`` counts are not non-negative integers
            (:func:`_rank_counts`; the message names the row, and an excluded row's counts are not read).
    """
    if isinstance(per_domain, bool) or not isinstance(per_domain, int) or per_domain < 0:
        raise ValueError(f"per_domain must be a count of 0 or more resources per domain, got {per_domain!r}")
    include, exclude = _key_set("include", include), _key_set("exclude", exclude)
    by_domain: dict[str, list[dict[str, Any]]] = defaultdict(list)
    tool_lists = []  # every MCP tool list is built, on top of the per-domain choice
    counts: dict[int, tuple[int, dict[str, int]]] = {}
    for r in resources:
        if not isinstance(r.get("resource_key"), str):
            raise ValueError(f"source resource at {r.get('path', '?')!r}: resource_key is {r.get('resource_key')!r}")
        if r["resource_key"] in exclude:
            continue  # an excluded row is never ranked, so its counts may be anything
        if r.get("kind") == MCP_KIND:
            tool_lists.append(r)
        else:
            counts[id(r)] = _rank_counts(r)
            by_domain[r["domain"]].append(r)
    chosen = []
    for domain in sorted(by_domain):
        ranked = sorted(
            by_domain[domain],
            key=lambda r: (
                r["resource_key"] not in include,
                counts[id(r)][0] < FULL_RESOURCES,
                -sum(counts[id(r)][1].get(k, 0) for k in BEYOND_CRUD),
                -min(counts[id(r)][0], 4),
                not any(counts[id(r)][1].get(k) for k in _WRITES),
                hashlib.sha256(r["resource_key"].encode()).hexdigest(),
            ),
        )
        forced = [r for r in ranked if r["resource_key"] in include]
        chosen.extend(
            forced + [r for r in ranked if r["resource_key"] not in include][: max(per_domain - len(forced), 0)]
        )
    return chosen + sorted(tool_lists, key=lambda r: r["resource_key"])


def _key_set(name: str, keys: Any) -> set[str]:
    """The resource keys of the ``include`` or ``exclude`` setting (``name``) as a set.

    Raises:
        ValueError: ``keys`` is a string (a single key written without its list, ``include: github__api``, would
            be read letter by letter), not iterable, or holds something other than strings.
    """
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise ValueError(f"{name} must be a list of resource keys, got {keys!r}")
    found = list(keys)
    if not all(isinstance(k, str) for k in found):
        raise ValueError(f"{name} must be a list of resource keys, got {found!r}")
    return set(found)


def _rank_counts(row: dict[str, Any]) -> tuple[int, dict[str, int]]:
    """A ``source_resources`` row's ``n_resources`` and ``operations_by_kind`` (missing or null: none), the
    counts :func:`select_resources` ranks it by; the row's ``resource_key`` is a string.

    Raises:
        ValueError: naming the row (its ``resource_key``) when its domain is not a string, or a count is not a
            non-negative integer: a null, a string, a fraction, a boolean or a NaN would make the ranking fail
            inside the sort or depend on the rows' order.
    """
    name = repr(row["resource_key"])
    if not isinstance(row.get("domain"), str):
        raise ValueError(f"source resource {name}: domain is {row.get('domain')!r}, not a string")

    def count(value: Any, what: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"source resource {name}: {what} is {value!r}, not a count (an integer of 0 or more)")
        return value

    n_resources = count(row.get("n_resources"), "n_resources")
    by_kind = row.get("operations_by_kind") or {}
    if not isinstance(by_kind, dict):
        raise ValueError(
            f"source resource {name}: operations_by_kind is {by_kind!r}, not a mapping of kind to operations"
        )
    return n_resources, {str(k): count(v, f"operations_by_kind[{k!r}]") for k, v in by_kind.items()}


def environment_row(
    resource: dict[str, Any],
    backend: Any = None,
    max_revisions: int = DEFAULT_MAX_REVISIONS,
    tool_threads: int = 1,
    resource_cap: int | None = MAX_RESOURCES,
) -> dict[str, Any]:
    """Build one ``environments`` row, with at most ``resource_cap`` resources as tables (None: all of the
    document's); a document that cannot be built gives a ``build_failed`` row.

    With a chat ``backend`` the code is written by the model and revised from verification failures
    (:func:`envfactory_assets.envgen.revision.build_with_revisions`, at most ``max_revisions``); the tool
    specs, tables and initial states are the programmatic builder's. An environment whose tools keep an MCP
    server's real signatures (:mod:`envfactory_assets.envgen.mcp_signatures`) keeps the builder's code too.
    Then the model writes the spec and code of each operation (or MCP tool) the rules do not map
    (:func:`operations_to_write`), ``tool_threads`` at once, each through the same gate and revision loop
    (:func:`envfactory_assets.envgen.model_tools.write_unmapped_tools`); the tools that pass are added. Every
    attempt (source, report, diff) is kept in the row's ``revisions``, each unmapped operation's outcome in
    ``revisions["unmapped_operations"]``.
    """
    path = Path(resource["corpus_root"]) / resource["path"]
    base = {"env_id": resource["resource_key"], "source_resource_id": resource["id"], "domain": resource["domain"]}
    revisions: dict[str, Any] | None = None
    try:
        env = programmatic_environment(resource, path, resource_cap)
        content_id("env", env)  # fails here, inside the guard, on content a store cannot hold
        if backend is not None and any(t.get("mcp_binding") for t in env["tools"]):
            # tools with an MCP server's real signature run on the builder's code: the model would have to
            # rediscover how each real parameter binds to the state; the model still writes the unmapped tools
            revisions = {"status": "programmatic", "stop_reason": "real MCP signatures", "reasons": [], "attempts": []}
            env, revisions["unmapped_operations"] = write_unmapped_tools(
                env, operations_to_write(resource, path), backend, max_revisions, threads=tool_threads
            )
        elif backend is not None:
            result = build_with_revisions(env, backend, max_revisions)
            env = result.environment
            revisions = {k: v for k, v in result.as_dict().items() if k != "environment"}
            if not result.passed:
                raise BuildError(
                    f"model-written code never passed verification ({result.stop_reason}): "
                    + "; ".join(result.reasons[:3])
                )
            env, revisions["unmapped_operations"] = write_unmapped_tools(
                env, operations_to_write(resource, path, resource_cap), backend, max_revisions, threads=tool_threads
            )
    except BackendConfigError:
        raise  # a misconfigured backend fails every environment: stop the stage with the setting's name
    except Exception as exc:  # one bad document must never stop the stage: it becomes a build_failed row
        reason = f"{resource['path']}: {type(exc).__name__}: {str(exc)[:400]}"
        row = {
            **base,
            "status": "build_failed",
            "reasons": [reason],
            "provenance": resource["path"],
            "n_tools": 0,
            **dict.fromkeys(ENV_FIELDS),
            "builder": _builder(backend),
            "revisions": revisions,
        }
    else:
        row = {
            **base,
            "status": "built",
            "reasons": [],
            "provenance": env["provenance"],
            "n_tools": len(env["tools"]),
            **{k: env[k] for k in ENV_FIELDS},
            "builder": _builder(backend),
            "revisions": revisions,
        }
    row["id"] = content_id("env", {k: row[k] for k in ("env_id", "source_resource_id", "status", *ENV_FIELDS)})
    return row


def environment_rows(
    resources: list[dict[str, Any]],
    backend: Any = None,
    max_revisions: int = DEFAULT_MAX_REVISIONS,
    progress: Callable[[], None] | None = None,
    resource_cap: int | None = MAX_RESOURCES,
) -> list[dict[str, Any]]:
    """:func:`environment_row` of every resource (at most ``resource_cap`` tables each; None: no cap), in the
    order of ``resources``.

    With a chat ``backend``, environments are written in as many threads as it serves requests at once
    (:func:`~envfactory_assets.llm.base.concurrency_of`): each environment's draft, verification and
    revisions stay in its thread (a revision answers its own verification), every verification runs in its
    own sandbox worker, and each row depends on its resource and its requests alone, so the rows equal a
    sequential run's. The threads the environments leave of that number write their unmapped operations'
    tools (one environment: all of them). ``progress()`` is called after each environment (from a pool thread).

    Raises:
        BackendConfigError: the backend is misconfigured (the first one, in input order).
    """
    threads = min(concurrency_of(backend), len(resources)) if backend is not None else 1
    # the requests left over by the environments go to their unmapped operations' tools
    tool_threads = max(1, concurrency_of(backend) // max(threads, 1)) if backend is not None else 1

    def one(resource: dict[str, Any]) -> dict[str, Any]:
        row = environment_row(resource, backend, max_revisions, tool_threads, resource_cap)
        if progress is not None:
            progress()
        return row

    if threads <= 1:
        return [one(r) for r in resources]
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="envgen") as pool:
        futures = [pool.submit(one, r) for r in resources]
        try:
            return [f.result() for f in futures]
        finally:
            for f in futures:  # after a failure, what has not started does not start
                f.cancel()


def programmatic_environment(
    resource: dict[str, Any], path: Path, resource_cap: int | None = MAX_RESOURCES
) -> dict[str, Any]:
    """The programmatic builder's environment for a resource of either kind (OpenAPI, MCP tool list), with at
    most ``resource_cap`` tables (None: no cap)."""
    if resource.get("kind") == MCP_KIND:
        return build_mcp_environment(resource, mcp_document(resource, path), resource_cap)
    return build_environment(resource, openapi_document(resource, path), resource_cap)


def mcp_document(resource: dict[str, Any], path: Path) -> dict[str, Any]:
    """The validated MCP tool list of ``resource`` at ``path``.

    Raises:
        BuildError: the file changed since it was scanned (its sha256 differs from the resource's).
    """
    document, digest = load_tool_list(path)
    if digest != resource["sha256"]:
        raise BuildError(f"{path} changed since it was scanned (sha256 differs); re-materialize source_resources")
    return document


def operations_to_write(
    resource: dict[str, Any], path: Path, resource_cap: int | None = MAX_RESOURCES
) -> list[dict[str, Any]]:
    """The operations a model writes tools for in ``resource``'s environment: those the rules do not map with
    ``resource_cap`` resources kept (None: every resource), of its OpenAPI document
    (:func:`~envfactory_assets.sources.unmapped.unmapped_operations`) or its MCP tool list
    (:func:`~envfactory_assets.sources.mcp_resources.unmapped_tool_operations`).

    Raises:
        BuildError: the file changed since it was scanned.
    """
    if resource.get("kind") == MCP_KIND:
        return unmapped_tool_operations(mcp_document(resource, path), resource_cap)
    return unmapped_operations(openapi_document(resource, path), resource_cap)


def openapi_document(resource: dict[str, Any], path: Path) -> dict[str, Any]:
    """The parsed OpenAPI document of ``resource`` at ``path``.

    Raises:
        BuildError: the file changed since it was scanned (its sha256 differs from the resource's).
    """
    raw = path.read_bytes()
    if hashlib.sha256(raw).hexdigest() != resource["sha256"]:
        raise BuildError(f"{path} changed since it was scanned (sha256 differs); re-materialize source_resources")
    return load_document(raw, path.suffix.lower())


def _builder(backend: Any) -> str:
    return "programmatic" if backend is None else f"model:{type(backend).__name__}"


def verification_row(env_row: dict[str, Any], limits: SandboxLimits | None = None) -> dict[str, Any]:
    """Verify one environment row into a ``verified_environments`` row (status ``passed``/``failed``)."""
    base = {"environment_id": env_row["id"], "env_id": env_row["env_id"], "domain": env_row["domain"]}
    if env_row["status"] != "built":
        row = {
            **base,
            "status": "failed",
            "reasons": [f"not built: {r}" for r in env_row["reasons"] or []],
            "n_checks": 0,
            "n_failed": 0,
            "checks": [],
        }
    else:
        report = verify_environment(as_environment(env_row), limits)
        checks = [c.as_dict() for c in report.checks]
        row = {
            **base,
            "status": report.status,
            "reasons": report.reasons,
            "n_checks": len(checks),
            "n_failed": sum(1 for c in checks if not c["passed"]),
            "checks": checks,
        }
    row["id"] = content_id("ver", {"environment_id": env_row["id"], "status": row["status"], "checks": row["checks"]})
    return row


#: Environments verified at once, each in its own sandbox worker (2 cores: one per core).
DEFAULT_VERIFY_WORKERS = 2


def verify_all(
    env_rows: list[dict[str, Any]],
    limits: SandboxLimits | None = None,
    max_workers: int = DEFAULT_VERIFY_WORKERS,
    progress: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """Verify every environment, each in its own sandbox worker process, ``max_workers`` at a time;
    ``progress()`` is called (from a pool thread) after each environment."""

    def verify(row: dict[str, Any]) -> dict[str, Any]:
        result = verification_row(row, limits)
        if progress is not None:
            progress()
        return result

    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        return list(pool.map(verify, env_rows))
