"""Dagster resources: where the store and files live, and which model backend plays the LLM roles."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from envfactory_assets import settings
from envfactory_assets.config_checks import SettingError, finite_number, one_of, whole_number
from envfactory_assets.envgen.revision import DEFAULT_MAX_REVISIONS
from envfactory_assets.llm.openai_backend import DEFAULT_MAX_CONCURRENCY, DEFAULT_TIMEOUT_S
from envfactory_assets.store.db import EmptyResultRefused, Store

STORE_POOL = "envfactory_store"

#: The setting that lets a stage write a result without passed rows over one with them (named in the error).
ALLOW_EMPTY_SETTING = "resources.envfactory.config.allow_empty: true"
#: The setting that lets a stage turn unchanged passed items into failed ones (named in the error).
ALLOW_REGRESSION_SETTING = "resources.envfactory.config.allow_regression: true"


class PipelineStore(Store):
    """The store as the assets write it: a refused empty result (:class:`EmptyResultRefused`) fails the step
    with its own one-line message rather than as an unexpected exception inside the step."""

    def replace_current_tables(self, tables, scope=None, **kwargs):
        """As :meth:`Store.replace_current_tables`; a refused empty result raises ``dg.Failure``."""
        try:
            return super().replace_current_tables(tables, scope, **kwargs)
        except EmptyResultRefused as exc:
            raise dg.Failure(str(exc)) from exc


class EnvFactoryHome(dg.ConfigurableResource):
    """``ENVFACTORY_HOME`` and the paths under it (store, corpus, models, checkpoints).

    ``home`` empty means ``$ENVFACTORY_HOME`` (default ``./.envfactory``) at run time.

    ``allow_empty`` (default false): a stage whose result holds no passed rows (empty, or every row failed)
    while the rows it would supersede include passed ones stops before writing anything, since that is
    almost always a setting gone wrong (``n_chains: 0``, ``memory_mb`` too small for a worker, a filter that
    matches nothing); set it to true to accept such a result.

    ``allow_regression`` (default false): likewise for a result in which some items still pass but one whose
    input is unchanged goes from passed to failed (see the field's description).
    """

    home: str = ""
    allow_empty: bool = False
    allow_regression: bool = Field(
        default=False,
        description=(
            "Accept a result in which an item whose input did not change (an environment with the same content "
            "hash) goes from passed to failed, even though other items still pass. Off by default: such a result "
            "nearly always comes from a setting (call_timeout_s too short, memory_mb too small), and the stage "
            "then writes nothing and names how many items, which, and the settings that differ from defaults."
        ),
    )

    def root(self) -> Path:
        """The resolved ``ENVFACTORY_HOME``."""
        return Path(self.home).expanduser().resolve() if self.home else settings.envfactory_home()

    def store(self) -> PipelineStore:
        """The store, refusing writes that would replace passed rows with none unless ``allow_empty``."""
        return PipelineStore(
            settings.store_path(self.root()),
            retry_seconds=120.0,
            refuse_empty=not self.allow_empty,
            override_hint=ALLOW_EMPTY_SETTING,
            refuse_regression=not self.allow_regression,
            regression_hint=ALLOW_REGRESSION_SETTING,
        )

    def corpus_dir(self) -> Path:
        return settings.corpus_dir(self.root())

    def models_dir(self) -> Path:
        return settings.models_dir(self.root())

    def checkpoints_dir(self) -> Path:
        return settings.checkpoints_dir(self.root())

    def embedding_cache_dir(self) -> Path:
        return settings.embedding_cache_dir(self.root())


BACKENDS = ("programmatic", "openai", "transformers")
#: The response cache of every model backend, inside ``$ENVFACTORY_HOME``.
LLM_CACHE_FILE = "llm_cache.sqlite"


class ModelBackend(dg.ConfigurableResource):
    """Which implementation plays the paper's LLM roles (the EnvGen code writer and reviser, the writer of the tools
    of the operations the rules do not map, the QueryGen roles).

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
    max_revisions: int = DEFAULT_MAX_REVISIONS
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    timeout_s: float = DEFAULT_TIMEOUT_S

    def check_settings(self) -> None:
        """Raise ``dg.Failure`` naming a setting of the wrong type or out of range (before any work)."""
        owner = "model_backend"
        try:
            one_of(owner, "backend", self.backend, BACKENDS)
            whole_number(owner, "token_budget", self.token_budget, low=0)
            whole_number(owner, "max_revisions", self.max_revisions, low=0)
            whole_number(owner, "max_concurrency", self.max_concurrency, low=1)
            finite_number(owner, "timeout_s", self.timeout_s, low=0.0, low_open=True)
        except SettingError as exc:
            raise dg.Failure(str(exc)) from exc

    def backend_for(self, home: Path):
        """:meth:`make_backend` with this resource's cache in ``home`` (``$ENVFACTORY_HOME``): every stage and
        the CLI's estimate share one cache file, so a reply paid for once is reused everywhere."""
        return self.make_backend(home / LLM_CACHE_FILE)

    def make_backend(self, cache_path: Path):
        """None for ``programmatic``, else a chat backend; raises ``dg.Failure`` naming a bad setting."""
        import os

        from envfactory_assets.llm.base import BackendConfigError

        self.check_settings()
        try:
            if self.backend == "programmatic":
                return None
            if self.backend == "openai":
                from envfactory_assets.llm.openai_backend import OpenAICompatibleBackend

                return OpenAICompatibleBackend(
                    self.base_url or None,
                    self.model or None,
                    os.environ.get(self.api_key_env) or None,
                    timeout_s=self.timeout_s,
                    max_concurrency=self.max_concurrency,
                    cache_path=cache_path,
                    token_budget=self.token_budget or None,
                )
            if self.backend == "transformers":
                from envfactory_assets.llm.transformers_backend import TransformersBackend

                return TransformersBackend(self.model_dir)
        except BackendConfigError as exc:
            raise dg.Failure(f"model_backend: {exc}") from exc
        raise dg.Failure(f"model_backend.backend must be programmatic, openai or transformers, got {self.backend!r}")


class VerificationGate(dg.ConfigurableResource):
    """Floor of the blocking pass-rate check on ``verified_environments`` (share of environments passing)."""

    min_pass_rate: float = 0.8

    def check_settings(self) -> None:
        """Raise ``dg.Failure`` unless ``min_pass_rate`` is a finite share in [0, 1]: above 1 (or NaN) no run
        can pass the gate, yet verification would still run and replace the stored results first."""
        try:
            finite_number("verification_gate", "min_pass_rate", self.min_pass_rate, low=0.0, high=1.0)
        except SettingError as exc:
            raise dg.Failure(str(exc)) from exc


# --- curation: user exclusions, read by every stage that selects environments or tools ----------------
def user_curation(envfactory: EnvFactoryHome):
    """The validated ``$ENVFACTORY_HOME/curation.yaml``; raises ``dg.Failure`` naming the file and the problem."""
    from envfactory_assets.curation import CurationError, curation_path, load_curation

    try:
        return load_curation(curation_path(envfactory.root()))
    except CurationError as exc:
        raise dg.Failure(f"curation file: {exc}") from exc


# --- incremental re-synthesis: the user folder the sensor watches -------------------------------------
def user_resources_dir(envfactory: EnvFactoryHome) -> Path:
    """``$ENVFACTORY_HOME/user_resources``: a user folder of extra OpenAPI documents or MCP tool lists, scanned after
    the corpus and
    watched by the ``resource_files`` sensor; every document accepted there becomes an environment."""
    from envfactory_assets.sources.resource_kinds import USER_RESOURCES_DIR

    return envfactory.root() / USER_RESOURCES_DIR
