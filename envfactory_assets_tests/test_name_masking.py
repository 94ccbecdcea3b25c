"""Function-name masking of SFT rows (Hammer, arXiv 2410.04587) in the datasets stage, on rows the stage builds
from the fixture environments: no masked name anywhere in a masked row, the row consistent with itself (it
unmasks to the real row), RL and validation rows untouched, the exports' audits passing; and the SFT mix per
kind that the datasets metadata and the report show."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from envfactory_assets.config_checks import SettingError
from envfactory_assets.exports.formats import OPENAI_FUNCTION_NAME_RE
from envfactory_assets.reporting.dataset_mix import distractors, sft_mix, sft_mix_lines
from envfactory_assets.store.db import Store
from envfactory_assets.synth.datasets.datagaps import DataGapsConfig
from envfactory_assets.synth.datasets.name_masking import (
    code_like,
    is_masked,
    leaked_names,
    mask_names,
    name_mapping,
    rename_tools,
    tool_names,
)
from envfactory_assets.synth.run_settings import DatasetRunSpec
from envfactory_assets.synth.stage import dataset_rows
from envfactory_assets.tooluse.splits import TRAIN_SPLIT
from envfactory_assets.training.stage import EXAMPLE_KINDS, example_kind
from envfactory_assets_tests.fixture_environments import (
    THREE_DOMAINS,
    build_fixture_environments,
    refined_like_rows,
)

GAPS = DataGapsConfig(abstention_share=0.3, parallel_share=1.0, conversion_share=1.0)
TOKEN = re.compile(r"fn_\d+")


@pytest.fixture(scope="module")
def environments() -> dict:
    return build_fixture_environments(*THREE_DOMAINS)


@pytest.fixture(scope="module")
def trajectories(environments, worker) -> list[dict]:
    return refined_like_rows(environments, worker, 30, "gaps")


@pytest.fixture(scope="module")
def built(trajectories, environments):
    """``{share: (sft rows, rl rows)}`` of the datasets stage with every train SFT row masked and with none."""
    out = {}
    for share in (0.0, 1.0):
        sft, rl, rejected = dataset_rows(trajectories, environments, 0.7, gaps=GAPS, name_mask_share=share)
        assert not rejected
        out[share] = (sft, rl)
    return out


def _identifiers(value) -> set[str]:
    """Every identifier-like token (``[A-Za-z0-9_]+``) in the strings and keys of ``value``, JSON strings (call
    arguments, tool results) decoded too: a scan of the whole row that shares no code with the masking."""
    if isinstance(value, dict):
        return {t for k, v in value.items() for t in _identifiers(k) | _identifiers(v)}
    if isinstance(value, list):
        return {t for v in value for t in _identifiers(v)}
    if not isinstance(value, str):
        return set()
    found = set(re.findall(r"[A-Za-z0-9_]+", value))
    if value.lstrip().startswith(("{", "[")):
        try:
            found |= _identifiers(json.loads(value))
        except ValueError:
            pass
    return found


def _name_fields(row: dict) -> list[str]:
    """The names in the places that name a tool: tool list, calls, tool messages."""
    return (
        [t["function"]["name"] for t in row["tools"]]
        + [c["function"]["name"] for m in row["messages"] for c in m.get("tool_calls") or []]
        + [m["name"] for m in row["messages"] if m["role"] == "tool"]
    )


def test_a_masked_row_shows_no_real_tool_name_and_unmasks_to_the_real_row(built):
    (plain, rl_plain), (masked, rl_masked) = built[0.0], built[1.0]
    assert rl_masked == rl_plain and rl_plain  # RL gold calls are replayed against the environments: real names
    assert [r["refined_trajectory_id"] for r in masked] == [r["refined_trajectory_id"] for r in plain]
    assert not any(r["names_masked"] for r in plain)
    n_masked = 0
    for real, row in zip(plain, masked, strict=True):
        if real["split"] != TRAIN_SPLIT:  # a validation row measures the model as it is used
            assert row == real and not row["names_masked"]
            continue
        n_masked += 1
        names = tool_names(real)
        assert row["names_masked"] and row["id"] != real["id"] and len(names) >= 2
        assert leaked_names(row, names) == []
        # the whole row, every string and key, nested JSON decoded: no code-like real name, and no real name
        # where a tool is named
        assert {n for n in names if code_like(n)} & _identifiers(row) == set()
        assert set(_name_fields(row)) & set(names) == set()
        offered = [t["function"]["name"] for t in row["tools"]]
        assert all(TOKEN.fullmatch(n) and OPENAI_FUNCTION_NAME_RE.fullmatch(n) for n in offered)
        assert len(set(offered)) == len(offered) == len(real["tools"])
        calls = {c["id"]: c["function"]["name"] for m in row["messages"] for c in m.get("tool_calls") or []}
        assert calls and set(calls.values()) <= set(offered)
        assert all(m["name"] == calls[m["tool_call_id"]] for m in row["messages"] if m["role"] == "tool")
        # every occurrence got the same token: the inverse mapping gives the real row back, descriptions,
        # schemas, arguments and results included
        mapping = name_mapping(real, real["refined_trajectory_id"])
        assert set(mapping) == set(names) and sorted(mapping.values()) == sorted(offered)
        back = rename_tools(row, {token: name for name, token in mapping.items()})
        assert back["messages"] == real["messages"] and back["tools"] == real["tools"]
        assert [example_kind(row), len(row["messages"])] == [example_kind(real), len(real["messages"])]
    assert n_masked >= 10
    # the stage's blocking SFT expectations (every call names a tool of its row, arguments are JSON objects)
    from envfactory_assets.quality.suites import validate_sft

    assert validate_sft(masked).success


def test_masking_is_the_same_on_a_rerun_and_keeps_ids_content_derived(built, trajectories, environments):
    masked, _ = built[1.0]
    again, _, _ = dataset_rows(trajectories, environments, 0.7, gaps=GAPS, name_mask_share=1.0)
    assert again == masked
    assert len({r["id"] for r in masked}) == len(masked)
    # the same trajectory masked under another key gets other tokens, so the tokens say nothing about a tool
    row = next(r for r in built[0.0][0] if r["split"] == TRAIN_SPLIT)
    orders = {tuple(sorted(name_mapping(row, f"key_{k}").items())) for k in range(8)}
    assert len(orders) > 1


def test_masking_replaces_code_like_names_in_every_text_of_the_row_and_plain_words_only_where_they_name_a_tool():
    """The fixture rows never name a tool in text; a row that does (system, user and assistant text, a
    description, a JSON result with the name after an escaped line break) is masked there too, while a longer
    identifier that only starts with a tool's name (``get_book_id``) is another word and stays. A tool named by a
    plain word (``dock``, as in the default run) is masked where it is named, and the word stays in the prose and
    the descriptions that need it. A token already in the row is not reused."""
    row = {
        "id": "r",
        "messages": [
            {"role": "system", "content": "Use get_book after list_books. fn_1 is a code name here."},
            {"role": "user", "content": "Call get_book_cover for get_book_id 'b1' (not get_book), then dock it."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_book", "arguments": '{"id": "b1"}'}},
                    {"id": "c2", "type": "function", "function": {"name": "dock", "arguments": '{"dock_id": "d1"}'}},
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "name": "get_book",
                "content": json.dumps({"note": "line one\nget_book ok", "see": "list_books"}),
            },
            {"role": "tool", "tool_call_id": "c2", "name": "dock", "content": '{"dock_id": "d1", "docked": true}'},
            {"role": "assistant", "content": "get_book returned the book, and the dock is done."},
        ],
        "tools": [
            {"type": "function", "function": {"name": n, "description": f"{n}: see list_books", "parameters": {}}}
            for n in ("get_book", "get_book_cover", "list_books")
        ]
        + [{"type": "function", "function": {"name": "dock", "description": "Dock a book.", "parameters": {}}}],
    }
    masked = mask_names(row, "r")
    mapping = name_mapping(row, "r")
    assert leaked_names(masked, tool_names(row)) == [] and leaked_names(row, tool_names(row)) == sorted(mapping)
    assert "fn_1" not in mapping.values() and set(mapping.values()) == {"fn_2", "fn_3", "fn_4", "fn_5"}
    assert masked["messages"][1]["content"] == (
        f"Call {mapping['get_book_cover']} for get_book_id 'b1' (not {mapping['get_book']}), then dock it."
    )
    assert json.loads(masked["messages"][3]["content"]) == {
        "note": f"line one\n{mapping['get_book']} ok",
        "see": mapping["list_books"],
    }
    assert _name_fields(masked) == [mapping[n] for n in _name_fields(row)]
    assert masked["tools"][3]["function"]["description"] == "Dock a book."  # the word stays where it is a word
    assert masked["messages"][-1]["content"].endswith("and the dock is done.")
    assert mask_names(row, "r") == masked and row["tools"][0]["function"]["name"] == "get_book"  # input untouched
    assert rename_tools(masked, {v: k for k, v in mapping.items()}) == row


def test_the_masked_share_follows_the_setting_and_a_bad_share_is_refused(trajectories, environments):
    keys = [f"ref_{i}" for i in range(4000)]
    share = sum(is_masked(k, 0.1) for k in keys) / len(keys)
    assert abs(share - 0.1) < 0.02, share
    assert not any(is_masked(k, 0.0) for k in keys) and all(is_masked(k, 1.0) for k in keys)
    assert DatasetRunSpec().name_mask_share == 0.1
    with pytest.raises(
        SettingError, match=r"datasets setting name_mask_share=1.5: expected a finite number in \[0, 1\]"
    ):
        DatasetRunSpec(name_mask_share=1.5)
    for bad in (-0.1, float("nan"), True, "0.1"):
        with pytest.raises(ValueError, match="share"):
            dataset_rows(trajectories[:1], environments, 1.0, name_mask_share=bad)


def test_exports_of_masked_rows_pass_their_audits(built, environments, tmp_path):
    from envfactory_assets.exports.audit import audit_export
    from envfactory_assets.exports.licences import environment_licences
    from envfactory_assets.exports.stage import build_exports

    sft, rl = built[1.0]
    licences = environment_licences(
        [{"env_id": e, "source_resource_id": "src"} for e in environments],
        [{"id": "src", "license_name": "MIT", "license_url": ""}],
    )
    manifest = build_exports(sft, rl, licences, tmp_path, environments=environments)
    audit = audit_export(manifest)
    assert audit["problems"] == [] and audit["sharegpt"]["rows"] == len(sft)
    out = tmp_path / manifest["version"]
    records = [r for s in ("train", "validation") for r in json.loads((out / f"sharegpt_{s}.json").read_text())]
    masked_ids = {r["id"] for r in sft if r["names_masked"]}
    exported = [r for r in records if r["id"] in masked_ids]
    assert len(exported) == len(masked_ids) > 0
    for record in exported:
        names = [t["function"]["name"] for t in json.loads(record["tools"])]
        called = [
            c["name"] for t in record["conversations"] if t["from"] == "function_call" for c in json.loads(t["value"])
        ]
        assert all(TOKEN.fullmatch(n) for n in names + called) and set(called) <= set(names)


def test_the_sft_mix_counts_each_kind_the_masked_share_and_distractors(built, tmp_path):
    sft, rl = built[1.0]
    mix = sft_mix(sft)
    kinds = Counter(example_kind(r) for r in sft)
    assert mix["rows"] == len(sft) and set(kinds) <= set(mix["last_turn_kind_shares"])
    assert mix["last_turn_kind_shares"] == {k: kinds[k] / len(sft) for k in EXAMPLE_KINDS}
    assert all(kinds[k] for k in EXAMPLE_KINDS)  # the fixture data has every kind
    assert mix["names_masked_share"] == sum(r["split"] == TRAIN_SPLIT for r in sft) / len(sft)
    assert 0 < mix["distractor_share"] <= 1 and mix["mean_distractors"] > 0
    assert sft_mix(built[0.0][0])["names_masked_share"] == 0.0
    one = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "tool_calls": [{"function": {"name": "a"}}, {"function": {"name": "b"}}]},
        ],
        "tools": [{"function": {"name": n}} for n in ("a", "b", "c", "d")],
    }
    assert distractors(one) == 2 and example_kind(one) == "parallel"
    assert sft_mix([one, {**one, "tools": one["tools"][:2], "names_masked": True}]) == {
        "rows": 2,
        "last_turn_kind_shares": {"no_call": 0.0, "calls": 0.0, "parallel": 1.0, "same_tool_parallel": 0.0},
        "names_masked_share": 0.5,
        "distractor_share": 0.5,
        "mean_distractors": 1.0,
    }
    assert sft_mix([])["rows"] == 0 and sft_mix_lines(sft_mix([])) == ["SFT training mix: no SFT rows.", ""]
    # the report's Datasets section states the mix of the stored rows
    from envfactory_assets.reporting.report import run_report

    store = Store(tmp_path / "envfactory.duckdb")
    store.replace_current_tables({"sft_dataset": sft, "rl_dataset": rl})
    assert [r["names_masked"] for r in store.read("sft_dataset")] == [
        r["names_masked"] for r in sorted(sft, key=lambda r: r["id"])
    ]
    datasets = run_report(store).split("## Datasets", 1)[1].split("## ", 1)[0]
    assert sft_mix_lines(mix)[0] in datasets
    assert f"tool names masked (neutral tokens): {mix['names_masked_share']:.1%}" in datasets


def test_a_trajectory_trains_sft_or_rl_by_its_raw_trajectory_whatever_its_refined_id(trajectories, environments):
    # a refined id covers the replies: a re-worded reply must not move a trajectory between SFT and RL
    first = [{**t, "raw_trajectory_id": "raw_" + t["id"]} for t in trajectories[:12]]
    renamed = [{**t, "id": t["id"] + "_reworded"} for t in first]
    _, rl_before, _ = dataset_rows(first, environments, 0.5)
    _, rl_after, _ = dataset_rows(renamed, environments, 0.5)
    assert {r["refined_trajectory_id"] for r in rl_before}
    assert {r["refined_trajectory_id"] + "_reworded" for r in rl_before} == {
        r["refined_trajectory_id"] for r in rl_after
    }
