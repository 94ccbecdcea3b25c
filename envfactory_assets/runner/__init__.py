"""Running the asset graph outside Dagster's own launchers: which config a selection takes, two-phase
materialization, stale assets. The CLI imports this package; nothing in ``defs`` or below imports it, so
the Dagster layer never depends on how a run is started."""
