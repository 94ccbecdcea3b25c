"""Dagster resources: where the store and files live, and which model backend plays the LLM roles."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from envfactory_assets import settings
from envfactory_assets.store.db import Store

STORE_POOL = "envfactory_store"


class EnvFactoryHome(dg.ConfigurableResource):
    """``ENVFACTORY_HOME`` and the paths under it (store, corpus, models, checkpoints).

    ``home`` empty means ``$ENVFACTORY_HOME`` (default ``./.envfactory``) at run time.
    """

    home: str = ""

    def root(self) -> Path:
        return Path(self.home).expanduser().resolve() if self.home else settings.envfactory_home()

    def store(self) -> Store:
        return Store(settings.store_path(self.root()), retry_seconds=120.0)

    def corpus_dir(self) -> Path:
        return settings.corpus_dir(self.root())

    def models_dir(self) -> Path:
        return settings.models_dir(self.root())

    def checkpoints_dir(self) -> Path:
        return settings.checkpoints_dir(self.root())


class ModelBackend(dg.ConfigurableResource):
    """Which implementation plays the paper's LLM roles.

    ``programmatic`` (the offline default) needs no model; model-backed roles (an OpenAI-compatible
    endpoint or a local transformers model) arrive with issue 3 and are refused clearly until then.
    """

    backend: str = "programmatic"

    def require_programmatic(self) -> None:
        if self.backend != "programmatic":
            raise dg.Failure(f"model backend {self.backend!r} is not available yet; use 'programmatic'")


class VerificationGate(dg.ConfigurableResource):
    """Floor of the blocking pass-rate check on ``verified_environments`` (share of environments passing)."""

    min_pass_rate: float = 0.8
