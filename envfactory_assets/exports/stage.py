"""Build every export of one dataset version into ``$ENVFACTORY_HOME/exports/<version>/``.

Train and validation are the rows' stored ``split`` (set by
:func:`envfactory_assets.tooluse.splits.dataset_split` from their environments, the split training and
evaluation use). Files are written into
a temporary sibling folder and renamed into place, so a failed export leaves no half-written version.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from envfactory_assets.exports import formats, verl_reward
from envfactory_assets.exports.context import ContextLimit, fit_records
from envfactory_assets.exports.licences import allowed, row_licences
from envfactory_assets.exports.verl_tool_config import TOOLS_CONFIG, TOOLS_MODULE, TOOLS_SOURCE, verl_tool_config
from envfactory_assets.store.ids import content_id
from envfactory_assets.tooluse.chat_template import TOOL_CHAT_TEMPLATE
from envfactory_assets.tooluse.splits import stored_held_out

SPLITS = ("train", "validation")
MANIFEST = "manifest.json"
REWARD_MODULE = "envfactory_reward.py"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
FORMAT_VERSION = 5
"""Part of the export version: rows laid out differently (2: verl tool calls as objects, HF rows as objects,
SPDX licence ids, stored splits; 3: verl tool config, tool class and the rows' ``tools_kwargs``; 4: the verl
reward is the training reward (ground truth carries ``tools`` and ``executed_calls``), ShareGPT parallel calls
and results as one turn each; 5: HF rows within the base model's context, with ``source_id`` and ``n_tokens``,
and the chat template shipped) are a new version even when the row ids are the same."""


def _select(rows: list[dict[str, Any]], licences: Mapping[str, Mapping[str, str]], allow: Sequence[str]):
    """``([(row, its stored split, its licences)], rows dropped by the allow-list)``; the splits were checked
    by :func:`~envfactory_assets.tooluse.splits.stored_held_out` before."""
    kept, dropped = [], 0
    for row in rows:
        row_lic = row_licences(row["env_ids"], licences)
        if allowed(row_lic, allow):
            kept.append((row, row["split"], row_lic))
        else:
            dropped += 1
    return kept, dropped


def export_version(
    sft_rows: list[dict[str, Any]],
    rl_rows: list[dict[str, Any]],
    allow: Sequence[str],
    context: ContextLimit | None = None,
) -> str:
    """Content id of an export: the row ids, the licence allow-list and the context the HF rows fit (model
    name and maximum tokens)."""
    return content_id(
        "exp",
        {
            "sft": sorted(r["id"] for r in sft_rows),
            "rl": sorted(r["id"] for r in rl_rows),
            "allow": sorted(a.strip().lower() for a in allow),
            "format": FORMAT_VERSION,
            "context": None if context is None else [context.model, context.max_tokens],
        },
    )


def _cell(text: Any) -> str:
    """A Markdown table cell for text from a source document (licence names and URLs are untrusted): one line,
    pipes and HTML brackets escaped, so a name cannot end the table or add markup to the card."""
    flat = " ".join(str(text).split())
    return flat.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def dataset_card(manifest: dict[str, Any]) -> str:
    """The Markdown dataset card: formats, row counts per split, and every licence with its row count."""
    lines = [
        f"# EnvFactory dataset export `{manifest['version']}`",
        "",
        (
            "Tool-use conversations (SFT) and one-turn RL tasks with gold calls and final states, synthesized in "
            "executable environments built from public API descriptions. Train and validation are split by "
            "environment: no validation environment appears in train."
        ),
        "",
        (
            f"Licence allow-list: {', '.join(manifest['allow']) if manifest['allow'] else 'none (every licence)'}; "
            f"rows dropped by it: SFT {manifest['dropped']['sft']}, RL {manifest['dropped']['rl']}."
        ),
        "",
        "| file | format | train | validation |",
        "|---|---|---|---|",
    ]
    for name, info in manifest["files"].items():
        lines.append(f"| `{name}` | {info['format']} | {info['rows']['train']} | {info['rows']['validation']} |")
    reward = manifest.get("verl_reward")
    if reward:
        lines += [
            "",
            (
                "verl: rows keep earlier tool calls as OpenAI call objects (`prompt[*].tool_calls`); the reward "
                f"function is `{reward['custom_reward_function']['path']}` (`custom_reward_function.path` = that "
                f"file, `custom_reward_function.name={reward['custom_reward_function']['name']}`). It replays the "
                f"response's tool calls on the task's initial state with the {reward['n_environments']} "
                f"environments of `{reward['environments']}` (needs `envfactory_assets` installed) and returns "
                "the reward this project's GRPO trains with (trace and final-state match; an empty response, "
                "or a call with empty or default arguments where the gold needs arguments, scores 0)."
            ),
        ]
    tools = manifest.get("verl_tools")
    if tools:
        lines += [
            "",
            (
                f"verl tools: `{tools['tool_config_path']}` lists {tools['tools']} tools "
                f"(`actor_rollout_ref.rollout.multi_turn.tool_config_path` = that file, with this folder on "
                f"`PYTHONPATH` for `{tools['module']}`); each row offers its own (`extra_info.tool_selection`) and "
                "names its task (`extra_info.tools_kwargs`), and its calls run on the task's environments "
                "(one episode per rollout where verl passes `agent_data` to tools, as 0.9 does; "
                "docs/evaluation.md). "
                f"Left out (verl cannot read their parameters): {len(tools['left_out'])}; names whose parameters "
                f"differ between environments: {len(tools['shared_names'])} (see `manifest.json`)."
            ),
        ]
    lines += format_section(manifest)
    lines += [
        "",
        "## Source licences",
        "",
        "Each row lists the licences of the source resources of its environments (`licences`). Rows per licence:",
        "",
        "| licence | url | SFT rows | RL rows |",
        "|---|---|---|---|",
    ]
    for entry in manifest["licences"]:
        lines.append(f"| {_cell(entry['name'])} | {_cell(entry['url'])} | {entry['sft_rows']} | {entry['rl_rows']} |")
    lines += [
        "",
        (
            "`unspecified` means the source API description states no licence; check the provider's terms "
            "before redistributing such rows (the allow-list setting can exclude them)."
        ),
    ]
    return "\n".join(lines) + "\n"


EXAMPLE_CALL = {"name": "get_weather", "arguments": {"city": "Lisbon", "unit": "celsius"}}
"""The tool call the card shows when the export has none of its own."""


EXAMPLE_RESULT_CHARS = 300
"""The card shows at most this many characters of the example's tool result."""


def _example_exchange(manifest: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], str]:
    """``(call, tool, result)``: the first tool call of the export's SFT rows with its tool's spec and result
    (recorded in the manifest by :func:`build_exports`), else :data:`EXAMPLE_CALL` with a made-up spec and
    result."""
    example = manifest.get("example_call") or {}
    call = example.get("call") or EXAMPLE_CALL
    tool = example.get("tool") or {
        "type": "function",
        "function": {
            "name": call["name"],
            "description": "(the tool's description)",
            "parameters": {
                "type": "object",
                "properties": {k: {"type": "string"} for k in call["arguments"]},
                "required": sorted(call["arguments"]),
            },
        },
    }
    result = example.get("result") or '{"city": "Lisbon", "temperature": 18, "unit": "celsius"}'
    return call, tool, result


def _fenced(text: str) -> list[str]:
    """``text`` in a Markdown code fence longer than any backtick run in it (a tool result or argument from a
    source document cannot end the fence early)."""
    import re

    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, text, fence]


def format_section(manifest: dict[str, Any]) -> list[str]:
    """The card's "Format" section: the chat template the rows are rendered with and the ``<tool_call>``
    format verl's ``compute_score`` parses, with an example from the export, and the HF rows' context fit."""
    import json

    from envfactory_assets.tooluse.chat_template import render_chat

    call, tool, result = _example_exchange(manifest)
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "(the user's request)"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]},
        {"role": "tool", "name": call["name"], "content": result},
        {"role": "assistant", "content": "(the reply, stating what the result says)"},
    ]
    rendered = render_chat(messages, [tool])
    block = "<tool_call>" + json.dumps({"name": call["name"], "arguments": call["arguments"]}, ensure_ascii=False)
    block += "</tool_call>"
    lines = [
        "",
        "## Format",
        "",
        (
            f"Chat template: `{CHAT_TEMPLATE_FILE}` (Jinja, the one this project trains with; set it as "
            "`tokenizer.chat_template` and render a row with `tokenizer.apply_chat_template(row['messages'], "
            "tools=row['tools'])`). ChatML turns (`<|im_start|>role ... <|im_end|>`); the system turn lists each "
            "tool on one line, `- name(arg: type, optional?: type): description`; an assistant turn is its text, "
            "then one `<tool_call>` block per call; consecutive tool results are one `user` turn of "
            "`<tool_response>...</tool_response>` blocks."
        ),
        "",
        (
            "Tool calls, in training and in what verl's `compute_score` (`envfactory_reward.py`) parses: each "
            'call is a block `<tool_call>{"name": <tool name>, "arguments": {<JSON object>}}</tool_call>`, '
            "several blocks for several calls; text outside the blocks is the reply, `<think>...</think>` is "
            "ignored, a block that does not decode to a call counts as malformed (0.05 each off the reward). "
            "A response with no call, no malformed block and no reply text scores 0; on a row whose gold has no "
            "call (a request no offered tool can serve) the right answer is a reply that declines or asks, "
            "without a call. A call from this export:"
        ),
        "",
        *_fenced(block),
        "",
        "A whole exchange as the template renders it:",
        "",
        *_fenced(rendered.rstrip("\n")),
    ]
    context = manifest.get("hf_context")
    if context:
        lines += [
            "",
            (
                f"Context: every `hf_sft` row fits {context['model']}'s {context['max_tokens']:,} tokens, rendered "
                f"with this template (`n_tokens`). SFT rows within it: {context['kept']}; split at turn "
                f"boundaries into {context['parts']} rows: {context['split']} (each part keeps the system message "
                "and tools and ends on an assistant turn; `source_id` names the SFT row, and a part after the "
                "first starts at its first turn); dropped (a single turn over the context): "
                f"{context['dropped']}. The ShareGPT export keeps every SFT row whole."
            ),
        ]
    return lines


def _first_call(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """``{"call", "result"}`` of the first tool call in ``records`` (HF rows) and the result that follows it."""
    for record in records:
        messages = record["messages"]
        for i, message in enumerate(messages):
            for tool_call in message.get("tool_calls") or []:
                fn = tool_call.get("function") or tool_call
                after = next((m for m in messages[i + 1 :] if m.get("role") == "tool"), None)
                result = str((after or {}).get("content") or "{}")
                tool = next(
                    (t for t in record.get("tools") or [] if (t.get("function") or t).get("name") == fn["name"]), None
                )
                return {
                    "call": {"name": fn["name"], "arguments": fn.get("arguments") or {}},
                    "tool": tool,
                    "result": result if len(result) <= EXAMPLE_RESULT_CHARS else result[:EXAMPLE_RESULT_CHARS] + "...",
                }
    return None


def _licence_counts(sft: list, rl: list) -> list[dict[str, Any]]:
    counts: dict[tuple[str, str], Counter] = {}
    for kind, selected in (("sft_rows", sft), ("rl_rows", rl)):
        for _row, _split, lic in selected:
            for key in {(e["name"], e["url"]) for e in lic}:
                counts.setdefault(key, Counter())[kind] += 1
    return [
        {"name": n, "url": u, "sft_rows": c["sft_rows"], "rl_rows": c["rl_rows"]}
        for (n, u), c in sorted(counts.items())
    ]


class _RowCounter:
    """Counts formatted rows for ``progress(done, total)``: every row, so a caller's meter decides how often
    to report; :meth:`finish` reports ``total`` once all are written."""

    def __init__(self, total: int, progress: Callable[[int, int], None] | None) -> None:
        self.total, self.done, self.progress = total, 0, progress

    def one(self, row: Any) -> Any:
        self.done += 1
        if self.progress is not None and self.done < self.total:
            self.progress(self.done, self.total)
        return row

    def finish(self) -> None:
        if self.progress is not None:
            self.progress(self.total, self.total)


def build_exports(
    sft_rows: list[dict[str, Any]],
    rl_rows: list[dict[str, Any]],
    licences: Mapping[str, Mapping[str, str]],
    exports_dir: Path,
    allow: Sequence[str] = (),
    environments: Mapping[str, Mapping[str, Any]] | None = None,
    progress: Callable[[int, int], None] | None = None,
    context: ContextLimit | None = None,
) -> dict[str, Any]:
    """Write verl parquet, ShareGPT JSON, a HF dataset and the dataset card for one dataset version.

    Args:
        sft_rows / rl_rows: current ``sft_dataset`` / ``rl_dataset`` rows.
        licences: ``{env_id: {"name", "url", "source_resource_id"}}`` (see ``licences.environment_licences``).
        exports_dir: ``$ENVFACTORY_HOME/exports``; the version goes to ``exports_dir / version``.
        allow: licence names to keep (case-insensitive); empty keeps every row.
        environments: ``{env_id: Environment dict}`` of the passed environments; when given, the verl export
            ships ``environments.json`` (``{env_id: {"source", "origin"}}`` of the RL rows' environments) and
            ``envfactory_reward.py`` (:mod:`envfactory_assets.exports.verl_reward`), verl's reward function,
            with ``envfactory_tools.yaml`` (:mod:`~envfactory_assets.exports.verl_tool_config`), verl's tool
            config, and ``envfactory_tools.py`` (:mod:`envfactory_assets.exports.verl_tools`), its tool class.
        progress: called as ``progress(done, total)`` with the rows written so far, ``total`` being the rows
            of the three formats (RL rows once, SFT rows twice); not called for a version already written.
        context: the base model's context (:func:`~envfactory_assets.exports.context.tokenizer_limit`); when
            given, HF rows over it are split at turn boundaries or dropped
            (:func:`~envfactory_assets.exports.context.fit_records`) and the manifest's ``hf_context`` counts
            them; when None, HF rows are written whole and uncounted.

    Returns:
        The manifest (also written as ``manifest.json``): ``{"version", "path", "allow", "dropped",
        "files": {name: {"format", "rows": {split: n}}}, "licences": [...], "validation_env_ids": [...],
        "held_out_env_ids": [...], "hf_context": {"model", "max_tokens", "kept", "split", "parts", "dropped"}
        or None}`` (held out: the environments never trained on).
        An existing complete version is returned as it is (idempotent).

    Raises:
        KeyError: a row's environment has no known source licence, or is missing from ``environments``
            (nothing is written).
        ValueError: a row's stored split is missing, or the splits would train on a held-out environment
            (:func:`~envfactory_assets.tooluse.splits.stored_held_out`; nothing is written).
        ValueError: ``allow`` has a blank entry, which would silently drop every row (nothing is written).
        ValueError: a row's or an environment's tool name is not a function name a model API accepts
            (:func:`~envfactory_assets.exports.formats.check_tool_names`; nothing is written).
    """
    import json

    import yaml

    blank = [a for a in allow if not isinstance(a, str) or not a.strip()]
    if blank:
        raise ValueError(
            f"allowed_licences has blank or non-text entries {blank!r}: list licence names "
            "(or leave the list empty to keep every licence)"
        )
    version = export_version(sft_rows, rl_rows, allow, context)
    out = Path(exports_dir) / version
    if (out / MANIFEST).is_file():
        # where the version is now (a home copied or moved keeps its exports)
        return {**json.loads((out / MANIFEST).read_text(encoding="utf-8")), "path": str(out)}
    held_out = stored_held_out([*sft_rows, *rl_rows])
    sft, sft_dropped = _select(sft_rows, licences, allow)
    rl, rl_dropped = _select(rl_rows, licences, allow)
    for kind, selected in (("sft", sft), ("rl", rl)):
        for row, _split, _licences in selected:
            formats.check_tool_names(row["tools"], f"{kind} row {row['id']}")
    written = _RowCounter(len(rl) + 2 * len(sft), progress)
    tmp = out.with_name(f".{version}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    files: dict[str, Any] = {}
    for split in SPLITS:
        verl = [
            written.one(formats.verl_row(r, i, s, lic)) for i, (r, s, lic) in enumerate(x for x in rl if x[1] == split)
        ]
        formats.write_parquet(verl, tmp / f"verl_{split}.parquet")
        files[f"verl_{split}.parquet"] = {
            "format": "verl parquet (RL)",
            "rows": {s: (len(verl) if s == split else 0) for s in SPLITS},
        }
        share = [written.one(formats.sharegpt_record(r, s, lic)) for r, s, lic in sft if s == split]
        formats.write_json(share, tmp / f"sharegpt_{split}.json")
        files[f"sharegpt_{split}.json"] = {
            "format": "LlamaFactory ShareGPT (SFT)",
            "rows": {s: (len(share) if s == split else 0) for s in SPLITS},
        }
    if environments is not None:
        used = sorted({e for r, _s, _l in rl for e in r["env_ids"]})
        missing = [e for e in used if e not in environments]
        if missing:
            shutil.rmtree(tmp, ignore_errors=True)
            raise KeyError(f"rl rows use environments that are not passed: {missing[:10]}")
        try:
            tool_config, tools_report = verl_tool_config(environments, used)
        except ValueError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        formats.write_json(
            {
                e: {"source": environments[e]["source"], "origin": environments[e].get("origin", "untrusted")}
                for e in used
            },
            tmp / verl_reward.ENVIRONMENTS_FILE,
        )
        shutil.copyfile(verl_reward.__file__, tmp / REWARD_MODULE)
        reward_info = {
            "custom_reward_function": {"path": REWARD_MODULE, "name": "compute_score"},
            "environments": verl_reward.ENVIRONMENTS_FILE,
            "n_environments": len(used),
        }
        (tmp / TOOLS_CONFIG).write_text(
            yaml.safe_dump(tool_config, sort_keys=False, allow_unicode=True), encoding="utf-8"
        )
        shutil.copyfile(TOOLS_SOURCE, tmp / TOOLS_MODULE)
        tools_info = {"tool_config_path": TOOLS_CONFIG, "module": TOOLS_MODULE, **tools_report}
    else:
        reward_info = tools_info = None
    formats.write_json(
        {f"envfactory_{s}": {"file_name": f"sharegpt_{s}.json", **formats.SHAREGPT_DATASET_INFO} for s in SPLITS},
        tmp / "dataset_info.json",
    )
    hf = {s: [written.one(formats.hf_record(r, s2, lic)) for r, s2, lic in sft if s2 == s] for s in SPLITS}
    example_call = _first_call([r for s in SPLITS for r in hf[s]])
    hf_context = None
    if context is not None:
        hf_context = {
            "model": context.model,
            "max_tokens": context.max_tokens,
            "kept": 0,
            "split": 0,
            "parts": 0,
            "dropped": 0,
        }
        for s in SPLITS:
            hf[s], counts = fit_records(hf[s], context)
            for key, n in counts.items():
                hf_context[key] += n
    formats.write_hf(hf, tmp / "hf_sft")
    (tmp / CHAT_TEMPLATE_FILE).write_text(TOOL_CHAT_TEMPLATE, encoding="utf-8")
    written.finish()
    files["hf_sft"] = {"format": "Hugging Face datasets (save_to_disk, SFT)", "rows": {s: len(hf[s]) for s in SPLITS}}
    manifest = {
        "version": version,
        "path": str(out),
        "allow": list(allow),
        "dropped": {"sft": sft_dropped, "rl": rl_dropped},
        "files": files,
        "licences": _licence_counts(sft, rl),
        "validation_env_ids": sorted({e for r, s, _l in sft + rl if s == "validation" for e in r["env_ids"]}),
        "held_out_env_ids": sorted(held_out),
        "verl_reward": reward_info,
        "verl_tools": tools_info,
        "hf_context": hf_context,
        "chat_template": CHAT_TEMPLATE_FILE,
        "example_call": example_call,
    }
    (tmp / "README.md").write_text(dataset_card(manifest), encoding="utf-8")
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
    try:
        os.replace(tmp, out)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / MANIFEST).is_file():
            raise
    return manifest
