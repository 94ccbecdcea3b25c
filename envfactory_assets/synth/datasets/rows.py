"""SFT and RL rows from refined trajectories.

SFT: one row per trajectory, OpenAI chat format with ``tool_calls`` (arguments as JSON strings).
RL: one row per turn (paper): the conversation up to the turn's last user message before its gold calls
(its query, or in conversational mode the user's answer to the clarification question), the gold calls trimmed
to the essential ones, ``masked_arguments`` whose value does not matter, and the turn's initial and
final state. A row is kept only if replaying its trimmed gold calls on its initial state in a fresh
episode gives the recorded final state exactly, and a turn that claims to change state really does.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from envfactory_assets.envgen.tools import READ_KINDS, openai_tool
from envfactory_assets.runtime.canonical import canonical_json, state_hash
from envfactory_assets.runtime.sandbox import SandboxWorker, StateRejected, WorkerCrashed
from envfactory_assets.synth.trajectories.execution import to_messages
from envfactory_assets.synth.trajectories.real_calls import window_arguments

MASKED_ARGUMENT_NAMES = ("limit", "page", "offset", "page_size", "per_page", "cursor")
# The paper's released split: 1,622 SFT and 953 RL trajectories out of 2,575.
PAPER_SFT_SHARE = 1622 / 2575


def split_of(trajectory_id: str, sft_share: float = PAPER_SFT_SHARE) -> str:
    """``"sft"`` or ``"rl"`` from a stable hash of the trajectory id (no global random stream)."""
    bucket = int(hashlib.sha256(trajectory_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "sft" if bucket < sft_share else "rl"


def tools_of(environments: dict[str, dict[str, Any]], env_ids: list[str]) -> list[dict[str, Any]]:
    """OpenAI function specs of every tool of ``env_ids``."""
    return [openai_tool(t) for e in env_ids for t in environments[e]["tools"]]


def sft_row(trajectory: dict[str, Any], environments: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"messages", "tools"}`` for one refined trajectory."""
    return {"messages": to_messages(trajectory["turns"]), "tools": tools_of(environments, trajectory["env_ids"])}


def essential_calls(calls: list[dict[str, Any]]) -> list[int]:
    """Indexes (within the turn) of the calls a complete answer makes: every call the turn executed. The turn's
    request describes each of its calls and its reply reports each one's result
    (:func:`~envfactory_assets.synth.trajectories.synthesize_trajectory`; goal expansion's follow-up read is
    asked for and reported the same way), so no read is one whose result the answer does not need: a look-up
    that found the row the request names, or the read of the row just written, is part of the answer.

    A turn without calls (an abstention turn) keeps none.
    """
    return list(range(len(calls)))


def _gold_call(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": call["name"],
        "arguments": call["arguments"],
        **({"expect_error": call["error"]} if call.get("error") else {}),
    }


def rl_rows(trajectory: dict[str, Any], environments: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One RL row per turn (not yet replay-checked); a turn without calls (an abstention turn) gives a row
    whose gold is no call and whose final state is its initial state. ``gold_reply`` is the turn's closing
    assistant reply: on an abstention row it is the whole gold answer (a reply that declines or asks).

    Calls of a tool with a real MCP signature must already be in the real names
    (:func:`~envfactory_assets.synth.trajectories.real_calls.real_trajectory`); its window parameters
    (:func:`~envfactory_assets.synth.trajectories.real_calls.window_arguments`) are masked as ``limit`` is, and so
    is a required real parameter that holds its schema's placeholder (provenance ``{"source": "schema"}``)."""
    messages = to_messages(trajectory["turns"])
    tools = tools_of(environments, trajectory["env_ids"])
    # a real MCP server's window parameters (``max_count``, ``per_page``) matter no more than ``limit``
    windows = {t["name"]: window_arguments(t) for e in trajectory["env_ids"] for t in environments[e]["tools"]}
    rows = []
    user_positions = [i for i, m in enumerate(messages) if m["role"] == "user"]
    users_so_far = 0  # user messages up to the turn's gold calls: its query and its clarification answers
    for t_idx, turn in enumerate(trajectory["turns"]):
        users_so_far += 1 + sum(1 for m in turn.get("clarification") or [] if m["role"] == "user")
        keep = essential_calls(turn["calls"])
        gold = [_gold_call(turn["calls"][i]) for i in keep]
        executed = [_gold_call(c) for c in turn["calls"]]
        masked = sorted(
            {
                a
                for g in executed
                for a in g["arguments"]
                if a in MASKED_ARGUMENT_NAMES or a in windows.get(g["name"], ())
            }
            # a required real parameter nobody gave holds its schema's placeholder: any valid value will do
            | {a for c in turn["calls"] for a, p in (c.get("provenance") or {}).items() if p.get("source") == "schema"}
        )
        rows.append(
            {
                "turn_index": t_idx,
                "prompt": messages[: user_positions[users_so_far - 1] + 1],
                "tools": tools,
                "gold_calls": gold,
                "executed_calls": executed,
                "gold_reply": turn.get("assistant_summary") or "",
                "masked_arguments": masked,
                "initial_state": turn["state_before"],
                "final_state": turn["state_after"],
                "final_state_hash": turn["state_after_hash"],
                "changes_state": any(c["kind"] not in READ_KINDS and not c.get("error") for c in turn["calls"]),
            }
        )
    return rows


def gold_writes_state(gold_calls: list[dict[str, Any]], writers: set[str]) -> bool:
    """Whether replaying ``gold_calls`` must change the state: one of them is a call of a tool in
    ``writers`` (names of tools that are not read-only) that is not expected to be refused
    (``expect_error``: a refused precondition changes nothing)."""
    return any(c["name"] in writers and not c.get("expect_error") for c in gold_calls)


def replay_check(row: dict[str, Any], worker: SandboxWorker) -> str | None:
    """None when replaying ``gold_calls`` on ``initial_state`` reproduces ``final_state`` exactly (a gold call
    with ``expect_error`` failing with exactly that error type), and a state-changing task really changes
    state; otherwise the reason the row is rejected."""
    if row["changes_state"] and state_hash(row["initial_state"]) == row["final_state_hash"]:
        return "no-op task: claims to change state but its final state equals its initial state"
    try:
        episode = worker.open_episode(copy.deepcopy(row["initial_state"]))
    except (StateRejected, WorkerCrashed) as exc:
        return f"initial state does not load: {exc}"
    try:
        for call in row["gold_calls"]:
            res = worker.call(episode, call["name"], call["arguments"])
            expected = call.get("expect_error")
            if expected and (res.get("ok") or (res.get("error") or {}).get("type") != expected):
                got = res.get("error") or "success"
                return f"gold call {call['name']} should fail with {expected} on replay, got {got}"
            if not expected and not res.get("ok"):
                return f"gold call {call['name']} failed on replay: {res.get('error')}"
        digest = state_hash(worker.save(episode))
    finally:
        try:
            worker.close_episode(episode)
        except Exception:
            pass
    if digest != row["final_state_hash"]:
        return "replayed gold calls do not reach the recorded final state"
    return None


def complete_answer_problem(row: dict[str, Any], worker: SandboxWorker, writers: set[str]) -> str | None:
    """None when the turn's own answer wins the row: replaying ``executed_calls`` on ``initial_state``, with the
    turn's reply ``gold_reply``, earns :data:`~envfactory_assets.tooluse.reward.MAX_REWARD` under the training
    reward
    (:func:`~envfactory_assets.tooluse.reward.guarded_reward`), and every executed call the gold left out is a
    read whose result nothing needs (none is: the turn's reply reports every call's result, see
    :func:`essential_calls`); otherwise what is wrong.

    Args:
        row: an ``rl_dataset`` row (``gold_calls``, ``executed_calls``, ``gold_reply``, ``initial_state``,
            ``final_state``, ``tools``, ``masked_arguments``).
        worker: a sandbox worker with the row's environments loaded.
        writers: names of the tools that are not read-only.
    """
    from envfactory_assets.tooluse.reward import MAX_REWARD, guarded_reward

    executed = row.get("executed_calls")
    if executed is None:
        return "no executed_calls recorded: the reward cannot tell the turn's own calls from extra ones"
    reply = row.get("gold_reply") or ""
    if not executed and not reply.strip():
        return "no gold_reply recorded on a row without calls: its answer is the reply, and an empty one earns 0"
    try:
        episode = worker.open_episode(copy.deepcopy(row["initial_state"]))
    except (StateRejected, WorkerCrashed) as exc:
        return f"initial state does not load: {exc}"
    try:
        for call in executed:
            worker.call(episode, call["name"], call["arguments"])
        final = {e: state_hash(s) for e, s in worker.save(episode).items()}
    finally:
        try:
            worker.close_episode(episode)
        except Exception:
            pass
    masked = row.get("masked_arguments") or ()
    reward = guarded_reward(
        row["gold_calls"],
        executed,
        final,
        {e: state_hash(s) for e, s in row["final_state"].items()},
        {e: state_hash(s) for e, s in row["initial_state"].items()},
        row["tools"],
        masked_arguments=masked,
        executed_calls=executed,
        reply=reply,
    )
    if reward.reward != MAX_REWARD:
        return (
            f"replaying the turn's executed calls earns {reward.reward}, not {MAX_REWARD} "
            f"(trace {reward.trace}, state {reward.state}, extra calls {reward.n_extra})"
        )
    gold_left = [canonical_json([g["name"], g["arguments"]]) for g in row["gold_calls"]]
    for call in executed:
        key = canonical_json([call["name"], call["arguments"]])
        if key in gold_left:
            gold_left.remove(key)
        elif call["name"] in writers:
            return f"gold calls leave out the write {call['name']} the turn executed"
        else:
            return (
                f"gold calls leave out the read {call['name']}, whose result the turn's reply reports "
                "(a look-up that finds the row the request names, or the read the user asked for)"
            )
    return None
