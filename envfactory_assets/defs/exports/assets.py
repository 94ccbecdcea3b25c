"""Dataset exports: ``verl_export`` (RL parquet), ``sharegpt_export`` (LlamaFactory JSON) and
``hf_dataset_export`` (Hugging Face ``datasets`` on disk), under ``$ENVFACTORY_HOME/exports/<version>/``."""

import json
from pathlib import Path

import dagster as dg

from envfactory_assets.config_schema import Source
from envfactory_assets.defs.config_fields import generated_config
from envfactory_assets.defs.partitions import asset_code_version
from envfactory_assets.defs.progress_observations import progress_callback
from envfactory_assets.defs.resources import STORE_POOL, EnvFactoryHome
from envfactory_assets.exports.run_settings import ExportRunSpec

_EXPORT_CODE = asset_code_version(
    "envfactory_assets.exports", "envfactory_assets.tooluse", "envfactory_assets.defs.exports"
)

EXPORT_KEYS = {
    "verl_export": ("verl_train.parquet", "verl_validation.parquet"),
    "sharegpt_export": ("sharegpt_train.json", "sharegpt_validation.json", "dataset_info.json"),
    "hf_dataset_export": ("hf_sft",),
}


#: Where each export setting is stated.
EXPORT_SOURCES = (Source(ExportRunSpec),)


class ExportConfig(generated_config("ExportSettings", *EXPORT_SOURCES)):
    """Which rows are exported, by the licences of their environments' sources (docs/configuration.md lists
    each setting with its default and help)."""


def _exports_dir(envfactory: EnvFactoryHome) -> Path:
    return envfactory.root() / "exports"


@dg.multi_asset(
    group_name="exports",
    pool=STORE_POOL,
    specs=[
        dg.AssetSpec(
            "verl_export",
            kinds={"parquet"},
            deps=["rl_dataset"],
            code_version=_EXPORT_CODE,
            description="verl RL parquet: prompt, reward ground truth, initial/final state, tool config.",
        ),
        dg.AssetSpec(
            "sharegpt_export",
            kinds={"json"},
            deps=["sft_dataset"],
            code_version=_EXPORT_CODE,
            description="LlamaFactory ShareGPT JSON of the SFT rows, with dataset_info.json.",
        ),
        dg.AssetSpec(
            "hf_dataset_export",
            kinds={"huggingface"},
            deps=["sft_dataset"],
            code_version=_EXPORT_CODE,
            description="Hugging Face DatasetDict (train/validation) of the SFT rows, save_to_disk.",
        ),
    ],
)
def dataset_exports(context: dg.AssetExecutionContext, config: ExportConfig, envfactory: EnvFactoryHome):
    """Train/validation split by environment, licences on every row, a dataset card listing them."""
    from envfactory_assets.catalog import passed_environments
    from envfactory_assets.exports.context import tokenizer_limit
    from envfactory_assets.exports.licences import environment_licences
    from envfactory_assets.exports.stage import build_exports
    from envfactory_assets.training.base_model import force_offline, resolve_base_model

    force_offline()
    try:
        model_dir = resolve_base_model(config.context_model, envfactory.models_dir())
        limit = tokenizer_limit(model_dir, config.context_model)
    except (FileNotFoundError, ModuleNotFoundError, ValueError) as exc:
        raise dg.Failure(f"exports: context_model {config.context_model!r}: {exc}") from exc
    store = envfactory.store()
    licences = environment_licences(store.read("environments"), store.read("source_resources"))
    try:
        manifest = build_exports(
            store.read("sft_dataset"),
            store.read("rl_dataset"),
            licences,
            _exports_dir(envfactory),
            config.allowed_licences,
            environments=passed_environments(store).environments,
            progress=progress_callback(
                context,
                "rows written (verl, ShareGPT, HF)",
                asset_key=dg.AssetKey("verl_export"),
                label="dataset_exports",
            ),
            context=limit,
        )
    except (KeyError, ValueError) as exc:
        raise dg.Failure(f"exports: {exc}") from exc
    context.log.info(f"export {manifest['version']} written to {manifest['path']}")
    audit = _stored_audit(store, manifest["version"])
    if audit is None:
        from envfactory_assets.exports.audit import audit_export

        try:
            audit = audit_export(
                manifest,
                progress=progress_callback(
                    context,
                    "verl rows scored by the exported reward",
                    asset_key=dg.AssetKey("verl_export"),
                    label="export_audit",
                ),
            )
        except (KeyError, ValueError, TypeError, OSError) as exc:
            raise dg.Failure(f"exports: measuring export {manifest['version']}: {exc}") from exc
    # the current row is the audit of the version this materialization wrote (earlier versions' stay, superseded)
    store.replace_current("export_audits", [{"id": manifest["version"], "path": manifest["path"], "audit": audit}])
    for key, files in EXPORT_KEYS.items():
        rows = {f: manifest["files"][f]["rows"] for f in files if f in manifest["files"]}
        yield dg.MaterializeResult(
            asset_key=key,
            metadata={
                "version": manifest["version"],
                "path": manifest["path"],
                "rows": rows,
                "dataset_card": str(Path(manifest["path"]) / "README.md"),
                "licences": len(manifest["licences"]),
                "dropped_by_licence": manifest["dropped"],
                "hf_context": manifest.get("hf_context"),
                **_audit_metadata(key, audit),
            },
            data_version=dg.DataVersion(manifest["version"]),
        )


def _stored_audit(store, version: str) -> dict | None:
    """The stored audit of export ``version`` (table ``export_audits``), or None."""
    from envfactory_assets.store.db import sql_string

    rows = store.read("export_audits", f"id = {sql_string(version)}", current=False)
    return rows[0]["audit"] if rows else None


def _audit_metadata(asset_key: str, audit: dict) -> dict:
    """The audit's figures of one export asset, as its materialization's metadata."""
    if asset_key == "verl_export":
        return {"verl_reward": audit["verl"]}
    if asset_key == "sharegpt_export":
        return {"llamafactory_rules": audit["sharegpt"]}
    return {}


#: Which of an audit's problems (by their prefix) fail which export's check (the HF rows' fit in the context is
#: counted by the audit and checked row by row by verify_export).
_AUDIT_PREFIX = {"verl_export": ("verl:",), "sharegpt_export": ("ShareGPT:",), "hf_dataset_export": ()}


def _latest_manifest(instance: dg.DagsterInstance, envfactory: EnvFactoryHome, asset_key: str) -> dict | None:
    """The manifest of the export version recorded by the asset's latest materialization."""
    event = instance.get_latest_materialization_event(dg.AssetKey(asset_key))
    if event is None or event.asset_materialization is None:
        return None
    version = event.asset_materialization.metadata["version"].value
    path = _exports_dir(envfactory) / version / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {"version": version, "missing": str(path)}


def _export_check(asset_key: str):
    @dg.asset_check(
        asset=asset_key,
        blocking=True,
        name=f"{asset_key}_is_complete",
        description="Files exist with the manifest's row counts; no validation environment in "
        "train; every row carries its licences; the stored audit of the version finds nothing wrong (verl: an "
        "empty response or empty arguments score 0 and the gold and executed calls the maximum on every row; "
        "ShareGPT: every row keeps LlamaFactory's role rules).",
    )
    def _check(context: dg.AssetCheckExecutionContext, envfactory: EnvFactoryHome) -> dg.AssetCheckResult:
        from envfactory_assets.exports.verify import verify_export

        manifest = _latest_manifest(context.instance, envfactory, asset_key)
        if manifest is None or "missing" in manifest:
            return dg.AssetCheckResult(passed=False, metadata={"problem": f"no export found: {manifest}"})
        problems = verify_export(Path(manifest["path"]), manifest, EXPORT_KEYS[asset_key])
        audit = _stored_audit(envfactory.store(), manifest["version"])
        if audit is None:
            problems.append(f"no audit of export {manifest['version']} is stored (table export_audits)")
        else:
            problems += [p for p in audit["problems"] if p.startswith(_AUDIT_PREFIX[asset_key])]
        return dg.AssetCheckResult(
            passed=not problems, metadata={"version": manifest["version"], "problems": problems[:10]}
        )

    return _check


verl_export_check = _export_check("verl_export")
sharegpt_export_check = _export_check("sharegpt_export")
hf_dataset_export_check = _export_check("hf_dataset_export")
