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
    """Which implementation plays the paper's LLM roles (today: the EnvGen code writer and reviser).

    ``backend``: ``programmatic`` (the offline default, no model), ``openai`` (any OpenAI-compatible
    endpoint: ``base_url``, ``model``, key from the environment variable named by ``api_key_env``) or
    ``transformers`` (a local Hugging Face model directory, ``model_dir``). Model replies are cached in
    ``$ENVFACTORY_HOME/llm_cache.sqlite`` keyed by the request's hash, so a re-run is reproducible and
    free; ``token_budget`` (0 = unlimited) caps the tokens one materialization may spend.
    """

    backend: str = "programmatic"
    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    model_dir: str = ""
    token_budget: int = 0
    max_revisions: int = 3
    max_concurrency: int = 4
    timeout_s: float = 120.0

    def make_backend(self, cache_path: Path):
        """None for ``programmatic``, else a chat backend; raises ``dg.Failure`` naming a bad setting."""
        import os

        from envfactory_assets.llm.base import BackendConfigError

        try:
            if self.backend == "programmatic":
                return None
            if self.backend == "openai":
                from envfactory_assets.llm.openai_backend import OpenAICompatibleBackend

                return OpenAICompatibleBackend(
                    self.base_url or None, self.model or None, os.environ.get(self.api_key_env) or None,
                    timeout_s=self.timeout_s, max_concurrency=self.max_concurrency, cache_path=cache_path,
                    token_budget=self.token_budget or None)
            if self.backend == "transformers":
                from envfactory_assets.llm.transformers_backend import TransformersBackend

                return TransformersBackend(self.model_dir)
        except BackendConfigError as exc:
            raise dg.Failure(f"model_backend: {exc}") from exc
        raise dg.Failure(f"model_backend.backend must be programmatic, openai or transformers, got {self.backend!r}")


class VerificationGate(dg.ConfigurableResource):
    """Floor of the blocking pass-rate check on ``verified_environments`` (share of environments passing)."""

    min_pass_rate: float = 0.8


# --- curation (issue 6.9) ---------------------------------------------------------------------------------
def user_curation(envfactory: EnvFactoryHome):
    """The validated ``$ENVFACTORY_HOME/curation.yaml``; raises ``dg.Failure`` naming the file and the problem."""
    from envfactory_assets.curation import CurationError, curation_path, load_curation

    try:
        return load_curation(curation_path(envfactory.root()))
    except CurationError as exc:
        raise dg.Failure(f"curation file: {exc}") from exc


# --- incremental re-synthesis (issue 6) -----------------------------------------------------------------
def user_resources_dir(envfactory: EnvFactoryHome) -> Path:
    """``$ENVFACTORY_HOME/user_resources``: a user folder of extra OpenAPI documents or MCP tool lists, scanned after the corpus and
    watched by the ``resource_files`` sensor; every document accepted there becomes an environment."""
    from envfactory_assets.sources.resource_kinds import USER_RESOURCES_DIR

    return envfactory.root() / USER_RESOURCES_DIR
