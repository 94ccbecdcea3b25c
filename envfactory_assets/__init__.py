"""EnvFactory-Assets: the EnvFactory method (arXiv 2605.18703) as a Dagster asset graph stored in DuckDB."""
