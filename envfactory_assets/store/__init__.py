"""The DuckDB store: schema, idempotent writes, gates, lineage, reports."""
