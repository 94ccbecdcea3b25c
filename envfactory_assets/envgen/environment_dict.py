"""The Environment dict (docs/design.md) of an ``environments`` row.

Kept apart from :mod:`envfactory_assets.envgen.stage`, which imports the builders, the verifier and the
sources (about half a second): ``serve-env`` and the catalogue only need to read a row back.
"""

from __future__ import annotations

from typing import Any

ENV_FIELDS = ("tools", "tables", "state_schema", "source", "initial_states", "seed_data")


def code_origin(builder: str | None) -> str:
    """Where an environment's code comes from, for the sandbox's policy (``SandboxWorker.load_environment``):
    ``"template"`` for the programmatic builder (fixed templates; spec text enters only as quoted
    literals), ``"model"`` for a model-written module, ``"untrusted"`` when unknown."""
    if builder == "programmatic":
        return "template"
    return "model" if builder and builder.startswith("model") else "untrusted"


def as_environment(row: dict[str, Any]) -> dict[str, Any]:
    """The Environment dict (docs/design.md) of an ``environments`` row, with its code's ``origin``."""
    return {
        "env_id": row["env_id"],
        "domain": row["domain"],
        **{k: row[k] for k in ENV_FIELDS},
        "origin": code_origin(row.get("builder")),
    }
