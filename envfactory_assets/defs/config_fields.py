"""Dagster run configs generated from the settings dataclasses (:mod:`envfactory_assets.config_schema`).

A generated config has one field per setting, with the dataclass's name, run-config type, default and help
(the help is the field's description in the Dagster UI); an asset's config subclasses it to add the methods
that build the specs. So no default or help text is restated here.
"""

from __future__ import annotations

import dagster as dg
import pydantic

from envfactory_assets.config_schema import Setting, Source, settings_of


def _field(setting: Setting) -> tuple[object, object]:
    # pydantic copies a mutable default for each instance, so a list default is safe here
    return setting.annotation, pydantic.Field(default=setting.default, description=setting.help)


def generated_config(name: str, *sources: Source) -> type[dg.Config]:
    """A ``dg.Config`` subclass named ``name`` whose fields are the settings of ``sources`` (see
    :func:`~envfactory_assets.config_schema.settings_of`, which raises on a field without help text); the
    sources are kept as ``__settings_sources__`` (:func:`sources_of`), so a test can compare every run config
    with the dataclasses that state it."""
    fields = {s.name: _field(s) for s in settings_of(*sources)}
    model = pydantic.create_model(name, __base__=dg.Config, **fields)
    model.__module__ = __name__
    model.__settings_sources__ = sources
    return model


def sources_of(config: type[dg.Config]) -> tuple[Source, ...] | None:
    """The sources ``config`` (or the generated config it subclasses) was generated from; None for a
    hand-written config."""
    return getattr(config, "__settings_sources__", None)
