"""The ablations on the real pipeline: the Dagster-backed callables
:func:`envfactory_assets.ablations.orchestrate.run_ablations`
takes (materialize an arm in its own home, count its rows, find its checkpoint, evaluate on the main store)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from envfactory_assets import settings
from envfactory_assets.ablations.orchestrate import AblationRun, run_ablations
from envfactory_assets.ablations.plan import Arm
from envfactory_assets.ablations.report import write_ablations


@contextlib.contextmanager
def home_environment(home: Path) -> Iterator[None]:
    """``ENVFACTORY_HOME`` and ``DAGSTER_HOME`` pointed at ``home`` for the block, restored after it: the
    resources and the Dagster instance read them at run time."""
    saved = {k: os.environ.get(k) for k in ("ENVFACTORY_HOME", "DAGSTER_HOME")}
    os.environ["ENVFACTORY_HOME"] = str(home)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def pipeline_materialize(
    prepare_dagster_home: Callable[[Path], Path], lock: Callable[[Path], Any], log: Callable[[str], Any] = print
) -> Callable[[Path, dict[str, Any], str], None]:
    """A materialize callable that runs ``selection`` in ``home`` with :func:`.materialize.materialize_pipeline`
    on that home's own Dagster instance and store (``envfactory`` resource pinned to ``home``), holding the
    home's run lock, with Dagster's console logger at INFO as ``envfactory run`` has it. Raises RuntimeError naming the
    home and the failed selection."""

    def materialize(home: Path, run_config: dict[str, Any], selection: str) -> None:
        import dagster as dg

        from envfactory_assets.definitions import ALL_ASSETS, ALL_CHECKS, RESOURCES
        from envfactory_assets.defs.resources import EnvFactoryHome
        from envfactory_assets.runner.materialize import materialize_pipeline, run_job_name
        from envfactory_assets.runner.output import quiet_config

        with home_environment(home):
            prepare_dagster_home(home)
            with lock(home), dg.DagsterInstance.get() as instance:
                results = materialize_pipeline(
                    [*ALL_ASSETS, *ALL_CHECKS],
                    instance,
                    {**RESOURCES, "envfactory": EnvFactoryHome(home=str(home))},
                    quiet_config(run_config),
                    selection=selection,
                    raise_on_error=False,
                    tags={"envfactory/command": f"envfactory ablations ({home.name})"},
                    job_name=run_job_name(selection, prefix="envfactory_ablation"),
                )
        if not results or not all(r.success for r in results):
            raise RuntimeError(
                f"ablation arm {home.name}: materializing {selection} failed; inspect it with "
                f"ENVFACTORY_HOME={home} envfactory ui"
            )
        log(f"ablation arm {home.name}: {selection} materialized")

    return materialize


def train_rows_of(home: Path) -> int:
    """Train-split rows of ``home``'s ``sft_dataset`` (the rows SFT may train on)."""
    from envfactory_assets.store.db import Store
    from envfactory_assets.training.stage import train_split

    return len(train_split(Store(settings.store_path(home)).read("sft_dataset")))


def sft_checkpoint_of(home: Path) -> dict[str, Any]:
    """``home``'s current SFT ``checkpoints`` row. Raises RuntimeError when there is none or its folder is gone."""
    from envfactory_assets.store.db import Store

    rows = [r for r in Store(settings.store_path(home)).read("checkpoints") if r.get("stage") == "sft"]
    if len(rows) != 1 or not Path(rows[0].get("path") or "").is_dir():
        raise RuntimeError(
            f"ablation arm {home.name}: expected one SFT checkpoint with its folder, found "
            f"{[r.get('path') for r in rows]}"
        )
    return rows[0]


def main_store_evaluate(
    main_home: Path, evaluation_config: Mapping[str, Any], log: Callable[[str], Any] = print
) -> Callable[[dict[str, dict[str, Any]]], list[dict[str, Any]]]:
    """An evaluate callable: the base model, the do-nothing baseline and each arm's SFT checkpoint (labelled
    by arm name) through :func:`~envfactory_assets.evaluation.run.evaluate_models` on the MAIN store's
    ``rl_dataset`` held-out tasks and passed environments, with ``evaluation_config`` (the
    ``evaluations`` op's settings, :class:`~envfactory_assets.defs.evaluation.assets.EvaluationConfig`).
    Reads the main store and writes only the evaluation result cache there (``eval_cache``).

    Raises:
        ValueError: a setting out of range (checked before anything runs).
    """
    from envfactory_assets.defs.evaluation.assets import (
        EVAL_CACHE_DIR,
        EvaluationConfig,
    )

    config = EvaluationConfig(**dict(evaluation_config))
    spec = config.eval_spec()

    def evaluate(checkpoints: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        from envfactory_assets.defs.common import passed_environments
        from envfactory_assets.defs.resources import EnvFactoryHome
        from envfactory_assets.evaluation.run import (
            BASE,
            ModelRef,
            ResultCache,
            do_nothing_model,
            evaluate_models,
        )
        from envfactory_assets.training.base_model import model_hash, resolve_base_model

        envfactory = EnvFactoryHome(home=str(main_home))
        store = envfactory.store()
        base_dir = resolve_base_model(config.base_model, envfactory.models_dir())
        models = [ModelRef(BASE, BASE, str(base_dir), model_hash=model_hash(base_dir)), do_nothing_model()]
        models += [
            ModelRef(name, "sft", row["path"], row["id"], model_hash=model_hash(Path(row["path"])))
            for name, row in checkpoints.items()
        ]
        envs, _ = passed_environments(envfactory)
        return evaluate_models(
            models,
            store.read("rl_dataset"),
            envs,
            spec,
            log=log,
            cache=ResultCache(main_home / EVAL_CACHE_DIR),
            benchmark_overlap=store.read("benchmark_overlap"),
        )

    return evaluate


def run_pipeline_ablations(
    main_home: Path,
    run_config: dict[str, Any],
    arms: tuple[Arm, ...],
    out: Path,
    prepare_dagster_home: Callable[[Path], Path],
    lock: Callable[[Path], Any],
    command: str,
    log: Callable[[str], Any] = print,
) -> AblationRun:
    """Run the ablations on the real pipeline and write ``out`` (docs/ablations.md).

    Raises:
        ValueError: the main store has no ``rl_dataset`` to take the held-out tasks from, the corpus is
            missing, or a setting is bad. RuntimeError: an arm's step failed.
    """
    from envfactory_assets.defs.training.assets import CheckpointConfig
    from envfactory_assets.store.db import Store

    if not settings.store_path(main_home).exists() or not Store(settings.store_path(main_home)).read("rl_dataset"):
        raise ValueError(
            f"the main store under {main_home} has no rl_dataset (its held-out tasks are what every "
            "arm is evaluated on); run the pipeline first (envfactory run)"
        )
    src = (run_config.get("ops", {}).get("source_resources") or {}).get("config") or {}
    corpus = Path(src["corpus_dir"]) if src.get("corpus_dir") else settings.corpus_dir(main_home)
    if not corpus.is_dir():
        raise ValueError(
            f"the OpenAPI corpus is not at {corpus}; run scripts/setup.sh or set ops.source_resources.config.corpus_dir"
        )
    evaluation = (run_config.get("ops", {}).get("evaluations") or {}).get("config") or {}
    evaluate = main_store_evaluate(main_home, evaluation, log)  # settings checked before hours of synthesis
    result = run_ablations(
        main_home,
        run_config,
        corpus,
        pipeline_materialize(prepare_dagster_home, lock, log),
        train_rows_of,
        sft_checkpoint_of,
        evaluate,
        arms=arms,
        default_max_train_rows=CheckpointConfig.model_fields["max_train_rows"].default,
        log=log,
    )
    write_ablations(out, result, command=command)
    log(f"wrote {out} (ablations took {result.seconds['total']:.0f} s)")
    return result
