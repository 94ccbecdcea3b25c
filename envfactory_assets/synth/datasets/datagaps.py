"""What plain synthesized trajectories never show, added to the dataset rows in set shares.

Four kinds, each chosen per trajectory or turn by a stable hash of the trajectory id (so a trajectory's
rows never depend on the others and incremental runs keep unchanged rows):

- abstention (:mod:`envfactory_assets.synth.trajectories.abstention`): a turn no offered tool can serve, answered
without
  a call. ``abstention_share`` of SFT rows get one as their last turn; RL trajectories get one with probability
  ``min(1, share * n_turns / (1 - share))``, so that about ``abstention_share`` of RL rows are abstention
  rows (exactly so while ``share * n_turns / (1 - share) <= 1``).
- parallel calls (:mod:`envfactory_assets.synth.trajectories.parallel`): of the turns whose consecutive calls are
  independent, ``parallel_share`` are rendered with those calls in one assistant message. How many rows
  that gives depends on how many turns allow it, so the row shares are reported, not set.
- same-tool parallel calls (:mod:`envfactory_assets.synth.trajectories.same_tool_parallel`): a turn that calls
  one read tool for two or three targets in one message. ``same_tool_parallel_share`` of SFT rows get one,
  before an abstention turn if the row gets both (so it is the last turn unless the row ends on an
  abstention); RL trajectories get one anywhere with the abstention rule's probability. A trajectory whose
  reads have fewer than two targets in its state gets none, so the row shares are reported, not set.
- conversions (:mod:`envfactory_assets.synth.datasets.conversions`): of the turns with a user-given value whose
  field takes a converted form, ``conversion_share`` state it in the spoken form ("15%", "March 3rd,
  2025") while the gold call keeps the field's form.
"""

from __future__ import annotations

import copy
import hashlib
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from envfactory_assets.config_checks import finite_number, number_types, setting
from envfactory_assets.runtime.sandbox import SandboxWorker
from envfactory_assets.synth.datasets.conversions import convert_turn
from envfactory_assets.synth.trajectories.abstention import abstention_turn
from envfactory_assets.synth.trajectories.parallel import parallel_groups
from envfactory_assets.synth.trajectories.real_calls import planning_environments, planning_worker
from envfactory_assets.synth.trajectories.same_tool_parallel import same_tool_parallel_turn

GAP_KINDS = ("abstention", "parallel", "same_tool_parallel", "conversion")


@dataclass(frozen=True)
class DataGapsConfig:
    """Shares of the data-gap kinds (module docstring); 0 turns a kind off.

    Raises:
        SettingError: (a ValueError) a share that is not a finite number in its range, named in the message.
    """

    abstention_share: float = setting(
        0.1,
        "share (0..0.5: abstention must stay the exception) of SFT and RL rows that end on a turn no offered "
        "tool can serve, answered without a call; 0 turns abstention rows off.",
    )
    parallel_share: float = setting(
        1.0,
        "share (0..1) of the turns with independent consecutive calls whose calls are put in one assistant "
        "message (parallel calls); 0 turns them off.",
    )
    conversion_share: float = setting(
        0.5,
        "share (0..1) of the turns with a user-given value in a converted form that state it the spoken way "
        "('15%', 'March 3rd, 2025') while the gold call keeps the field's form; 0 turns conversions off.",
    )
    same_tool_parallel_share: float = setting(
        0.1,
        "share (0..0.5) of SFT rows given a turn that calls one read tool for two or three targets in one "
        "assistant message (BFCL's 'parallel' category: one function, several argument sets); RL rows get "
        "about the same share; 0 turns them off.",
    )

    def __post_init__(self) -> None:
        number_types(self, "datasets")
        finite_number("datasets", "abstention_share", self.abstention_share, low=0.0, high=0.5)
        finite_number("datasets", "parallel_share", self.parallel_share, low=0.0, high=1.0)
        finite_number("datasets", "same_tool_parallel_share", self.same_tool_parallel_share, low=0.0, high=0.5)
        finite_number("datasets", "conversion_share", self.conversion_share, low=0.0, high=1.0)


def _rng(trajectory_id: str, kind: str) -> random.Random:
    return random.Random(int(hashlib.sha256(f"{kind}\x00{trajectory_id}".encode()).hexdigest()[:16], 16))


def augment_trajectory(
    trajectory: dict[str, Any],
    environments: dict[str, dict[str, Any]],
    split: str,
    config: DataGapsConfig,
    worker: SandboxWorker | None,
) -> dict[str, Any]:
    """A copy of a refined ``trajectory`` with the data-gap kinds applied (the input is not changed).

    ``environments``: every environment abstention requests may come from (the trajectory's own must be
    among them); ``split``: ``"sft"`` or ``"rl"`` (sets the abstention probability); ``worker``: a sandbox
    worker with the trajectory's environments loaded, for the parallel order check (None: no parallel
    calls). Marked turns carry ``conversion`` (the rewrite), ``call_groups`` (indexes of the calls that
    share an assistant message) or ``abstention`` (what was asked; see
    :func:`~envfactory_assets.synth.trajectories.abstention.abstention_turn`).

    Raises:
        ValueError: ``split`` is neither ``"sft"`` nor ``"rl"``.
    """
    if split not in ("sft", "rl"):
        raise ValueError(f"split must be 'sft' or 'rl', got {split!r}")
    out = copy.deepcopy(trajectory)
    turns = out["turns"]
    tid = str(trajectory.get("id") or "")
    # calls stay in the canonical names of tools with a real MCP signature (executed in the real ones) until
    # the dataset rows are made (:func:`~envfactory_assets.synth.trajectories.real_calls.real_trajectory`);
    # an abstention request is about a tool as the model sees it, so it reads the real signatures
    own = {e: environments[e] for e in out["env_ids"]}
    worker = planning_worker(worker, own)
    planned = planning_environments(own)
    if config.conversion_share > 0:
        rng = _rng(tid, "conversion")
        schemas = {t["name"]: t["input_schema"] for e in out["env_ids"] for t in planned[e]["tools"]}
        for turn in turns:
            if rng.random() < config.conversion_share:
                convert_turn(turn, schemas, rng)
    if config.parallel_share > 0 and worker is not None:
        rng = _rng(tid, "parallel")
        offset = 0
        for turn in turns:
            if len(turn["calls"]) > 1 and rng.random() < config.parallel_share:
                groups = parallel_groups(turn, offset, worker)
                if groups is not None:
                    turn["call_groups"] = groups
            offset += len(turn["calls"])
    if config.same_tool_parallel_share > 0 and worker is not None and turns:
        rng = _rng(tid, "same_tool_parallel")
        if rng.random() < _turn_probability(config.same_tool_parallel_share, split, len(turns)):
            position = len(turns) if split == "sft" else rng.randint(0, len(turns))
            _insert(out, position, same_tool_parallel_turn(out, planned, position, rng, worker))
    if config.abstention_share > 0 and turns:
        rng = _rng(tid, "abstention")
        if rng.random() < _turn_probability(config.abstention_share, split, len(turns)):
            position = len(turns) if split == "sft" else rng.randint(0, len(turns))
            _insert(out, position, abstention_turn(out, environments, position, rng))
    return out


def _turn_probability(share: float, split: str, n_turns: int) -> float:
    """The probability that a trajectory gets an added turn of a kind whose row share is ``share``: SFT
    trains by default on the last turn only (training.sft, ``loss_on="last_turn"``), so an SFT row gets the
    turn last with probability ``share``; every RL turn is a task of its own, so an RL trajectory of
    ``n_turns`` gets it anywhere with ``min(1, share * n_turns / (1 - share))``, which makes about ``share``
    of its rows that kind."""
    return share if split == "sft" else min(1.0, share * n_turns / (1 - share))


def _insert(trajectory: dict[str, Any], position: int, turn: dict[str, Any] | None) -> None:
    """Insert ``turn`` (None: nothing) before ``position`` and renumber the turns."""
    if turn is None:
        return
    turns = trajectory["turns"]
    turns.insert(position, turn)
    for i, t in enumerate(turns):
        t["turn_index"] = i
    trajectory["n_turns"] = len(turns)


def turn_kinds(turn: dict[str, Any]) -> set[str]:
    """The data-gap kinds of one augmented turn (a subset of :data:`GAP_KINDS`)."""
    kinds = set()
    if turn.get("abstention"):
        kinds.add("abstention")
    if any(len(g) > 1 for g in turn.get("call_groups") or []):
        kinds.add("parallel")
    if any(_repeats_a_tool(turn, g) for g in turn.get("call_groups") or []):
        kinds.add("same_tool_parallel")
    if turn.get("conversion"):
        kinds.add("conversion")
    return kinds


def rl_row_kinds(turn: dict[str, Any], gold_calls: list[dict[str, Any]]) -> set[str]:
    """The kinds an RL row built from ``turn`` teaches: abstention, parallel when at least two gold calls
    come from one group of a parallel message (same_tool_parallel too when two of those are one tool),
    conversion when the converted argument is in a gold call."""
    kinds = {"abstention"} if turn.get("abstention") else set()
    gold = Counter(c["name"] for c in gold_calls)
    for group in turn.get("call_groups") or []:
        names = Counter(turn["calls"][i]["name"] for i in group)
        if sum((names & gold).values()) > 1:
            kinds.add("parallel")
        if any(n > 1 for n in (names & gold).values()):
            kinds.add("same_tool_parallel")
    conv = turn.get("conversion")
    if conv and any(c["arguments"].get(conv["argument"]) == conv["value"] for c in gold_calls):
        kinds.add("conversion")
    return kinds


def _repeats_a_tool(turn: dict[str, Any], group: list[int]) -> bool:
    names = [turn["calls"][i]["name"] for i in group]
    return len(set(names)) < len(names)


@dataclass
class GapStats:
    """Counts of rows per data-gap kind, filled by the datasets stage for its report: ``sft`` counts SFT
    rows with the kind in any turn, ``sft_last_turn`` those with it in the last turn (the only one SFT's
    default ``loss_on="last_turn"`` trains on), ``rl`` RL rows whose task is of the kind."""

    sft_rows: int = 0
    rl_rows: int = 0
    sft: Counter = field(default_factory=Counter)
    sft_last_turn: Counter = field(default_factory=Counter)
    rl: Counter = field(default_factory=Counter)

    def add_sft(self, turns: list[dict[str, Any]]) -> None:
        """Count one SFT row built from the augmented ``turns``."""
        self.sft_rows += 1
        self.sft.update(set().union(*(turn_kinds(t) for t in turns)))
        if turns:
            self.sft_last_turn.update(turn_kinds(turns[-1]))

    def add_rl(self, turn: dict[str, Any], gold_calls: list[dict[str, Any]]) -> None:
        """Count one kept RL row built from the augmented ``turn`` with ``gold_calls``."""
        self.rl_rows += 1
        self.rl.update(rl_row_kinds(turn, gold_calls))

    def shares(self) -> dict[str, dict[str, float]]:
        """``{"sft" | "sft_last_turn" | "rl": {kind: share of the SFT or RL rows}}`` (0.0 with no rows)."""

        def share(counts: Counter, n: int) -> dict[str, float]:
            return {k: counts[k] / n if n else 0.0 for k in GAP_KINDS}

        return {
            "sft": share(self.sft, self.sft_rows),
            "sft_last_turn": share(self.sft_last_turn, self.sft_rows),
            "rl": share(self.rl, self.rl_rows),
        }
