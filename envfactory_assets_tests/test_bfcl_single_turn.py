"""BFCL v3 single-turn: our scorer (parser -> name mapping -> bfcl-eval's AST checker) on hand-built outputs
and on the wheel's own ground truth, the generation budget, truncation counts and overlap tagging."""

from __future__ import annotations

import importlib
import json
import re
import sys
import types

import pytest

from envfactory_assets.decontam.benchmarks import (
    BFCL_SINGLE_TURN,
    all_benchmark_tools,
    bfcl_single_turn_tools,
)
from envfactory_assets.evaluation import bfcl_single_turn as st

CHECKER = "bfcl_eval.eval_checker.ast_eval.ast_checker"
MODEL_CONFIG = "bfcl_eval.constants.model_config"


@pytest.fixture(scope="module")
def tasks():
    return {t.id: t for t in st.load_tasks(None)}


@pytest.fixture()
def official_checker(monkeypatch):
    """bfcl-eval's ``ast_checker`` imported the ordinary way (``import_module``), its model-config lookup
    answered for one model name that keeps dotted names; both modules are taken out of ``sys.modules`` again
    afterwards."""
    config = types.ModuleType(MODEL_CONFIG)
    config.MODEL_CONFIG_MAPPING = {"test-model": types.SimpleNamespace(underscore_to_dot=False)}
    monkeypatch.setitem(sys.modules, MODEL_CONFIG, config)
    monkeypatch.delitem(sys.modules, CHECKER, raising=False)
    module = importlib.import_module(CHECKER)
    from bfcl_eval.constants.enums import Language

    yield lambda task, output: module.ast_checker(
        task.functions,
        output,
        task.possible_answer,
        Language.PYTHON,
        {"simple": "simple_python"}.get(task.category, task.category),
        "test-model",
    )
    sys.modules.pop(CHECKER, None)


def call(name, **arguments):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


# (task id, model output text, the same calls decoded by hand in BFCL's form, expected valid, error type)
HAND_BUILT = [
    ("simple_python_1", call("math_factorial", number=5), [{"math.factorial": {"number": 5}}], True, None),
    (
        "simple_python_1",
        call("math_factorial", number=6),
        [{"math.factorial": {"number": 6}}],
        False,
        "value_error:others",
    ),
    (
        "simple_python_0",
        call("calculate_triangle_area", base=10),
        [{"calculate_triangle_area": {"base": 10}}],
        False,
        "simple_function_checker:missing_required",
    ),
    ("simple_python_0", "The area is 25 square units.", [], False, "simple_function_checker:wrong_count"),
    (
        "simple_python_1",
        call("factorial", number=5),
        [{"factorial": {"number": 5}}],
        False,
        "simple_function_checker:wrong_func_name",
    ),
]


@pytest.mark.parametrize(("task_id", "text", "decoded", "valid", "error_type"), HAND_BUILT)
def test_scorer_agrees_with_bfcl_evals_checker_on_hand_built_outputs(
    tasks, official_checker, task_id, text, decoded, valid, error_type
):
    task = tasks[task_id]
    official = official_checker(task, decoded)
    ours = st.score_output(task, text)
    assert official["valid"] is valid and (valid or official["error_type"] == error_type)
    assert ours["valid"] == float(valid) and ours["error_type"] == error_type


def test_parallel_calls_in_another_order_are_valid_and_a_missing_one_is_not(tasks, official_checker):
    task = tasks["parallel_0"]
    gold = st.gold_calls(task)
    assert len(gold) >= 2
    reordered = list(reversed(gold))
    decoded = [{task.names[c["name"]]: c["arguments"]} for c in reordered]
    assert official_checker(task, decoded)["valid"] is True
    assert st.score_output(task, st.render_calls(reordered))["valid"] == 1.0
    short = st.score_output(task, st.render_calls(reordered[1:]))
    assert short["valid"] == 0.0 and short["error_type"] == official_checker(task, decoded[1:])["error_type"]
    # several calls in one block (a JSON array) are read the same way
    one_block = "<tool_call>" + json.dumps(reordered) + "</tool_call>"
    assert st.score_output(task, one_block)["valid"] == 1.0


def _assistant_message(calls):
    """An assistant message holding ``calls`` the way the datasets stage writes one (``to_messages``: empty
    content, one ``tool_calls`` entry per call, arguments as a JSON string)."""
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": f"call_{i + 1}",
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)},
            }
            for i, c in enumerate(calls)
        ],
    }


def _completion(task, calls):
    """What a model trained with the project's chat template writes for ``calls``: the rendered conversation
    after the generation prompt, up to and including its end-of-turn token."""
    from envfactory_assets.tooluse.chat_template import END_OF_TURN, render_chat

    tools = st.task_tools(task)
    prompt = render_chat(task.messages, tools=tools, add_generation_prompt=True)
    rendered = render_chat([*task.messages, _assistant_message(calls)], tools=tools)
    assert rendered.startswith(prompt)
    completion = rendered[len(prompt) :].removesuffix("\n")
    assert completion.endswith(END_OF_TURN) and completion.count(END_OF_TURN) == 1
    return completion


@pytest.mark.parametrize("category", ["parallel", "parallel_multiple"])
def test_a_parallel_answer_round_trips_through_the_chat_template_the_parser_and_bfcl_evals_checker(
    tasks, official_checker, category
):
    """Every task of the category: its gold calls in one assistant message, rendered by the chat template,
    parse back to exactly those calls (no format error, no stray text), and both bfcl-eval's own checker and
    our scorer accept them; with one call left out, all three agree it is wrong."""
    from envfactory_assets.tooluse.tool_calls import parse_tool_calls

    group = [t for t in tasks.values() if t.category == category]
    assert len(group) >= 100
    for task in group:
        gold = st.gold_calls(task)
        assert len(gold) >= 2, task.id
        text = _completion(task, gold)
        parsed = parse_tool_calls(text)
        assert (parsed.calls, parsed.format_errors, parsed.content) == (gold, 0, ""), task.id
        decoded = [{task.names[c["name"]]: c["arguments"]} for c in parsed.calls]
        assert official_checker(task, decoded)["valid"] is True, task.id
        assert st.score_output(task, text)["valid"] == 1.0, task.id
    task = group[0]
    short = _completion(task, st.gold_calls(task)[1:])
    decoded = [{task.names[c["name"]]: c["arguments"]} for c in parse_tool_calls(short).calls]
    official = official_checker(task, decoded)
    ours = st.score_output(task, short)
    assert official["valid"] is False and ours["valid"] == 0.0 and ours["error_type"] == official["error_type"]


def test_irrelevance_is_right_only_without_a_call(tasks):
    task = tasks["irrelevance_0"]
    offered = st.task_tools(task)[0]["function"]["name"]
    assert st.score_output(task, "None of the tools can answer this.")["valid"] == 1.0
    called = st.score_output(task, call(offered, x=1))
    assert called["valid"] == 0.0 and called["error_type"] == "irrelevance_error:called"
    # an undecodable call block is no call (BFCL's runner: an output that does not decode is a success)
    broken = st.score_output(task, "<tool_call>{not json</tool_call>")
    assert broken["valid"] == 1.0 and broken["n_malformed"] == 1


def test_the_checker_loads_without_model_handlers_and_leaves_no_stand_in_behind():
    module = st._checker_module()
    assert callable(module.ast_checker)
    assert MODEL_CONFIG not in sys.modules and CHECKER not in sys.modules
    assert not any(name.startswith("bfcl_eval.model_handler") for name in sys.modules)
    with pytest.raises(ModuleNotFoundError):  # the real module still needs the API clients
        importlib.import_module(MODEL_CONFIG)


def test_dotted_names_map_to_valid_tool_names_and_back(tasks):
    assert st.tool_name("math.factorial") == "math_factorial"
    dotted = 0
    for task in tasks.values():
        tools = [t["function"]["name"] for t in st.task_tools(task)]
        assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", n) for n in tools), task.id
        assert sorted(task.names.values()) == sorted(f["name"] for f in task.functions)
        assert set(task.names) == set(tools)
        dotted += any("." in f["name"] for f in task.functions)
    assert dotted > 100


class ReplayPolicy:
    """Answers every task with its ground truth rendered as model text; records the budgets it was given."""

    def __init__(self, tasks, cut_off=frozenset()):
        self.answers = {
            self.key(t.messages, st.task_tools(t)): (t.id, st.render_calls(st.gold_calls(t))) for t in tasks
        }
        self.cut_off = cut_off
        self.budgets = []
        self.last_cut_off = []

    @staticmethod
    def key(messages, tools):
        return json.dumps([messages, [t["function"]["name"] for t in tools]], sort_keys=True)

    def generate(self, conversations, seed, max_new_tokens=None, prose_stop_tokens=0):
        self.budgets.append(max_new_tokens)
        found = [self.answers[self.key(m, t)] for m, t in conversations]
        self.last_cut_off = [task_id in self.cut_off for task_id, _ in found]
        return [text for _, text in found]


def test_replayed_ground_truth_scores_100_percent_on_every_category(tasks):
    every = list(tasks.values())
    budgets = st.category_budgets(every, None, 64)
    results = st.run_tasks(ReplayPolicy(every), every, [0], budgets)
    metrics = st.category_metrics(results, budgets)
    counts = {c: sum(1 for t in every if t.category == c) for c in st.CATEGORIES}
    assert counts == {"simple": 400, "multiple": 200, "parallel": 200, "parallel_multiple": 200, "irrelevance": 240}
    failed = [(r["task_id"], r["score"]["error"]) for r in results if r["score"]["valid"] != 1.0]
    assert failed == []
    for category, n in counts.items():
        assert metrics[f"{category}/accuracy"] == 1.0 and metrics[f"{category}/n_results"] == n
    assert metrics["truncated_outputs"] == 0
    assert all(r["n_calls"] == len(tasks[r["task_id"]].possible_answer) for r in results)


def test_budget_holds_one_and_a_half_times_the_longest_gold_answer_and_cut_offs_are_counted(tasks):
    chars = len
    for category in ("simple", "parallel", "parallel_multiple"):
        longest = max(
            len(st.render_calls(st.gold_calls(t, optional=True))) for t in tasks.values() if t.category == category
        )
        assert st.generation_budget(category, chars, 1) == -(-3 * longest // 2)
        assert st.generation_budget(category, chars, 10**6) == 10**6  # never below the floor
    assert st.generation_budget("irrelevance", chars, 64) == 64
    assert st.generation_budget("parallel") > 3 * 64  # three JSON calls do not fit in the old 64 tokens
    sample = st.load_tasks(3)
    cut = {sample[0].id, sample[4].id}
    policy = ReplayPolicy(sample, cut_off=cut)
    budgets = st.category_budgets(sample, None, 64)
    results = st.run_tasks(policy, sample, [0, 1], budgets)
    assert sorted(policy.budgets) == sorted(list(budgets.values()) * 2)
    metrics = st.category_metrics(results, budgets)
    assert metrics["truncated_outputs"] == 4  # two tasks under two seeds
    assert metrics[f"{sample[0].category}/truncated"] + metrics[f"{sample[4].category}/truncated"] == 4


def test_sampling_is_a_fixed_hash_order_per_category():
    first, again = st.load_tasks(4), st.load_tasks(4)
    assert [t.id for t in first] == [t.id for t in again]
    assert [t.category for t in first] == [c for c in st.CATEGORIES for _ in range(4)]
    assert [t.id for t in first[:4]] != [f"simple_python_{i}" for i in range(4)]
    with pytest.raises(ValueError, match="n_per_category"):
        st.load_tasks(-1)
    with pytest.raises(ValueError, match="unknown category"):
        st.load_tasks(1, ["live_simple"])


def test_overlap_reference_covers_the_single_turn_functions_and_tags_tasks(tasks):
    reference = bfcl_single_turn_tools()
    assert {b.suite for b in reference} == set(st.CATEGORIES)
    assert any(b.name == "math.factorial" and b.suite == "simple" for b in reference)
    assert sum(b.benchmark == BFCL_SINGLE_TURN for b in all_benchmark_tools()) == len(reference)
    sample = [tasks["simple_python_1"], tasks["simple_python_0"], tasks["multiple_0"]]
    rows = [
        {
            "env_id": "env_math",
            "tool_name": "factorial",
            "benchmark": BFCL_SINGLE_TURN,
            "suite": "simple",
            "benchmark_tool": "math.factorial",
            "similarity": 0.9,
            "match": "description",
        },
        # the same function name under another category, or another benchmark, does not tag the task
        {
            "env_id": "env_other",
            "tool_name": "factorial",
            "benchmark": BFCL_SINGLE_TURN,
            "suite": "parallel",
            "benchmark_tool": "math.factorial",
            "similarity": 0.9,
            "match": "description",
        },
        {
            "env_id": "env_mt",
            "tool_name": "ls",
            "benchmark": "bfcl_v3_multi_turn",
            "suite": "simple",
            "benchmark_tool": "calculate_triangle_area",
            "similarity": 0.9,
            "match": "name",
        },
    ]
    overlap = st.task_overlap(sample, rows)
    assert overlap == {"simple_python_1": ["env_math"]}
    results = st.run_tasks(ReplayPolicy(sample), sample, [0], st.category_budgets(sample, None, 64), overlap)
    subsets = st.result_subsets(results)
    assert [r["task_id"] for r in subsets["no_overlap"]] == ["simple_python_0", "multiple_0"]
    assert [r["task_id"] for r in subsets["simple"]] == ["simple_python_1", "simple_python_0"]
    assert len(subsets["all"]) == 3 and "parallel" not in subsets


def test_an_environment_with_a_bfcl_like_tool_is_tagged_and_its_tasks_leave_no_overlap(tmp_path, tasks):
    """Real input: an environment built from an OpenAPI document with a triangle-area operation matches
    ``simple_python_0``'s function; the bookshop fixture matches nothing. The reference is cut to the first
    simple tasks' functions to keep the embedding small."""
    import orjson

    from envfactory_assets.decontam.tagging import benchmark_tags, overlap_rows
    from envfactory_assets.envgen.builder import build_environment
    from envfactory_assets.graph.embeddings import MiniLMEmbedder
    from envfactory_assets.sources.scan import inspect_file
    from envfactory_assets_tests.fixture_environments import FIXTURES

    def op(op_id, summary, body=False):
        out = {
            "operationId": op_id,
            "summary": summary,
            "responses": {
                "200": {
                    "description": "ok",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Triangle"}}},
                }
            },
        }
        if body:
            out["requestBody"] = {
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Triangle"}}}
            }
        return out

    spec = {
        "openapi": "3.0.0",
        "info": {"title": "Geometry", "version": "1.0", "x-apisguru-categories": ["storage"]},
        "paths": {
            "/triangles": {
                "post": op("create_triangle", "Store a triangle", True),
                "get": op("list_triangles", "List stored triangles"),
            },
            "/triangles/{triangle_id}": {
                "get": op("calculate_triangle_area", "Calculate the area of a triangle given its base and height.")
            },
        },
        "components": {
            "schemas": {
                "Triangle": {
                    "type": "object",
                    "required": ["base", "height"],
                    "properties": {
                        "base": {"type": "integer", "description": "The base of the triangle."},
                        "height": {"type": "integer", "description": "The height of the triangle."},
                    },
                }
            }
        },
    }
    path = tmp_path / "geometry.json"
    path.write_bytes(orjson.dumps(spec))
    geometry = build_environment(inspect_file(path, tmp_path).as_row(), spec)
    bookshop = build_environment(
        inspect_file(FIXTURES / "bookshop.json", FIXTURES).as_row(),
        orjson.loads((FIXTURES / "bookshop.json").read_bytes()),
    )
    first = {f["name"] for t in st.load_tasks(None, ["simple"])[:10] for f in t.functions}
    reference = [b for b in bfcl_single_turn_tools() if b.suite == "simple" and b.name in first]
    rows = overlap_rows([geometry, bookshop], reference, MiniLMEmbedder())
    assert benchmark_tags(rows) == {geometry["env_id"]: [BFCL_SINGLE_TURN]}
    overlap = st.task_overlap([tasks["simple_python_0"], tasks["simple_python_1"]], rows)
    assert overlap == {"simple_python_0": [geometry["env_id"]]}


def test_evaluation_rows_hold_subsets_and_the_per_category_breakdown():
    from envfactory_assets.evaluation.run import EvalSpec, ModelRef, evaluate_models

    sample = st.load_tasks(2)
    spec = EvalSpec(n_synthetic=0, n_bfcl=0, n_bfcl_single_turn=2, seeds=(0, 1))
    overlap_rows = [
        {
            "benchmark": st.BENCHMARK,
            "suite": sample[0].category,
            "env_id": "env_x",
            "benchmark_tool": sample[0].functions[0]["name"],
        }
    ]
    overlapping = set(st.task_overlap(sample, overlap_rows))
    assert sample[0].id in overlapping
    policy = ReplayPolicy(sample, cut_off={sample[2].id})
    rows = evaluate_models(
        [ModelRef("base", "base", "/nowhere")],
        [],
        {},
        spec,
        log=lambda m: None,
        load_policy=lambda model: policy,
        benchmark_overlap=overlap_rows,
    )
    by_subset = {r["subset"]: r for r in rows}
    assert list(by_subset) == ["all", "no_overlap", *st.CATEGORIES]
    assert all(r["benchmark"] == st.BENCHMARK and r["mean"] == 1.0 for r in rows)
    assert by_subset["all"]["n_tasks"] == 10 and by_subset["no_overlap"]["n_tasks"] == 10 - len(overlapping)
    metrics = by_subset["all"]["metrics"]
    assert metrics["truncated_outputs"] == 2 and metrics[f"{sample[2].category}/truncated"] == 2
    assert metrics["parallel/budget"] == st.generation_budget("parallel", None, spec.sampling.max_new_tokens)
    assert metrics["irrelevance/accuracy"] == 1.0 and by_subset["simple"]["metrics"].keys() >= {"simple/accuracy"}
    assert len({r["id"] for r in rows}) == len(rows)


def test_the_policy_takes_a_per_call_budget_and_reports_outputs_cut_off_at_it(base_model_dir):
    from envfactory_assets.evaluation.model_policy import Policy, SamplingSpec

    base = base_model_dir
    policy = Policy(base, SamplingSpec(temperature=0, max_new_tokens=64, batch_size=2), num_threads=1)
    task = st.load_tasks(1, ["parallel"])[0]
    conversations = [(task.messages, st.task_tools(task))] * 2
    texts = policy.generate(conversations, seed=0, max_new_tokens=3)
    assert policy.last_cut_off == [True, True]
    assert all(len(policy.tokenizer(t, add_special_tokens=False)["input_ids"]) <= 3 for t in texts)
    with pytest.raises(ValueError, match="max_new_tokens"):
        policy.generate(conversations, seed=0, max_new_tokens=0)


CALL = '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
WORDS = " ".join(["word"] * 48)  # 48 tokens under the test's counter (one per word)


@pytest.mark.parametrize(
    "text, complete",
    [
        ("The neutron was discovered by Chadwick. " + WORDS, True),  # prose, long enough
        (" ".join(["word"] * 47), False),  # prose, still short
        (CALL, False),  # calls closed, nothing after yet
        (CALL + "\n<tool", False),  # a second call may be opening
        (CALL + "\n2.", False),  # a numbered list of parallel calls
        (CALL + "\nAnd now the second one:", False),
        (CALL + "\n" + CALL + "\n" + WORDS, True),  # long text after the last call
        (CALL + "<|im_end|>", False),  # end-of-turn is the model's own stop
        (
            '<tool_call>\n{"name": "f", "arguments": {"x": "type </tool_call> now ' + WORDS,
            False,
        ),  # close tag in a string
        ("I will look it up.\n" + CALL + " " + WORDS, True),  # a short preamble, then a call
        ('{"name": "f", "arguments": {' + WORDS, False),  # bare JSON the parser reads whole
        ("```json\n{" + WORDS, False),
        ("<think>" + WORDS + WORDS, False),  # reasoning still open
        ("<think>" + WORDS + "</think>I", False),  # reasoning is not prose
        ("<think>no tool fits</think>The answer is 4. " + WORDS, True),
        ("", False),
    ],
)
def test_an_answer_is_complete_once_its_calls_can_no_longer_change(text, complete):
    from envfactory_assets.tooluse.tool_calls import answer_is_complete, parse_tool_calls

    def words(piece):
        return len(piece.split())

    assert answer_is_complete(text, 48, words) is complete
    if complete:  # whatever the model would have written next, the calls parsed so far are the answer's
        for more in (" more prose", "</tool_call>", "<|im_end|>", " <think>x</think>"):
            assert parse_tool_calls(text).calls == parse_tool_calls(text + more).calls


def test_the_policy_stops_each_answer_when_complete_and_keeps_what_it_had_written(base_model_dir):
    """Greedy: an output stopped by the rule is the unstopped output's beginning, the rule holds for it, and
    it is not counted as cut off; the batch costs fewer tokens."""
    from envfactory_assets.evaluation.model_policy import Policy, SamplingSpec
    from envfactory_assets.tooluse.tool_calls import answer_is_complete

    policy = Policy(base_model_dir, SamplingSpec(temperature=0, batch_size=2), num_threads=1)
    tasks = st.load_tasks(1, ["simple", "parallel"])
    conversations = [(t.messages, st.task_tools(t)) for t in tasks]
    full = policy.generate(conversations, seed=0, max_new_tokens=60)
    full_cut, full_tokens = list(policy.last_cut_off), policy.generated_tokens
    stopped = policy.generate(conversations, seed=0, max_new_tokens=60, prose_stop_tokens=8)
    assert policy.generated_tokens - full_tokens < full_tokens
    for whole, short, cut in zip(full, stopped, policy.last_cut_off, strict=True):
        assert whole.startswith(short) and not cut

        def count(piece):
            return len(policy.tokenizer(piece, add_special_tokens=False)["input_ids"])

        assert short == whole or answer_is_complete(short, 8, count)
    assert any(full_cut)  # the base model writes prose past 60 tokens here: the rule had something to stop
    with pytest.raises(ValueError, match="prose_stop_tokens"):
        policy.generate(conversations, seed=0, prose_stop_tokens=-1)


class TextPolicy(ReplayPolicy):
    """Answers each task with a given text (``{task id: text}``); the rest with their ground truth."""

    def __init__(self, tasks, texts):
        super().__init__(tasks)
        for key, (task_id, gold) in list(self.answers.items()):
            self.answers[key] = (task_id, texts.get(task_id, gold))


def _hand_built(sample):
    """Two tasks per category: texts and, per task, (valid, called, parse failure) worked out by hand."""
    by_cat = {c: [t for t in sample if t.category == c] for c in st.CATEGORIES}
    first_name = {t.id: st.task_tools(t)[0]["function"]["name"] for t in sample}
    texts, expected = {}, {}
    for category in st.MUST_CALL:
        right, other = by_cat[category]
        expected[right.id] = (1.0, 1.0, 0.0)  # the ground truth: valid, called, parsed
        if category == "simple":
            texts[other.id] = "The answer is 25."  # a plain text answer: no call, not a parse failure
            expected[other.id] = (0.0, 0.0, 0.0)
        elif category == "multiple":
            texts[other.id] = "<tool_call>{not json</tool_call>"  # an undecodable call block
            expected[other.id] = (0.0, 0.0, 1.0)
        elif category == "parallel":
            texts[other.id] = f"[{first_name[other.id]}(x=1), {first_name[other.id]}(x=2)]"  # BFCL's own form
            expected[other.id] = (0.0, 0.0, 1.0)
        else:  # parallel_multiple: neither is right; one calls the wrong way, one answers in prose
            texts[right.id] = st.render_calls([{"name": first_name[right.id], "arguments": {}}])
            expected[right.id] = (0.0, 1.0, 0.0)
            texts[other.id] = "Sure."
            expected[other.id] = (0.0, 0.0, 0.0)
    abstains, calls = by_cat["irrelevance"]
    texts[abstains.id] = "No tool fits."
    expected[abstains.id] = (1.0, 0.0, 0.0)
    texts[calls.id] = st.render_calls([{"name": first_name[calls.id], "arguments": {"x": 1}}])
    expected[calls.id] = (0.0, 1.0, 0.0)
    return texts, expected


def test_call_rate_parse_failures_and_balanced_score_on_hand_built_outputs():
    """By hand: accuracies simple 1/2, multiple 1/2, parallel 1/2, parallel_multiple 0, irrelevance 1/2, so the
    balanced score is 2/5 = 0.4 (the pooled accuracy is 4/10); must-call tasks with a parseable call 4 of 8;
    parse failures 2 of 10."""
    sample = st.load_tasks(2)
    texts, expected = _hand_built(sample)
    budgets = st.category_budgets(sample, None, 64)
    results = st.run_tasks(TextPolicy(sample, texts), sample, [0], budgets)
    got = {r["task_id"]: (r["score"]["valid"], r["score"]["called"], r["score"]["parse_failure"]) for r in results}
    assert got == expected
    metrics = st.category_metrics(results, budgets)
    assert metrics["balanced"] == pytest.approx(0.4)
    assert metrics["call_rate"] == pytest.approx(4 / 8) and metrics["parse_failure"] == pytest.approx(2 / 10)
    assert metrics["multiple/parse_failure"] == 0.5 and metrics["parallel_multiple/call_rate"] == 0.5
    assert "irrelevance/call_rate" not in metrics
    # four categories: the balanced score is not measured, never 0
    four = [r for r in results if r["tags"]["category"] != "parallel"]
    assert st.category_metrics(four, budgets)["balanced"] is None


def test_a_model_that_never_calls_has_call_rate_0_irrelevance_1_and_balanced_0_2_with_intervals():
    from envfactory_assets.evaluation.model_policy import DoNothingPolicy
    from envfactory_assets.evaluation.run import EvalSpec, ModelRef, do_nothing_model, evaluate_models
    from envfactory_assets.reporting.results_table import results_markdown

    sample = st.load_tasks(2)
    texts, _ = _hand_built(sample)
    spec = EvalSpec(n_synthetic=0, n_bfcl=0, n_bfcl_single_turn=2, seeds=(0,))
    rows = evaluate_models(
        [ModelRef("base", "base", "/nowhere"), do_nothing_model()],
        [],
        {},
        spec,
        log=lambda m: None,
        load_policy=lambda model: TextPolicy(sample, texts) if model.label == "base" else DoNothingPolicy(),
    )
    row = {(r["model"], r["subset"]): r for r in rows}
    nothing = row["do_nothing", "all"]["metrics"]["measures"]
    base = row["base", "all"]["metrics"]["measures"]
    assert base["balanced"]["mean"] == pytest.approx(0.4) and base["call_rate"]["mean"] == pytest.approx(0.5)
    assert nothing["call_rate"]["mean"] == 0.0 and nothing["parse_failure"]["mean"] == 0.0
    assert row["do_nothing", "irrelevance"]["mean"] == 1.0 and nothing["balanced"]["mean"] == pytest.approx(0.2)
    # paired intervals on the shared tasks: call rate 0 - 4/8 on 8 must-call tasks; balanced 0.2 - 0.4, drawn
    # within each category (irrelevance +1/2, simple, multiple, parallel -1/2, parallel_multiple 0)
    vs = nothing["call_rate"]["vs_base"]
    assert vs["difference"] == pytest.approx(-0.5) and vs["n"] == 8 and vs["low"] <= -0.5 <= vs["high"] < 0
    vs = nothing["balanced"]["vs_base"]
    assert vs["difference"] == pytest.approx(-0.2) and vs["n"] == 10 and vs["low"] < -0.2 < vs["high"]
    assert nothing["parse_failure"]["vs_base"]["difference"] == pytest.approx(-0.2)
    # per category: no balanced score; irrelevance has no must-call call rate
    simple = row["do_nothing", "simple"]["metrics"]["measures"]
    assert simple["balanced"]["mean"] is None and "not_measured" in simple["balanced"]
    assert row["base", "irrelevance"]["metrics"]["measures"]["call_rate"]["mean"] is None
    table = results_markdown(rows)
    assert "must-call call rate" in table and "parse-failure share" in table and "balanced score" in table
    call_rate_line = next(
        line for line in table.split("must-call call rate", 1)[1].splitlines() if line.startswith("| `do_nothing`")
    )
    assert call_rate_line.startswith("| `do_nothing` | does nothing | 0.000 ± 0.000; Δ -0.500 [")
    balanced_head = table.split("balanced score", 1)[1].splitlines()[2]
    assert balanced_head.startswith("| model | stage | all (n=10) |") and "simple" not in balanced_head
