"""Property-based tests of the one tool-call parser (Hermes/Qwen blocks and OpenAI tool_calls)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from envfactory_assets.tooluse.tool_calls import parse_tool_calls

names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,30}", fullmatch=True)
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), text)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)),
    max_leaves=8,
)
arguments = st.dictionaries(text, values, max_size=4)
noise = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="<>{}"), max_size=40)


@settings(max_examples=150, deadline=None)
@given(name=names, args=arguments, think=noise, trailing=noise, as_string=st.booleans(), ascii_only=st.booleans())
def test_a_hermes_block_parses_back_to_the_same_call(name, args, think, trailing, as_string, ascii_only):
    payload_args = json.dumps(args, ensure_ascii=ascii_only) if as_string else args
    block = json.dumps({"name": name, "arguments": payload_args}, ensure_ascii=ascii_only)
    result = parse_tool_calls(f"<think>{think}</think>\n<tool_call>{block}</tool_call>{trailing}")
    assert result.calls == [{"name": name, "arguments": args}]
    assert result.format_errors == 0


@settings(max_examples=100, deadline=None)
@given(calls=st.lists(st.tuples(names, arguments), min_size=1, max_size=3))
def test_openai_tool_calls_parse_in_order(calls):
    payload = {
        "tool_calls": [{"type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for n, a in calls]
    }
    result = parse_tool_calls(json.dumps(payload))
    assert result.calls == [{"name": n, "arguments": a} for n, a in calls]


@settings(max_examples=200, deadline=None)
@given(garbage=st.text(max_size=200))
def test_any_text_is_parsed_without_raising_and_never_evaluated(garbage):
    result = parse_tool_calls(garbage + "<tool_call>" + garbage)
    assert result.format_errors >= 0
    assert all(isinstance(c["arguments"], dict) for c in result.calls)


@settings(max_examples=100, deadline=None)
@given(
    name=names, broken=st.sampled_from(['{"arguments": ', '{"name": 5}', "not json", '{"name": "x", "arguments": [1]}'])
)
def test_a_malformed_block_is_a_counted_format_error(name, broken):
    good = json.dumps({"name": name, "arguments": {}})
    result = parse_tool_calls(f"<tool_call>{broken}</tool_call><tool_call>{good}</tool_call>")
    assert result.calls == [{"name": name, "arguments": {}}]
    assert result.format_errors == 1
