"""The DuckDB store: schema, idempotent writes, gates, lineage (the reports that read it are in ``reporting``)."""
