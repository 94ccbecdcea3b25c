"""What ``envfactory run`` adds to the in-process materialization of :mod:`envfactory_assets.defs.pipeline_runs`
(re-exported here for the CLI and the tests): the names of its runs' jobs and the stale assets after a run."""

import hashlib
import re
from collections.abc import Sequence
from typing import Any

import dagster as dg

from envfactory_assets.defs.dagster_private import asset_graph, stale_asset_keys
from envfactory_assets.defs.pipeline_runs import PIPELINE_JOB, assets_left, check_partitions, materialize_pipeline

__all__ = ["PIPELINE_JOB", "assets_left", "check_partitions", "materialize_pipeline", "run_job_name", "stale_assets"]


_SLUG_WORDS = {"+": "_plus_", "*": "_all_", ",": "__", ":": "_", "/": "_"}
_MAX_JOB_NAME = 80


def run_job_name(selection: str | None, prefix: str = PIPELINE_JOB) -> str:
    """The job name of an ``envfactory run [--select SELECTION]``: ``prefix`` (``envfactory_run``) for the
    whole graph, else ``<prefix>__`` and the selection spelt with Dagster's name characters (``+`` as
    ``plus``, ``*`` as ``all``, ``,`` as ``__``; ``refined_trajectories+`` gives
    ``envfactory_run__refined_trajectories_plus``). Dagster's ``materialize`` would name every run
    ``__ephemeral_asset_job__``.

    A name over 80 characters is cut and ends with 8 hex digits of the selection's hash, so two selections
    never share a name by being cut; spellings that differ only in marks (``a+b``, ``a_plus_b``) share one,
    and the run's ``envfactory/command`` tag keeps the exact text.
    """
    if not selection or not selection.strip():
        return prefix
    text = selection.strip()
    for mark, word in _SLUG_WORDS.items():
        text = text.replace(mark, word)
    slug = re.sub(r"_{3,}", "__", re.sub(r"[^A-Za-z0-9_]+", "_", text)).strip("_") or "selection"
    name = f"{prefix}__{slug}"
    if len(name) > _MAX_JOB_NAME:
        digest = hashlib.sha256(selection.encode()).hexdigest()[:8]
        name = f"{name[: _MAX_JOB_NAME - 9].rstrip('_')}_{digest}"
    return name


def stale_assets(instance: dg.DagsterInstance, assets: Sequence[Any]) -> list[str]:
    """Unpartitioned assets that were materialized and are now stale by Dagster's rules (an upstream data
    version or their code version changed since), in graph order; never-materialized ones are left out.

    Uses Dagster's stale-status resolver (the one behind the UI's "Stale" badge).
    """
    graph = asset_graph([a for a in assets if isinstance(a, dg.AssetsDefinition)])
    return [key.to_user_string() for key in stale_asset_keys(instance, graph)]
