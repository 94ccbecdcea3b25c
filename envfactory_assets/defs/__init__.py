"""The Dagster layer: assets, asset checks, resources and jobs. No algorithm lives here."""
