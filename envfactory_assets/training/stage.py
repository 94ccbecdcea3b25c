"""The ``checkpoints`` stage: pick training rows and held-out prompts, run SFT (then GRPO), measure tool-call
validity. Only rows of the "train" split (the rows' stored ``split``) are trained on; held-out environments are for
the evaluation."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envfactory_assets.store.ids import content_id
from envfactory_assets.tooluse.chat_template import TOOL_CHAT_TEMPLATE
from envfactory_assets.tooluse.reward import arguments_that_matter
from envfactory_assets.tooluse.splits import stored_held_out, stored_split
from envfactory_assets.tooluse.task_environment import environment_class
from envfactory_assets.tooluse.tool_selection import restrict_tools
from envfactory_assets.training.base_model import is_complete_model_dir, model_hash, resolve_base_model
from envfactory_assets.training.evaluate import tool_call_validity
from envfactory_assets.training.grpo import GRPOConfigSpec, train_grpo
from envfactory_assets.training.resume import clear_stage_row, load_stage_row, result_settings, save_stage_row
from envfactory_assets.training.sft import SFTConfigSpec, train_sft

CHARS_PER_TOKEN = 3.0  # rough, for JSON-heavy chat text with the SmolLM2 tokenizer
NO_CALL_EVERY = 4
"""In a prompt mix, every 4th slot goes to a turn where no call is wanted, when the RL rows have one."""


def query_text(row: dict[str, Any]) -> str:
    """The user messages of an RL row's prompt, joined and lower-cased (what the solver was told)."""
    return "\n".join(str(m.get("content") or "") for m in row["prompt"] if m.get("role") == "user").lower()


def given_by_query(value: Any, text: str) -> bool:
    """Whether a scalar argument ``value`` appears in the lower-cased query ``text`` (booleans as
    ``true``/``false``, numbers as written by ``str``); lists, objects and None never count as given."""
    if isinstance(value, bool):
        return ("true" if value else "false") in text
    if isinstance(value, (int, float, str)) and str(value).strip():
        return str(value).lower() in text
    return False


def task_kind(row: dict[str, Any]) -> str:
    """What an RL row teaches a policy about arguments.

    Returns:
        ``"no_call"``: no gold call (the right answer is to call nothing); ``"grounded"``: some gold call has
        arguments that matter (:func:`~envfactory_assets.tooluse.reward.arguments_that_matter`) and the query
        gives every one of their values; ``"needs_results"``: arguments that matter whose values only an
        earlier tool result gives; ``"argument_free"``: no argument matters (``list_keys()``,
        ``get_pools(limit=10)`` with ``limit`` masked), where a call with empty arguments is right.
    """
    if not row["gold_calls"]:
        return "no_call"
    masked = row.get("masked_arguments") or ()
    matter = [v for c in row["gold_calls"] for v in arguments_that_matter(c, row["tools"], masked).values()]
    if not matter:
        return "argument_free"
    text = query_text(row)
    return "grounded" if all(given_by_query(v, text) for v in matter) else "needs_results"


def prompt_mix(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """Up to ``n`` of ``rows`` (already in preference order), mixed by :func:`task_kind`: every
    :data:`NO_CALL_EVERY`-th slot a ``no_call`` row when there is one, the others ``grounded`` rows, then
    ``needs_results``, then ``argument_free`` ones only when nothing else is left.

    Why: the cheapest rows are argument-free reads; a mix of only those taught GRPO that a call with
    ``{}`` earns full reward, and the checkpoint then called every tool with empty arguments.
    """
    by_kind: dict[str, list[dict[str, Any]]] = {"no_call": [], "grounded": [], "needs_results": [], "argument_free": []}
    for row in rows:
        by_kind[task_kind(row)].append(row)
    queues = {k: iter(v) for k, v in by_kind.items()}
    order = ("grounded", "needs_results", "argument_free", "no_call")
    out: list[dict[str, Any]] = []
    while len(out) < n:
        kinds = (("no_call",) + order) if len(out) % NO_CALL_EVERY == NO_CALL_EVERY - 1 else order
        row = next((r for k in kinds for r in queues[k]), None)
        if row is None:
            break
        out.append(row)
    return out


def _gold_tokens(row: dict[str, Any]) -> float:
    """Estimated tokens of the row's gold calls rendered as ``<tool_call>`` blocks."""
    return sum(len(json.dumps(c)) + len("<tool_call></tool_call>") for c in row["gold_calls"]) / CHARS_PER_TOKEN


def _length(row: dict[str, Any]) -> int:
    return len(json.dumps(row["messages"])) + len(json.dumps(row["tools"]))


def first_turns(row: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """The row cut after its last whole turn that fits ``max_tokens`` (estimated from characters).

    A turn ends with the assistant's closing message, so the cut conversation still ends on an
    assistant turn (loss on the last turn stays meaningful). At least one turn is always kept.
    """
    budget = max_tokens * CHARS_PER_TOKEN - len(json.dumps(row["tools"]))
    messages = row["messages"]
    ends = [i for i, m in enumerate(messages) if m["role"] == "assistant" and not m.get("tool_calls")]
    keep = ends[0] if ends else len(messages) - 1
    for end in ends:
        if len(json.dumps(messages[: end + 1])) <= budget:
            keep = end
    return {**row, "messages": messages[: keep + 1]}


def last_turn_alone(row: dict[str, Any]) -> dict[str, Any]:
    """The row's system messages and its last turn (from the last user message on), id ``<id>#last_turn``:
    a request that no offered tool serves is refused the same way with or without the turns before it, and a
    request that names each of its targets is served the same way."""
    messages = row["messages"]
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    system = [m for m in messages[:last_user] if m.get("role") == "system"]
    return {**row, "id": f"{row['id']}#last_turn", "messages": system + messages[last_user:]}


def source_row_id(example_id: str) -> str:
    """The SFT row an example was cut from: ``sft_x#last_turn`` -> ``sft_x`` (a row's own id unchanged)."""
    return example_id.partition("#")[0]


# kinds the datasets stage adds as a row's last turn (synth.datasets.datagaps), kept alone when the cut drops them
_LAST_TURN_KINDS = ("no_call", "same_tool_parallel")

TRAIN_MIXES = ("shortest", "stratified")
"""How :func:`training_examples` picks rows: the shortest overall, or stratified by :func:`example_kind`."""


EXAMPLE_KINDS = ("no_call", "calls", "parallel", "same_tool_parallel")
"""What :func:`example_kind` returns, in the order reports list them."""


def example_kind(example: dict[str, Any]) -> str:
    """What the last turn of a (cut) SFT example trains, the turn ``loss_on: last_turn`` learns from.

    Returns:
        ``"no_call"``: no tool call after the last user message (abstention or a clarifying question);
        ``"same_tool_parallel"``: some assistant message there calls one function several times (BFCL's
        ``parallel``); ``"parallel"``: some assistant message there holds several calls of different
        functions; ``"calls"``: otherwise.
    """
    messages = example["messages"]
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    groups = [
        [c["function"]["name"] for c in m.get("tool_calls") or []]
        for m in messages[last_user + 1 :]
        if m.get("role") == "assistant"
    ]
    if not any(groups):
        return "no_call"
    if any(len(set(names)) < len(names) for names in groups):
        return "same_tool_parallel"
    return "parallel" if max(len(names) for names in groups) > 1 else "calls"


def check_mix(mix: str, min_no_call_share: float, setting: str = "") -> None:
    """Raises ValueError, named with ``setting`` (e.g. ``"checkpoint setting "``), when ``mix`` is not one of
    :data:`TRAIN_MIXES` or ``min_no_call_share`` is not a share in [0, 1]."""
    if mix not in TRAIN_MIXES:
        named = f"{setting}train_mix={mix!r}" if setting else f"training mix {mix!r}"
        raise ValueError(f"{named}: expected one of {', '.join(TRAIN_MIXES)}")
    if (
        isinstance(min_no_call_share, bool)
        or not isinstance(min_no_call_share, (int, float))
        or not 0.0 <= min_no_call_share <= 1.0
    ):
        raise ValueError(f"{setting}min_no_call_share={min_no_call_share!r}: expected a share in [0, 1]")


def _only_empty_calls(example: dict[str, Any]) -> bool:
    """Every tool call of the example has empty arguments (``{}``): what a shortest-first pick favours."""
    calls = [c for m in example["messages"] for c in m.get("tool_calls") or []]
    return bool(calls) and all(str(c["function"].get("arguments") or "{}").strip() in ("{}", "") for c in calls)


def _quotas(sizes: dict[str, int], n: int, min_no_call_share: float) -> dict[str, int]:
    """Rows per kind: the kinds' shares of the candidates (``no_call`` raised to ``min_no_call_share``),
    rounded by largest remainder to ``n`` in all, none above what the kind has; rows a kind lacks go to the
    others in the same proportions."""
    total = sum(sizes.values())
    shares = {k: v / total for k, v in sizes.items()}
    if sizes.get("no_call") and shares["no_call"] < min_no_call_share:
        rest = 1.0 - shares["no_call"]
        shares = {
            k: (min_no_call_share if k == "no_call" else (v / rest * (1.0 - min_no_call_share) if rest else 0.0))
            for k, v in shares.items()
        }
    quotas = {k: 0 for k in sizes}
    left = min(n, total)
    while left:
        open_kinds = [k for k in sizes if quotas[k] < sizes[k]]
        weight = sum(shares[k] for k in open_kinds) or float(len(open_kinds))
        want = {k: left * ((shares[k] / weight) if weight else 1 / len(open_kinds)) for k in open_kinds}
        floors = {k: min(int(want[k]), sizes[k] - quotas[k]) for k in open_kinds}
        given = sum(floors.values())
        if not given:  # every floor is 0: one row to the largest remainder, ties by kind name
            floors[max(open_kinds, key=lambda k: (want[k] - int(want[k]), k))] = 1
            given = 1
        for k, v in floors.items():
            quotas[k] += v
        left -= given
    return quotas


def training_examples(
    sft_rows: list[dict[str, Any]],
    max_rows: int,
    max_tokens: int = 1024,
    max_tools: int = 0,
    mix: str = "shortest",
    min_no_call_share: float = 0.0,
) -> list[dict[str, Any]]:
    """``max_rows`` training examples: each SFT row cut after its last whole turn that fits
    (:func:`first_turns`) with its tools restricted (:func:`restrict_tools`), returned shortest first (ties
    by id). CPU speed is set by prompt length.

    Args:
        mix: ``"shortest"``: the ``max_rows`` shortest examples. ``"stratified"``: the examples' kinds
            (:func:`example_kind`: no call, parallel calls, calls) in their shares of all examples, and
            within a kind examples with some non-empty arguments before those whose every call is ``{}``,
            then shortest first. Why: the shortest examples are abstentions and argument-free creates
            (on the default store 48% of the 256 shortest had no call, against 12% of all rows), so a
            shortest-first model learns to call rarely and with empty arguments.
            A row whose last turn has no call (an abstention: the synthesized turns end a row with one, and
            a clarification exchange sits inside its turn, before the calls) or calls one function several
            times (a same-tool parallel turn, also added last) and does not fit ``max_tokens`` is also kept
            as that turn alone (:func:`last_turn_alone`): most such turns end long rows, so the cut would
            drop every one of them but the shortest rows'.
        min_no_call_share: with ``"stratified"``, the no-call kind's share is raised to at least this
            (0 keeps the data's share); the others keep their proportions.

    Raises:
        ValueError: ``mix`` is not one of :data:`TRAIN_MIXES`, or ``min_no_call_share`` is outside [0, 1]
            (:func:`check_mix`).
    """
    check_mix(mix, min_no_call_share)
    examples = []
    for r in sft_rows:
        row = {"id": r["id"], "messages": r["messages"], "tools": r["tools"]}
        cut = first_turns(row, max_tokens)
        examples.append(restrict_tools(cut, max_tools))
        kind = example_kind(row)
        if mix == "stratified" and kind in _LAST_TURN_KINDS and example_kind(cut) != kind:
            examples.append(restrict_tools(last_turn_alone(row), max_tools))
    by_length = sorted(examples, key=lambda r: (_length(r), r["id"]))
    if mix == "shortest" or not examples:
        return by_length[:max_rows]
    strata: dict[str, list[dict[str, Any]]] = {}
    for example in sorted(by_length, key=_only_empty_calls):  # stable: shortest first within each group
        strata.setdefault(example_kind(example), []).append(example)
    quotas = _quotas({k: len(v) for k, v in strata.items()}, max_rows, min_no_call_share)
    chosen = [e for k, rows in strata.items() for e in rows[: quotas[k]]]
    return sorted(chosen, key=lambda r: (_length(r), r["id"]))


def eval_prompt(row: dict[str, Any], max_tools: int) -> dict[str, Any]:
    """An RL row as a held-out prompt: ``{"id", "messages", "tools", "gold_calls", "masked_arguments"}``, tools
    restricted as in training (:func:`restrict_tools`, the gold calls' tools always kept); the gold calls are
    what :func:`~envfactory_assets.training.evaluate.argument_shares` compares the generations with."""
    cut = restrict_tools(
        {"id": row["id"], "messages": row["prompt"], "tools": row["tools"]},
        max_tools,
        {c["name"] for c in row["gold_calls"]},
    )
    return {**cut, "gold_calls": row["gold_calls"], "masked_arguments": row.get("masked_arguments") or []}


def held_out_prompts(
    rl_rows: list[dict[str, Any]], n: int, exclude_env_ids: set[str] | None = None, max_tools: int = 0
) -> list[dict[str, Any]]:
    """``n`` prompts (:func:`eval_prompt`) from RL rows never used for SFT: first turns, shortest first, mixed
    by :func:`prompt_mix` so that they hold turns whose gold calls carry arguments the query gives (and turns
    where no call is wanted, when there are any): on argument-free reads alone a policy that calls with
    empty arguments looks right.

    Rows whose environments are in ``exclude_env_ids`` are skipped when enough others exist.
    """
    first = [r for r in rl_rows if r["turn_index"] == 0]
    preferred = [r for r in first if not (set(r["env_ids"]) & (exclude_env_ids or set()))]
    pool = preferred if len(preferred) >= n else first
    prompts = {r["id"]: eval_prompt(r, max_tools) for r in pool}
    pool = sorted(pool, key=lambda r: (_length(prompts[r["id"]]), r["id"]))
    return [prompts[r["id"]] for r in prompt_mix(pool, n)]


def checkpoint_id(dataset_version: str, base_hash: str, config: dict[str, Any], row_ids: list[str]) -> str:
    """Content id of a checkpoint: dataset version, base weights, chat template, training config and rows used."""
    template = hashlib.sha256(TOOL_CHAT_TEMPLATE.encode()).hexdigest()
    return content_id(
        "ckpt",
        {"data": dataset_version, "base": base_hash, "template": template, "config": config, "rows": sorted(row_ids)},
    )


def train_checkpoint(
    sft_rows: list[dict[str, Any]],
    rl_rows: list[dict[str, Any]],
    base_model: str,
    models_dir: Path,
    checkpoints_dir: Path,
    config: SFTConfigSpec,
    max_train_rows: int,
    n_eval_prompts: int,
    dataset_version: str,
    log: Any = print,
    max_tools: int = 0,
    progress: Any = None,
    train_mix: str = "shortest",
    min_no_call_share: float = 0.0,
    stored: Callable[[str], dict[str, Any] | None] | None = None,
    keep_rows: bool = False,
) -> dict[str, Any]:
    """Fine-tune ``base_model`` on the SFT rows and return a ``checkpoints`` row; ``progress(steps done,
    max_steps)`` is called after every optimizer step (:func:`~envfactory_assets.training.sft.train_sft`);
    ``train_mix`` and ``min_no_call_share`` choose the rows (:func:`training_examples`).

    ``stored(checkpoint id)`` returns an earlier ``checkpoints`` row of that id, or None. The id is a
    content id of the data version, base weights, chat template, SFT settings and rows (:func:`checkpoint_id`),
    so when such a row exists and its directory still holds a complete model whose weights hash to the
    recorded ``metrics["weights_hash"]`` (rows written before that key existed: any complete model), that
    row is returned as it is, with ``metrics["reused"]`` set, and nothing is trained: a GRPO or evaluation
    setting changed after a long SFT run does not pay for the SFT run again.

    With ``keep_rows`` the finished row is also kept beside its weights until :func:`clear_kept_rows` (called once
    the row is stored): a run stopped after SFT and started again returns that row as it is, where a run
    stopped during SFT continues from its last resumable checkpoint (:func:`~envfactory_assets.training.sft.train_sft`).

    Raises:
        ValueError: when there are no SFT rows to train on, or the rows' stored splits would train on a
            held-out environment (:func:`~envfactory_assets.tooluse.splits.stored_held_out`).
    """
    if not sft_rows:
        raise ValueError("sft_dataset is empty: nothing to train on")
    stored_held_out([*sft_rows, *rl_rows])  # GRPO trains on these RL rows' train split too
    sft_rows = train_split(sft_rows)
    if not sft_rows:
        raise ValueError("sft_dataset has no train-split rows (every environment is held out): nothing to train on")
    base_dir = resolve_base_model(base_model, models_dir)
    base_hash = model_hash(base_dir)
    examples = training_examples(sft_rows, max_train_rows, config.max_length, max_tools, train_mix, min_no_call_share)
    by_id = {r["id"]: r for r in sft_rows}
    train_rows = [by_id[i] for i in dict.fromkeys(source_row_id(e["id"]) for e in examples)]
    train_envs = {e for r in train_rows for e in r["env_ids"]}
    held_out = [r for r in rl_rows if stored_split(r) == "held_out"]
    prompts = held_out_prompts(held_out or rl_rows, n_eval_prompts, train_envs, max_tools)
    cfg = result_settings(config)
    ckpt = checkpoint_id(
        dataset_version,
        base_hash,
        {**cfg, "base_model": base_model, "max_tools": max_tools},
        [e["id"] for e in examples],
    )  # a row's turn alone is an example of its own
    mix = {kind: sum(example_kind(e) == kind for e in examples) for kind in EXAMPLE_KINDS}
    out_dir = checkpoints_dir / ckpt
    earlier = stored(ckpt) if stored is not None else None
    if earlier is not None and _reusable(earlier, out_dir):
        log(f"reusing {ckpt}: the same data, base model, settings and rows were trained before ({out_dir})")
        if progress is not None:
            progress(config.max_steps, config.max_steps)
        return {**earlier, "metrics": {**earlier["metrics"], "reused": True}}
    kept = _kept_row(ckpt, out_dir) if keep_rows else None
    if kept is not None:
        log(f"resuming: SFT {ckpt} had finished before the run stopped ({out_dir})")
        if progress is not None:
            progress(config.max_steps, config.max_steps)
        return kept
    log(f"evaluating the base model on {len(prompts)} held-out prompts")
    before = tool_call_validity(base_dir, prompts, device=config.device) if prompts else {"share": None}
    log(f"training {ckpt} on {len(examples)} examples from {len(train_rows)} rows for {config.max_steps} steps")
    metrics = train_sft(examples, base_dir, out_dir, config, progress=progress)
    after = tool_call_validity(out_dir, prompts, device=config.device) if prompts else {"share": None}
    metrics.update(
        {
            "valid_tool_calls_before": before,
            "valid_tool_calls_after": after,
            "held_out_prompt_ids": [p["id"] for p in prompts],
            "train_mix": train_mix,
            "examples_by_kind": mix,
            "weights_hash": model_hash(out_dir),
        }
    )
    row = {
        "id": ckpt,
        "sft_dataset_version": dataset_version,
        "sft_dataset_ids": [r["id"] for r in train_rows],
        "base_model": base_model,
        "base_model_hash": base_hash,
        "config": cfg,
        "metrics": metrics,
        "path": str(out_dir),
        "stage": "sft",
        "parent_checkpoint_id": None,
        "rl_dataset_ids": None,
        "rl_dataset_version": None,
    }
    if keep_rows:
        save_stage_row(out_dir, row)
    return row


def _kept_row(ckpt: str, out_dir: Path) -> dict[str, Any] | None:
    """The row a stopped run kept for ``ckpt`` (:func:`~envfactory_assets.training.resume.save_stage_row`) when
    its weights are still whole in ``out_dir`` and hash to the row's ``weights_hash``; else None."""
    row = load_stage_row(out_dir)
    if row is None or row.get("id") != ckpt or Path(row.get("path") or "") != out_dir:
        return None
    if not is_complete_model_dir(out_dir):
        return None
    recorded = (row.get("metrics") or {}).get("weights_hash")
    return row if recorded is not None and recorded == model_hash(out_dir) else None


def clear_kept_rows(rows: list[dict[str, Any]]) -> None:
    """Forget the rows kept for ``rows`` (``keep_rows``): call once they are stored."""
    for row in rows:
        clear_stage_row(Path(row["path"]))


def _reusable(row: dict[str, Any], out_dir: Path) -> bool:
    """Whether an earlier SFT row's weights can stand for a new run of the same id: its path is ``out_dir``,
    the directory holds a complete model, and its weights hash to the row's ``weights_hash`` when recorded."""
    if row.get("stage") != "sft" or Path(row.get("path") or "") != out_dir or not is_complete_model_dir(out_dir):
        return False
    recorded = (row.get("metrics") or {}).get("weights_hash")
    return recorded is None or recorded == model_hash(out_dir)


def train_split(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the train split (their stored ``split``, :func:`~envfactory_assets.tooluse.splits.stored_split`).

    Raises:
        ValueError: a row has no stored split.
    """
    return [r for r in rows if stored_split(r) == "train"]


#: Tools a GRPO prompt offers (the gold calls' tools plus distractors): a short prompt keeps rollouts cheap.
DEFAULT_GRPO_MAX_TOOLS = 4


def grpo_tasks(
    rl_rows: list[dict[str, Any]], n: int, max_tools: int = 0, max_completion_tokens: int | None = None
) -> list[dict[str, Any]]:
    """``n`` RL rows for GRPO where rollouts of a small model sometimes succeed: train split, first turns,
    fewest gold calls, then shortest gold calls and prompt first (ties by id), mixed by :func:`prompt_mix`
    (turns whose gold calls carry arguments the query gives, every 4th a turn where no call is wanted when the
    rows have one; argument-free reads only when nothing else is left), tools restricted as in SFT
    (:func:`restrict_tools`, the gold calls' tools always kept). Rows whose tools cannot be methods of an
    environment object (a reserved or private tool name) are skipped. With ``max_completion_tokens``, rows
    whose gold calls fit in that many tokens come first (no rollout can earn the trace of the others)."""
    pool = [r for r in train_split(rl_rows) if r["turn_index"] == 0]
    budget = float("inf") if max_completion_tokens is None else max_completion_tokens
    pool.sort(
        key=lambda r: (
            _gold_tokens(r) > budget,
            len(r["gold_calls"]),
            round(_gold_tokens(r)),
            len(json.dumps(r["prompt"])),
            r["id"],
        )
    )
    usable = []
    for row in pool:
        cut = restrict_tools({**row, "messages": []}, max_tools, {c["name"] for c in row["gold_calls"]})
        task = {**row, "tools": cut["tools"]}
        try:
            environment_class(task["tools"])
        except ValueError:
            continue
        usable.append(task)
    return prompt_mix(usable, n)


def grpo_checkpoint(
    sft_row: dict[str, Any],
    rl_rows: list[dict[str, Any]],
    environments: dict[str, dict[str, Any]],
    checkpoints_dir: Path,
    spec: GRPOConfigSpec,
    n_prompts: int,
    rl_dataset_version: str,
    log: Any = print,
    max_tools: int = 0,
    eval_max_tools: int = 0,
    screen_factor: int = 1,
    progress: Any = None,
    keep_rows: bool = False,
) -> dict[str, Any] | None:
    """GRPO from the SFT checkpoint ``sft_row`` on train-split RL rows; returns its ``checkpoints`` row
    (``stage`` 'grpo', parent the SFT row), or None when there is no usable RL row. ``max_tools`` cuts the
    GRPO prompts' tools; ``eval_max_tools`` must be the cut the SFT row's held-out prompts were made with, so
    the validity before (the SFT row's) and after GRPO are measured on the same prompts. ``screen_factor``
    > 1 offers ``n_prompts * screen_factor`` candidates, screened for a reward spread under the SFT policy
    (:mod:`~envfactory_assets.training.screening`); the row's ``rl_dataset_ids`` are the prompts trained on.
    ``progress(steps done, spec.max_steps)`` is called after every GRPO step. ``keep_rows``: as in
    :func:`train_checkpoint` (a stopped GRPO run continues from its last resumable checkpoint, a finished one
    is returned as kept).

    Raises:
        KeyError: a chosen row uses an environment missing from ``environments``.
        ValueError: ``n_prompts`` or ``screen_factor`` < 1.
    """
    if n_prompts < 1 or screen_factor < 1:
        raise ValueError(
            f"GRPO settings: grpo_n_prompts={n_prompts} and grpo_screen_factor={screen_factor} must "
            "both be >= 1 (a screen factor of 1 trains on the first prompts without screening)"
        )
    tasks = [
        t
        for t in grpo_tasks(rl_rows, n_prompts * max(4, screen_factor), max_tools, spec.max_completion_length)
        if set(t["env_ids"]) <= set(environments)
    ]
    tasks = tasks[: n_prompts * screen_factor]
    if not tasks:
        log("no train-split RL rows usable for GRPO: only the SFT checkpoint is written")
        return None
    cfg = result_settings(spec)
    ckpt = content_id(
        "ckpt",
        {
            "parent": sft_row["id"],
            "rl": rl_dataset_version,
            "config": cfg,
            "max_tools": max_tools,
            "rows": sorted(t["id"] for t in tasks),
            "n_prompts": n_prompts,
            "screen_factor": screen_factor,
        },
    )
    out_dir = checkpoints_dir / ckpt
    kept = _kept_row(ckpt, out_dir) if keep_rows else None
    if kept is not None:
        log(f"resuming: GRPO {ckpt} had finished before the run stopped ({out_dir})")
        if progress is not None:
            progress(spec.max_steps, spec.max_steps)
        return kept
    log(f"GRPO {ckpt} from {sft_row['id']}: {n_prompts} prompts of {len(tasks)} candidates, {spec.max_steps} steps")
    metrics = train_grpo(
        tasks, environments, Path(sft_row["path"]), out_dir, spec, n_prompts=n_prompts, progress=progress
    )
    tasks = [t for t in tasks if t["id"] in set(metrics["prompt_ids"])]
    prompts = [_prompt_of(rl_rows, p, eval_max_tools) for p in sft_row["metrics"].get("held_out_prompt_ids", [])]
    after = tool_call_validity(out_dir, prompts, device=spec.device) if prompts else {"share": None}
    metrics.update(
        {
            "valid_tool_calls_before": sft_row["metrics"].get("valid_tool_calls_after"),
            "valid_tool_calls_after": after,
            "held_out_prompt_ids": [p["id"] for p in prompts],
            "weights_hash": model_hash(out_dir),
        }
    )
    row = {
        "id": ckpt,
        "sft_dataset_version": sft_row["sft_dataset_version"],
        "sft_dataset_ids": sft_row["sft_dataset_ids"],
        "base_model": sft_row["base_model"],
        "base_model_hash": sft_row["base_model_hash"],
        "config": {**cfg, "max_tools": max_tools, "n_prompts": n_prompts, "screen_factor": screen_factor},
        "metrics": metrics,
        "path": str(out_dir),
        "stage": "grpo",
        "parent_checkpoint_id": sft_row["id"],
        "rl_dataset_ids": [t["id"] for t in tasks],
        "rl_dataset_version": rl_dataset_version,
    }
    if keep_rows:
        save_stage_row(out_dir, row)
    return row


def _prompt_of(rl_rows: list[dict[str, Any]], row_id: str, max_tools: int) -> dict[str, Any]:
    return eval_prompt(next(r for r in rl_rows if r["id"] == row_id), max_tools)
