"""Paired comparisons of two models on the same tasks: bootstrap intervals and the sample size they need.

Method (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 13, percentile interval; the
paired form resamples tasks, not scores, so each resampled task keeps both models' scores): given per-task
scores ``a`` (the base model) and ``b`` (another model) on the same ``n`` tasks, draw ``n`` task indexes
with replacement ``resamples`` times from a seeded generator, take the mean of ``b - a`` on each draw, and
report the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of those means. Pairing removes
the variation between tasks (some tasks are hard for every model), which is most of the variance.

A task's score is the mean over sampling seeds of its score under each seed, so seeds narrow the
interval only through less noise per task; the tasks are the sampling unit.

A balanced score (the mean of per-category means with equal weights, :class:`Measure` with ``balanced``)
is compared by :func:`stratified_paired_bootstrap`: the difference is the mean of the per-category paired
differences, and each resample draws tasks with replacement *within* each category, as many as it has. The
categories' sizes are fixed by the design (``n`` tasks per category), not sampled, so resampling them would
add variance the estimate does not have, and an unstratified draw can miss a category entirely, leaving
the balanced score undefined on that draw (the stratified bootstrap: Efron & Tibshirani 1993, sec. 6.5).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: Bootstrap resamples per interval: with 10,000 the 2.5% and 97.5% quantiles move by well under 0.01 between
#: seeds for the task counts evaluated here (the Monte Carlo error of a tail quantile falls as 1/sqrt(B)).
RESAMPLES = 10_000
CONFIDENCE = 0.95
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class PairedDifference:
    """The mean difference ``b - a`` over paired tasks and its bootstrap interval.

    Attributes:
        difference: mean of ``b - a`` (score points, the unit of the scores: 0.1 = 10 points).
        low / high: the percentile bootstrap interval at ``confidence``.
        n: paired tasks.
        sd: sample standard deviation of the per-task differences (0.0 for one task).
        resamples / confidence / seed: how the interval was computed.
    """

    difference: float
    low: float
    high: float
    n: int
    sd: float
    resamples: int
    confidence: float
    seed: int

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)


def _checked_differences(
    a: Sequence[float], b: Sequence[float], resamples: int, confidence: float, what: str
) -> np.ndarray:
    """Per-task differences ``b - a`` after the checks every bootstrap here shares (``what`` names the caller's
    scores in messages); lengths are checked by the caller.

    Raises:
        ValueError: no task, ``resamples`` < 1, ``confidence`` outside (0, 1), or a score that is not finite.
    """
    if len(a) == 0:
        raise ValueError(f"{what}: no task to compare on")
    if resamples < 1:
        raise ValueError(f"bootstrap resamples={resamples}: expected >= 1")
    if not 0 < confidence < 1:
        raise ValueError(f"bootstrap confidence={confidence}: expected a number in (0, 1)")
    diffs = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    if not np.all(np.isfinite(diffs)):
        raise ValueError("paired scores: every score must be a finite number")
    return diffs


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
) -> PairedDifference:
    """The paired percentile bootstrap interval of ``mean(b) - mean(a)`` (method in the module docstring).

    Args:
        a, b: per-task scores of the two models, in the same task order (``a[i]`` and ``b[i]`` are task i).
        resamples: bootstrap draws (>= 1).
        confidence: interval coverage in (0, 1).
        seed: seed of the ``numpy.random.default_rng`` generator (the same inputs give the same interval).

    Returns:
        A :class:`PairedDifference`.

    Raises:
        ValueError: the lists differ in length or are empty, a score is not finite, or a setting is out of range.
    """
    if len(a) != len(b):
        raise ValueError(f"paired scores: {len(a)} base scores against {len(b)} scores; pair them by task")
    diffs = _checked_differences(a, b, resamples, confidence, "paired scores")
    n = len(diffs)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    # drawn in chunks so 10,000 resamples of 1,000 tasks never hold 10 million indexes at once
    chunk = max(1, 2_000_000 // n)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        means[start:stop] = diffs[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    # the mean of a constant list is not exactly the constant in floating point; the interval must contain it
    mean = float(diffs.mean())
    return PairedDifference(
        difference=mean,
        low=min(float(low), mean),
        high=max(float(high), mean),
        n=n,
        sd=float(diffs.std(ddof=1)) if n > 1 else 0.0,
        resamples=resamples,
        confidence=confidence,
        seed=seed,
    )


def stratified_paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    strata: Sequence[str],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
) -> PairedDifference:
    """The paired bootstrap interval of the balanced difference: the mean over strata (categories), with
    equal weights, of ``mean(b) - mean(a)`` within each stratum; each resample draws every stratum's tasks
    with replacement within that stratum (why: module docstring).

    Args:
        a, b: per-task scores of the two models, in the same task order.
        strata: each task's stratum (category), in the same order.

    Returns:
        A :class:`PairedDifference` whose ``difference`` is the balanced difference, ``n`` the task count and
        ``sd`` the standard deviation of the per-task differences (pooled over strata).

    Raises:
        ValueError: the lists differ in length or are empty, a score is not finite, or a setting is out of
            range.
    """
    if not (len(a) == len(b) == len(strata)):
        raise ValueError(
            f"stratified paired scores: {len(a)} base scores, {len(b)} scores and {len(strata)} strata; "
            "pair them by task"
        )
    diffs = _checked_differences(a, b, resamples, confidence, "stratified paired scores")
    groups = [diffs[[i for i, s in enumerate(strata) if s == name]] for name in sorted(set(strata))]
    rng = np.random.default_rng(seed)
    means = np.zeros(resamples)
    for group in groups:
        n = len(group)
        chunk = max(1, 2_000_000 // n)
        for start in range(0, resamples, chunk):
            stop = min(resamples, start + chunk)
            means[start:stop] += group[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    means /= len(groups)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    mean = float(statistics.fmean(float(g.mean()) for g in groups))
    return PairedDifference(
        difference=mean,
        low=min(float(low), mean),
        high=max(float(high), mean),
        n=len(diffs),
        sd=float(diffs.std(ddof=1)) if len(diffs) > 1 else 0.0,
        resamples=resamples,
        confidence=confidence,
        seed=seed,
    )


@dataclass(frozen=True)
class Measure:
    """A per-task score reported beside a benchmark's headline, with its own mean, spread and paired intervals.

    Attributes:
        name: the measure's key in a row's ``metrics["measures"]`` (e.g. ``"call_rate"``).
        key: the score key it averages (``result["score"][key]``).
        categories: the task categories it counts (``result["tags"]["category"]``); None counts every result.
        balanced: the measure is the mean, with equal weights, of the per-category means of ``categories``,
            defined only when every one of them has a result (else not measured); compared by
            :func:`stratified_paired_bootstrap`.
    """

    name: str
    key: str
    categories: tuple[str, ...] | None = None
    balanced: bool = False

    def __post_init__(self) -> None:
        if self.balanced and not self.categories:
            raise ValueError(f"measure {self.name!r}: a balanced measure needs its categories")

    def summary(self, results: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> dict[str, Any]:
        """The measure on one row's results.

        Returns:
            ``{"mean", "std", "per_seed": {seed: value}, "n_tasks", "scores": {task_id: mean over seeds of
            score[key]}}`` plus ``"strata": {task_id: category}`` for a balanced measure; or
            ``{"mean": None, "std": None, "n_tasks": 0, "not_measured": reason}`` when no result counts
            (a balanced measure: when a category has none). ``mean``/``std`` are over seeds of the per-seed
            value, as a row's headline is.
        """
        counted = [
            r for r in results if self.categories is None or (r.get("tags") or {}).get("category") in self.categories
        ]
        present = {(r.get("tags") or {}).get("category") for r in counted}
        if not counted:
            return {"mean": None, "std": None, "n_tasks": 0, "not_measured": "no result of its categories"}
        if self.balanced and not set(self.categories or ()) <= present:
            missing = sorted(set(self.categories or ()) - present)
            return {"mean": None, "std": None, "n_tasks": 0, "not_measured": f"no result in {missing}"}
        per_seed = {}
        for seed in seeds:
            group = [r for r in counted if r["seed"] == seed]
            if group:
                per_seed[str(seed)] = self._value(group)
        values = list(per_seed.values())
        scores = per_task_scores(counted, self.key)
        out: dict[str, Any] = {
            "mean": statistics.fmean(values) if values else None,
            "std": (statistics.stdev(values) if len(values) > 1 else 0.0) if values else None,
            "per_seed": per_seed,
            "n_tasks": len(scores),
            "scores": scores,
        }
        if self.balanced:
            out["strata"] = {r["task_id"]: r["tags"]["category"] for r in counted}
        return out

    def _value(self, results: Sequence[Mapping[str, Any]]) -> float:
        if not self.balanced:
            return statistics.fmean(float(r["score"][self.key]) for r in results)
        by_category: dict[str, list[float]] = {}
        for r in results:
            by_category.setdefault(r["tags"]["category"], []).append(float(r["score"][self.key]))
        return statistics.fmean(statistics.fmean(v) for v in by_category.values())


def compare_summaries(base: Mapping[str, Any] | None, other: Mapping[str, Any] | None) -> PairedDifference | None:
    """The paired interval of one measure's ``other`` minus ``base`` (two :meth:`Measure.summary` results) on
    the tasks both have: :func:`compare_on_shared_tasks`, or, for a balanced measure (summaries with
    ``strata``), :func:`stratified_paired_bootstrap`. None when either is not measured, no task is shared, or
    (balanced) a category of ``base`` has no shared task (the balanced score would change its definition)."""
    if not base or not other or not base.get("scores") or not other.get("scores"):
        return None
    shared = sorted(set(base["scores"]) & set(other["scores"]))
    if not shared:
        return None
    a, b = [base["scores"][t] for t in shared], [other["scores"][t] for t in shared]
    if "strata" not in base:
        return paired_bootstrap(a, b)
    strata = [base["strata"][t] for t in shared]
    if set(strata) != set(base["strata"].values()):
        return None
    return stratified_paired_bootstrap(a, b, strata)


def per_task_scores(results: Iterable[Mapping[str, Any]], metric: str) -> dict[str, float]:
    """``{task_id: mean over seeds of score[metric]}`` of ``run_agent`` results.

    Raises:
        KeyError: a result's score has no ``metric``.
    """
    by_task: dict[str, list[float]] = {}
    for r in results:
        by_task.setdefault(r["task_id"], []).append(float(r["score"][metric]))
    return {t: statistics.fmean(v) for t, v in by_task.items()}


def compare_on_shared_tasks(
    base: Mapping[str, float], other: Mapping[str, float], **kwargs: Any
) -> PairedDifference | None:
    """:func:`paired_bootstrap` of ``other - base`` on the tasks both have (sorted by id); None when none."""
    shared = sorted(set(base) & set(other))
    if not shared:
        return None
    return paired_bootstrap([base[t] for t in shared], [other[t] for t in shared], **kwargs)


def tasks_needed(
    sd_difference: float, difference: float = 0.10, confidence: float = CONFIDENCE, power: float = 0.80
) -> int:
    """Paired tasks needed to detect a true mean difference of ``difference`` with a two-sided test at
    ``confidence`` (the interval excludes 0) with probability ``power``.

    The normal approximation for a paired mean: ``n = ((z_{1-(1-confidence)/2} + z_{power}) * sd / difference)^2``
    (e.g. Chow, Shao & Wang, *Sample Size Calculations in Clinical Research*, paired t-test, large n).
    With ``power = 0.5`` it is the n at which the interval's half-width equals ``difference``.

    Args:
        sd_difference: standard deviation of the per-task difference (for success/failure scores at most 1;
            ``sqrt(p01 + p10 - (p10 - p01)^2)`` with p01, p10 the shares of tasks only one model solves).
        difference: the smallest difference to detect, in score units (0.10 = 10 points).

    Raises:
        ValueError: a value is out of range.
    """
    if not sd_difference >= 0 or not difference > 0:
        raise ValueError(f"tasks_needed: sd_difference={sd_difference} must be >= 0 and difference={difference} > 0")
    if not 0 < confidence < 1 or not 0 < power < 1:
        raise ValueError(f"tasks_needed: confidence={confidence} and power={power} must be in (0, 1)")
    normal = statistics.NormalDist()
    z = normal.inv_cdf(1 - (1 - confidence) / 2) + normal.inv_cdf(power)
    return max(1, math.ceil((z * sd_difference / difference) ** 2))
