"""Passed environments of a store, as Environment dicts (docs/design.md), less what curation excludes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envfactory_assets.curation import Curation, filter_environments
from envfactory_assets.envgen.environment_dict import as_environment
from envfactory_assets.store.db import Store


@dataclass(frozen=True)
class PassedEnvironments:
    """What the catalogue serves.

    Attributes:
        environments: ``{env_id: Environment dict}`` of every environment whose current verification passed
            and that curation keeps (curated tools removed from it).
        verified_ids: ``{env_id: verified_environments row id}`` for those environments (lineage).
        excluded: ``{env_id or node id: reason}`` of what the curation file removed.
    """

    environments: dict[str, dict[str, Any]]
    verified_ids: dict[str, str]
    excluded: dict[str, str] = field(default_factory=dict)


def passed_environments(store: Store, curation: Curation | None = None) -> PassedEnvironments:
    """The passed environments of ``store`` (see :class:`PassedEnvironments`), less what ``curation``
    excludes (environments and tools; ``None`` excludes nothing).

    Raises:
        FileNotFoundError: the store does not exist. ``StoreBusy``: another process writes it.
    """
    by_id = {r["id"]: r for r in store.read("environments", "status = 'built'")}
    ver_rows = [v for v in store.read("verified_environments", "status = 'passed'") if v["environment_id"] in by_id]
    envs = {v["env_id"]: as_environment(by_id[v["environment_id"]]) for v in ver_rows}
    dropped: dict[str, str] = {}
    if curation is not None:
        envs, dropped = filter_environments(envs, curation)
    return PassedEnvironments(envs, {v["env_id"]: v["id"] for v in ver_rows if v["env_id"] in envs}, dropped)


def unserved_nodes(environments: Mapping[str, Mapping[str, Any]], node_ids: Iterable[str]) -> list[str]:
    """The tool-graph node ids (``"{env_id}.{tool_name}"``) among ``node_ids`` that ``environments`` (the
    catalogue's, curated) do not serve, sorted: their environment is not there (excluded, or its verification
    no longer passes) or lacks the tool (excluded). Rows made before the curation file changed hold such ids."""
    served = {f"{env_id}.{tool['name']}" for env_id, env in environments.items() for tool in env["tools"]}
    return sorted(set(node_ids) - served)


def servable_env_ids(store: Store) -> list[str]:
    """Env ids with a current ``verified_environments`` row of status ``passed``, sorted."""
    return sorted({row["env_id"] for row in store.read("verified_environments", "status = 'passed'")})
