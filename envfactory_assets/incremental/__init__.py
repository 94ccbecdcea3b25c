"""Incremental re-synthesis: partition keys, code versions, source watching and chain reuse (no Dagster)."""
