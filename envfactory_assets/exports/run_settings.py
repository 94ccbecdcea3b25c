"""The settings of the dataset exports (``verl_export``, ``sharegpt_export``, ``hf_dataset_export``).

Each default and help text is stated once, in a field's metadata; the Dagster run config and
docs/configuration.md are generated from :class:`ExportRunSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass

from envfactory_assets.config_checks import setting


@dataclass(frozen=True)
class ExportRunSpec:
    """Which rows are exported, by the licences of their environments' sources. A blank entry of
    ``allowed_licences`` is refused by :func:`~envfactory_assets.exports.stage.build_exports` before anything
    is written (the one place that check is stated)."""

    allowed_licences: tuple[str, ...] = setting(
        (),
        "licence names (as in source_resources.license_name, case-insensitive, or their SPDX ids) whose rows "
        "are exported; 'unspecified' names sources that state no licence; empty exports every row.",
    )
