"""SQL models from ``dbt_like_sql/`` as assets (quality marts, lineage edges), one view each."""

import dagster as dg

from envfactory_assets.defs.progress_observations import progress_callback
from envfactory_assets.defs.resources import STORE_POOL, EnvFactoryHome
from envfactory_assets.store.sql_models import SqlModel, load_models

_ASSET_OF_TABLE = {"sft_dataset": "sft_dataset", "rl_dataset": "rl_dataset"}


def _sql_asset(model: SqlModel) -> dg.AssetsDefinition:
    @dg.asset(
        name=model.name,
        group_name=f"sql_{model.layer}",
        kinds={"duckdb", "sql"},
        pool=STORE_POOL,
        deps=list(model.depends_on),
        code_version=model.code_version,
        description=(model.sql.splitlines()[1].lstrip("- ") if len(model.sql.splitlines()) > 1 else model.name),
    )
    def _asset(context: dg.AssetExecutionContext, envfactory: EnvFactoryHome) -> dg.MaterializeResult:
        from envfactory_assets.store.sql_models import materialize_model

        percent = progress_callback(context, "% of the query (DuckDB's estimate)")
        view = materialize_model(envfactory.store(), model, progress=lambda done: percent(done, 100))
        rows = view.rows
        return dg.MaterializeResult(
            metadata={
                "rows": rows,
                "preview": dg.MetadataValue.md(
                    view.preview.to_pandas().to_markdown(index=False) if rows else "(empty)"
                ),
                "sql": dg.MetadataValue.md(f"```sql\n{model.sql}\n```"),
            }
        )

    return _asset


sql_assets = [_sql_asset(m) for m in load_models()]
