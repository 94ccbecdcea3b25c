"""Run the ablation arms through a materialize callable and evaluate their checkpoints on the main store's tasks.

The order is fixed by the equal-budget rule: every arm's data first (each arm in its own home), then the
budget (the smallest arm's train-split row count, :func:`.plan.equal_rows`), then every arm's SFT
checkpoint at that budget, then one evaluation of all checkpoints (with the base model and the do-nothing
baseline) on the main store's held-out tasks, so every arm is scored on the same tasks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envfactory_assets.ablations.plan import (
    ARMS,
    DATA_ASSET,
    TRAIN_ASSET,
    Arm,
    arm_config,
    arm_home,
    configured_rows,
    equal_rows,
)

#: ``(home, run config, selection) -> None``: materialize ``selection`` (a Dagster selection string) in
#: ``home`` as ``envfactory run`` would; raises when a step fails.
Materialize = Callable[[Path, dict[str, Any], str], None]


@dataclass(frozen=True)
class AblationRun:
    """What :func:`run_ablations` did: ``arms`` run, ``homes`` (arm name -> its home), ``train_rows`` (arm ->
    train-split SFT rows synthesized), ``budget`` (rows every arm trained on), ``checkpoints`` (arm -> its SFT
    ``checkpoints`` row), ``evaluations`` (``evaluations``-shaped rows, arms labelled by name), ``configs``
    (arm -> the run config it ran with) and ``seconds`` (wall time: ``synthesis``, ``training``,
    ``evaluation``, ``total``)."""

    arms: tuple[Arm, ...]
    homes: dict[str, Path]
    train_rows: dict[str, int]
    budget: int
    checkpoints: dict[str, dict[str, Any]]
    evaluations: list[dict[str, Any]]
    configs: dict[str, dict[str, Any]]
    seconds: dict[str, float]


def run_ablations(
    main_home: Path,
    run_config: Mapping[str, Any],
    corpus_dir: Path,
    materialize: Materialize,
    train_rows_of: Callable[[Path], int],
    sft_checkpoint_of: Callable[[Path], dict[str, Any]],
    evaluate: Callable[[dict[str, dict[str, Any]]], list[dict[str, Any]]],
    arms: Sequence[Arm] = ARMS,
    *,
    default_max_train_rows: int,
    log: Callable[[str], Any] = print,
    clock: Callable[[], float] = time.monotonic,
) -> AblationRun:
    """Synthesize, train and evaluate every arm (order in the module docstring).

    Args:
        main_home: the main ``ENVFACTORY_HOME``; arms live in ``<main_home>/ablations/<arm>`` and nothing is
            materialized in ``main_home`` itself.
        run_config: the user's run config (``{"ops": ...}``), applied to every arm under its own settings.
        corpus_dir: the OpenAPI corpus every arm reads (the main home's).
        materialize: see :data:`Materialize`.
        train_rows_of: ``arm home -> train-split rows of its sft_dataset``.
        sft_checkpoint_of: ``arm home -> its current SFT checkpoints row`` (``id``, ``path``, ...).
        evaluate: ``{arm name: SFT checkpoint row} -> evaluations rows`` on the main store's tasks.
        arms: the arms (default :data:`.plan.ARMS`).
        default_max_train_rows: ``max_train_rows`` when the config sets none (CheckpointConfig's default).

    Raises:
        ValueError: an arm's home would be the main home, an arm has no train row, or the config is malformed.
        Whatever ``materialize`` or ``evaluate`` raise (a failed step stops the ablations).
    """
    main_home = Path(main_home).resolve()
    configured = configured_rows(run_config, default_max_train_rows)
    homes = {arm.name: arm_home(main_home, arm).resolve() for arm in arms}
    if main_home in homes.values() or len(set(homes.values())) != len(homes):
        raise ValueError(f"ablation homes {sorted(map(str, homes.values()))} must be distinct and not {main_home}")
    started = clock()
    configs: dict[str, dict[str, Any]] = {}
    rows: dict[str, int] = {}
    for arm in arms:
        configs[arm.name] = arm_config(run_config, arm, corpus_dir)
        log(f"ablation arm {arm.name}: synthesizing into {homes[arm.name]}")
        homes[arm.name].mkdir(parents=True, exist_ok=True)
        materialize(homes[arm.name], configs[arm.name], f"*{DATA_ASSET}")
        rows[arm.name] = train_rows_of(homes[arm.name])
        log(f"ablation arm {arm.name}: {rows[arm.name]} train-split SFT rows")
    synthesized = clock()
    budget = equal_rows(rows, configured)
    log(f"ablations: every arm trains on {budget} rows (configured {configured}, smallest arm {min(rows.values())})")
    checkpoints = {}
    for arm in arms:
        configs[arm.name] = arm_config(run_config, arm, corpus_dir, budget)
        materialize(homes[arm.name], configs[arm.name], TRAIN_ASSET)
        checkpoints[arm.name] = sft_checkpoint_of(homes[arm.name])
    trained = clock()
    evaluations = evaluate(checkpoints)
    done = clock()
    return AblationRun(
        tuple(arms),
        homes,
        rows,
        budget,
        checkpoints,
        evaluations,
        configs,
        {
            "synthesis": synthesized - started,
            "training": trained - synthesized,
            "evaluation": done - trained,
            "total": done - started,
        },
    )
