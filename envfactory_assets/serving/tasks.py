"""The RL tasks a server serves: the current ``rl_dataset`` rows whose environments can run, read once.

A task is one ``rl_dataset`` row (one turn: its prompt, tools, gold calls, initial and final state). The
store is opened read-only, only while loading, so a running pipeline or other servers are not blocked; the
environments are the current passed verifications (as ``serve-env`` serves them), less what the user's
curation file excludes.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from envfactory_assets.curation import Curation, filter_environments
from envfactory_assets.envgen.environment_dict import as_environment
from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.serving.errors import BadRequest, UnknownTask
from envfactory_assets.store.db import Store, read_rows
from envfactory_assets.store.ids import content_id
from envfactory_assets.store.schema import JSON_COLUMNS

SPLITS = ("train", "held_out")
"""The values of a row's ``split`` column a reset may sample from."""


def dataset_version(rows: list[Mapping[str, Any]]) -> str:
    """The version of a set of RL rows: the content id of their sorted ids, as the ``checkpoints`` stage
    records it in ``rl_dataset_version`` (so a checkpoint names the rows a server serves)."""
    return content_id("v", sorted(str(r["id"]) for r in rows))


HEAVY_COLUMNS = ("prompt", "tools", "initial_state", "final_state")
"""The columns a :class:`TaskSet` keeps as JSON text until an episode needs them: on the default run's store
(4,930 rows) decoding them all up front took 35 s and 2.1 GiB; as text they are about 300 MB, and one row decodes
in well under a millisecond. A row's tools are decoded once per distinct tool list (rows share them)."""


def _compact(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with its :data:`HEAVY_COLUMNS` as JSON bytes (text from the store is kept as it is, encoded)."""
    out = dict(row)
    for name in HEAVY_COLUMNS:
        value = row[name]
        out[name] = value.encode() if isinstance(value, str) else orjson.dumps(value)
    return out


@dataclass
class TaskSet:
    """The served tasks and the environments they run in.

    Attributes:
        rows: ``{task id: rl_dataset row}``, each with its :data:`HEAVY_COLUMNS` as JSON bytes
            (:meth:`episode_row` decodes them).
        environments: ``{env_id: Environment dict}`` of every environment a row uses.
        version: :func:`dataset_version` of ``rows``.
        skipped: ``{task id: why it is not served}`` (an environment that is not verified or is curated out).
    """

    rows: dict[str, dict[str, Any]]
    environments: dict[str, dict[str, Any]]
    version: str = ""
    skipped: dict[str, str] = field(default_factory=dict)
    _hashes: dict[str, tuple[dict[str, str], dict[str, str]]] = field(default_factory=dict, repr=False)
    _tools: dict[bytes, list[dict[str, Any]]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.rows = {task_id: _compact(row) for task_id, row in self.rows.items()}
        if not self.version:
            self.version = dataset_version(list(self.rows.values()))
        self._ids = sorted(self.rows)
        self._by_split = {s: [i for i in self._ids if _split(self.rows[i]) == s] for s in SPLITS}

    def row(self, task_id: str) -> dict[str, Any]:
        """The stored row of ``task_id`` (heavy columns as JSON bytes).

        Raises:
            UnknownTask: no served row has that id (the message names the nearest ids).
        """
        if not isinstance(task_id, str) or task_id not in self.rows:
            near = difflib.get_close_matches(str(task_id)[:200], self._ids, n=3, cutoff=0.6)
            hint = f"; nearest: {', '.join(near)}" if near else ""
            reason = self.skipped.get(task_id) if isinstance(task_id, str) else None
            why = f" (not served: {reason})" if reason else ""
            raise UnknownTask(
                f"no served RL task has id {str(task_id)[:200]!r}{why}{hint} ({len(self._ids)} tasks served)",
                task_id=str(task_id)[:200],
            )
        return self.rows[task_id]

    def episode_row(self, task_id: str) -> dict[str, Any]:
        """The row of ``task_id`` as an episode uses it: ``prompt`` and ``initial_state`` decoded afresh (the
        episode's own objects), ``tools`` decoded once per distinct tool list and shared (never to be
        changed), ``final_state`` left out (the reward uses its hashes, :meth:`state_hashes`).

        Raises:
            UnknownTask: as :meth:`row`.
        """
        stored = self.row(task_id)
        tools = self._tools.get(stored["tools"])
        if tools is None:
            tools = self._tools.setdefault(stored["tools"], orjson.loads(stored["tools"]))
        out = {k: v for k, v in stored.items() if k not in HEAVY_COLUMNS}
        out.update(
            prompt=orjson.loads(stored["prompt"]), tools=tools, initial_state=orjson.loads(stored["initial_state"])
        )
        return out

    def sample(self, seed: int | None = None, split: str | None = None, rng: random.Random | None = None) -> str:
        """A task id drawn uniformly among the rows (of ``split`` when given): the same seed draws the same
        task from the same rows; without a seed ``rng`` draws (default: a fresh generator).

        Raises:
            BadRequest: ``split`` is not one of :data:`SPLITS`, ``seed`` is not a whole number >= 0, or no row
                is left to draw from.
        """
        if split is not None and split not in SPLITS:
            raise BadRequest(f"split must be one of {', '.join(SPLITS)}, got {str(split)[:80]!r}")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise BadRequest(f"seed must be a whole number >= 0, got {str(seed)[:80]!r}")
        ids = self._by_split[split] if split else self._ids
        if not ids:
            raise BadRequest(f"no served RL task{' in split ' + repr(split) if split else ''} to sample from")
        draw = random.Random(seed) if seed is not None else (rng or random.Random())
        return draw.choice(ids)

    def state_hashes(self, task_id: str) -> tuple[dict[str, str], dict[str, str]]:
        """``(gold final, initial)`` ``{env_id: sha256}`` of a task's states, computed once per task."""
        if task_id not in self._hashes:
            row = self.rows[task_id]
            self._hashes[task_id] = (
                {e: state_hash(s) for e, s in orjson.loads(row["final_state"]).items()},
                {e: state_hash(s) for e, s in orjson.loads(row["initial_state"]).items()},
            )
        return self._hashes[task_id]


def _split(row: Mapping[str, Any]) -> str:
    return "held_out" if row.get("split") in ("held_out", "validation") else "train"


def task_set(
    rows: list[dict[str, Any]], environments: Mapping[str, dict[str, Any]], curation: Curation | None = None
) -> TaskSet:
    """The :class:`TaskSet` of ``rows`` over ``environments`` (``{env_id: Environment dict}``): a row is kept when
    every environment it uses is there and ``curation`` excludes neither it nor any of its tools."""
    envs = dict(environments)
    dropped: dict[str, str] = {}
    if curation is not None:
        envs, dropped = filter_environments(envs, curation)
    trimmed = {node.split(".", 1)[0] for node in dropped if "." in node}
    kept: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    for row in rows:
        missing = [e for e in row["env_ids"] if e not in envs]
        curated = [e for e in row["env_ids"] if e in dropped or e in trimmed]
        if curated:
            skipped[row["id"]] = f"the curation file excludes {curated[0]!r} or one of its tools"
        elif missing:
            skipped[row["id"]] = f"environment {missing[0]!r} has no current passed verification"
        else:
            kept[row["id"]] = row
    used = {e for row in kept.values() for e in row["env_ids"]}
    return TaskSet(kept, {e: envs[e] for e in sorted(used)}, skipped=skipped)


def _rl_rows_with_heavy_text(con: Any) -> list[dict[str, Any]]:
    """The current ``rl_dataset`` rows with the JSON columns decoded except :data:`HEAVY_COLUMNS`, kept as the
    store's text (see there); the columns the store has (an older store may lack newer ones)."""
    if not con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'current_rl_dataset'"
    ).fetchone()[0]:
        return []
    cur = con.execute("SELECT * FROM current_rl_dataset ORDER BY id")
    names = [d[0] for d in cur.description]
    decoded = JSON_COLUMNS["rl_dataset"] - set(HEAVY_COLUMNS)
    return [
        {n: (orjson.loads(v) if n in decoded and v is not None else v) for n, v in zip(names, row, strict=True)}
        for row in cur.fetchall()
    ]


def load_task_set(store_path: Path | str, curation: Curation | None = None, version: str | None = None) -> TaskSet:
    """The current ``rl_dataset`` rows of the store and the passed environments they use.

    Args:
        store_path: the DuckDB store, opened read-only while loading.
        curation: the user's exclusions (``None``: none).
        version: when given, the version the served rows must have (:func:`dataset_version`, as a checkpoint's
            ``rl_dataset_version`` records it).

    Raises:
        FileNotFoundError: the store does not exist. ``StoreBusy``: another process is writing it.
        ValueError: the store holds no servable RL row, or the served rows' version is not ``version``.
    """
    with Store(store_path).connect(read_only=True) as con:
        rows = _rl_rows_with_heavy_text(con)
        built = {r["id"]: r for r in read_rows(con, "environments", "status = 'built'")}
        passed = read_rows(con, "verified_environments", "status = 'passed'")
    newest = sorted(passed, key=lambda r: (r.get("written_at") is not None, r.get("written_at"), r["id"]))
    environments = {
        v["env_id"]: as_environment(built[v["environment_id"]]) for v in newest if v["environment_id"] in built
    }
    tasks = task_set(rows, environments, curation)
    if not tasks.rows:
        why = (
            f"; {len(tasks.skipped)} row(s) skipped, e.g. {next(iter(tasks.skipped.values()))}" if tasks.skipped else ""
        )
        raise ValueError(f"the store {store_path} holds no servable rl_dataset row (materialize rl_dataset first){why}")
    if version is not None and version != tasks.version:
        raise ValueError(
            f"--dataset-version {version}: the store's current RL rows are version {tasks.version} "
            f"({len(tasks.rows)} servable rows); serve that version, or a store that holds {version}"
        )
    return tasks
