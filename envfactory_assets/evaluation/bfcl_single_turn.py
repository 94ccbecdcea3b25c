"""BFCL v3 single-turn (non-live AST categories), scored by bfcl-eval's own AST checker.

Source: the installed ``bfcl-eval`` wheel. Entries (a user question and the functions offered) come from
``bfcl_eval/data/BFCL_v4_<file>.json`` (:data:`~envfactory_assets.decontam.benchmarks.BFCL_SINGLE_TURN_FILES`),
the ground truth from ``data/possible_answer/`` (``[{function: {parameter: [accepted values]}}]``, where
``""`` among the accepted values marks an optional parameter). Categories: ``simple`` (Python), ``multiple``
(one call, several functions offered), ``parallel`` (several calls of one function), ``parallel_multiple``
(several calls of several functions) and ``irrelevance`` (no offered function fits: the right answer is no
call). Live, Java and JavaScript categories are not run.

How a task is run and scored:

- the model gets the question and the functions as OpenAI tools through our chat template and answers
  once; nothing is executed;
- its calls are read by our parser (:func:`~envfactory_assets.tooluse.tool_calls.parse_tool_calls`);
  tool names are BFCL's function names with every character outside ``[A-Za-z0-9_-]`` made ``_``
  (``math.factorial`` -> ``math_factorial``, OpenAI's tool name pattern), mapped back per task before
  checking (:func:`tool_name`);
- ``simple``/``multiple``/``parallel``/``parallel_multiple``: the calls, as ``[{bfcl_name: arguments}]``,
  go to bfcl-eval's ``ast_checker`` with ``Language.PYTHON`` (order-free matching for the parallel
  categories, string values compared case- and punctuation-insensitively, ints accepted for floats: all
  the checker's rules, none of them re-implemented here); ``irrelevance``: valid when no call was parsed
  (the official runner's rule: an output that decodes to no call is a success);
- the generation budget of a category is at least :data:`BUDGET_FACTOR` times its longest ground-truth
  answer rendered as our model output (:func:`generation_budget`), and every output that stopped at the
  budget is counted (``truncated``).

Importing the checker module normally imports ``bfcl_eval.constants.model_config``, which imports every
API model handler (``anthropic``, ``openai``, ... are not installed). The checker reads one thing from it:
``MODEL_CONFIG_MAPPING[model_name].underscore_to_dot`` (in ``convert_func_name``, only for names with
dots). :func:`ast_checker` loads a private copy of the checker module with that one module lookup
answered by a minimal stand-in (:data:`CHECKER_MODEL_NAME` -> ``underscore_to_dot=False``: we map names
back ourselves, so the checker compares BFCL's own names).
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import math
import re
import sys
import threading
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from envfactory_assets.decontam.benchmarks import (
    BFCL_SINGLE_TURN,
    BFCL_SINGLE_TURN_FILES,
    bfcl_single_turn_entries,
)
from envfactory_assets.evaluation.bfcl import _json_schema
from envfactory_assets.evaluation.stats import Measure
from envfactory_assets.evaluation.task_draw import draw_block
from envfactory_assets.tooluse.tool_calls import parse_tool_calls

BENCHMARK = BFCL_SINGLE_TURN
CATEGORIES: tuple[str, ...] = tuple(BFCL_SINGLE_TURN_FILES)
MUST_CALL: tuple[str, ...] = tuple(c for c in CATEGORIES if c != "irrelevance")
"""Categories whose right answer is at least one call (every one but ``irrelevance``)."""
BALANCED_CATEGORIES: tuple[str, ...] = ("simple", "multiple", "parallel", "parallel_multiple", "irrelevance")
"""The categories averaged, with equal weights, into the balanced score (:func:`category_metrics`): a model
that never calls scores 1.0 on ``irrelevance`` and 0 elsewhere, so 0.2, whatever the category sizes."""
SCORE_VERSION = 2
"""Version of :func:`score_output`'s keys and rules (2: ``called`` and ``parse_failure``); part of every
cached result's key, so results scored by an older version are computed again."""
BUDGET_FACTOR = 1.5
"""A category's generation budget is at least this many times its longest ground-truth answer (tokens)."""
CHARS_PER_TOKEN = 2.0
"""Characters per token assumed when no tokenizer is given (conservative: SmolLM2's tokenizer averages
about 2.6 characters per token on the rendered ground-truth answers, 2.3 on the longest)."""
CHECKER_MODEL_NAME = "envfactory-local"
"""The model name handed to bfcl-eval's checker; the stand-in model config knows only this name."""
TRACE_CHARS = 600
_CHECKER_MODULE = "bfcl_eval.eval_checker.ast_eval.ast_checker"
_MODEL_CONFIG_MODULE = "bfcl_eval.constants.model_config"
_IMPORT_LOCK = threading.Lock()
# The checker's dispatch reads the category name: "parallel" in it -> order-free matching, "multiple" ->
# one call among several functions, else one call of one function.
_CHECKER_CATEGORY = {
    "simple": "simple_python",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
}
_NOT_EXECUTED = "(recorded; single-turn tasks execute nothing)"
MEASURES: tuple[Measure, ...] = (
    Measure("call_rate", "called", MUST_CALL),
    Measure("parse_failure", "parse_failure"),
    Measure("balanced", "valid", BALANCED_CATEGORIES, balanced=True),
)
"""Reported beside the accuracy of every row (``metrics["measures"]``), each with paired intervals:
``call_rate``, the share of must-call tasks (:data:`MUST_CALL`) with at least one parseable call (a model that
stopped calling cannot hide behind ``irrelevance``); ``parse_failure``, the share of outputs with an
undecodable call block or a call-looking text that parses to no call (:func:`score_output`); ``balanced``,
the mean of the five categories' accuracies with equal weights (:data:`BALANCED_CATEGORIES`; not measured
unless all five are present)."""


@dataclass(frozen=True)
class SingleTurnTask:
    """One BFCL single-turn entry with its ground truth.

    Attributes:
        id: e.g. ``"simple_python_0"``, ``"irrelevance_12"``.
        category: one of :data:`CATEGORIES`.
        messages: the question (OpenAI messages, user role).
        functions: BFCL's function docs as the checker reads them (names with dots).
        possible_answer: ``[{bfcl_name: {parameter: [accepted values]}}]``, one per expected call; empty
            for ``irrelevance``.
    """

    id: str
    category: str
    messages: list[dict[str, Any]]
    functions: list[dict[str, Any]]
    possible_answer: list[dict[str, Any]]

    @property
    def names(self) -> dict[str, str]:
        """``{tool name shown to the model: BFCL function name}``."""
        return {tool_name(f["name"]): f["name"] for f in self.functions}


def tool_name(bfcl_name: str) -> str:
    """BFCL's function name as a tool name matching ``^[A-Za-z0-9_-]{1,64}$``: every other character
    becomes ``_`` (``"math.factorial"`` -> ``"math_factorial"``)."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "_" for c in bfcl_name)


def _answers(category: str) -> dict[str, list[dict[str, Any]]]:
    if category == "irrelevance":
        return {}
    path = (
        importlib.resources.files("bfcl_eval")
        / "data"
        / "possible_answer"
        / f"BFCL_v4_{BFCL_SINGLE_TURN_FILES[category]}.json"
    )
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["id"]: r["ground_truth"] for r in rows}


def load_tasks(
    n_per_category: int | None = None, categories: Iterable[str] = CATEGORIES, draw: int = 0
) -> list[SingleTurnTask]:
    """Tasks of the given categories: per category, ``n_per_category`` in order of sha256 of their id (a
    fixed sample that does not follow the file's order; ``draw`` k takes the k-th block of that many, disjoint
    from every other draw: :func:`~envfactory_assets.evaluation.task_draw.draw_block`), or all of them in file
    order (None).

    Returns:
        Tasks grouped by category, in the order of ``categories``.

    Raises:
        ValueError: an unknown category, ``n_per_category`` negative or not an int, a task without ground
            truth, two functions of one task with the same tool name, or a draw past a category's last task.
        ModuleNotFoundError: ``bfcl-eval`` is not installed.
    """
    if n_per_category is not None and (
        isinstance(n_per_category, bool) or not isinstance(n_per_category, int) or n_per_category < 0
    ):
        raise ValueError(
            f"BFCL single-turn: n_per_category={n_per_category!r}: expected a whole number >= 0 or None (all tasks)"
        )
    tasks = []
    for category in categories:
        if category not in BFCL_SINGLE_TURN_FILES:
            raise ValueError(f"BFCL single-turn: unknown category {category!r}; expected one of {list(CATEGORIES)}")
        answers = _answers(category)
        chosen = []
        for entry in bfcl_single_turn_entries(category):
            if category != "irrelevance" and entry["id"] not in answers:
                raise ValueError(f"BFCL single-turn {category}: task {entry['id']} has no ground truth")
            names = [tool_name(f["name"]) for f in entry["function"]]
            if len(set(names)) != len(names):
                raise ValueError(f"BFCL single-turn task {entry['id']}: two functions share a tool name in {names}")
            chosen.append(
                SingleTurnTask(
                    entry["id"],
                    category,
                    [dict(m) for m in entry["question"][0]],
                    list(entry["function"]),
                    answers.get(entry["id"], []),
                )
            )
        if n_per_category is not None or draw:  # all tasks of draw 0 keep the file's order
            chosen = draw_block(chosen, lambda t: t.id, n_per_category, draw, f"BFCL single-turn {category}")
        tasks += chosen
    return tasks


def task_tools(task: SingleTurnTask) -> list[dict[str, Any]]:
    """The task's functions as OpenAI function tools (mapped names, JSON Schema type names)."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool_name(f["name"]),
                "description": f.get("description", ""),
                "parameters": _json_schema(f.get("parameters") or {"type": "object", "properties": {}}),
            },
        }
        for f in task.functions
    ]


@cache
def _checker_module() -> types.ModuleType:
    """A private copy of ``bfcl_eval.eval_checker.ast_eval.ast_checker`` whose one import of
    ``bfcl_eval.constants.model_config`` gets a stand-in holding only ``MODEL_CONFIG_MAPPING =
    {CHECKER_MODEL_NAME: underscore_to_dot=False}``, the one value the checker reads from it.

    The stand-in is in ``sys.modules`` only while the copy executes (under a lock), and whatever was
    there before is put back, so nothing else in the process sees it; the copy is not registered in
    ``sys.modules``. The checker's other imports (``constants.enums``, ``constants.type_mappings``, the
    Java/JavaScript type converters) are plain modules and load normally.

    Raises:
        ModuleNotFoundError: ``bfcl-eval`` is not installed.
    """
    spec = importlib.util.find_spec(_CHECKER_MODULE)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(
            f"{_CHECKER_MODULE} not found (pip install --no-deps bfcl-eval)", name=_CHECKER_MODULE
        )
    stand_in = types.ModuleType(_MODEL_CONFIG_MODULE, "Stand-in: only what the AST checker reads.")
    stand_in.MODEL_CONFIG_MAPPING = {CHECKER_MODEL_NAME: types.SimpleNamespace(underscore_to_dot=False)}
    with _IMPORT_LOCK:
        previous = sys.modules.get(_MODEL_CONFIG_MODULE)
        sys.modules[_MODEL_CONFIG_MODULE] = stand_in
        try:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        finally:
            if previous is None:
                sys.modules.pop(_MODEL_CONFIG_MODULE, None)
            else:
                sys.modules[_MODEL_CONFIG_MODULE] = previous
    return module


def ast_checker(
    functions: list[dict[str, Any]],
    model_output: list[dict[str, Any]],
    possible_answer: list[dict[str, Any]],
    category: str,
) -> dict[str, Any]:
    """bfcl-eval's ``ast_checker`` on one task, for Python, under :data:`CHECKER_MODEL_NAME`.

    Args:
        functions: BFCL function docs of the task.
        model_output: ``[{bfcl_name: {parameter: value}}]``, one per call.
        possible_answer: the task's ground truth.
        category: one of :data:`CATEGORIES` other than ``irrelevance``.

    Returns:
        The checker's result: ``{"valid": bool, "error": [...], "error_type": str}`` (no ``error_type``
        when valid).
    """
    from bfcl_eval.constants.enums import Language

    return _checker_module().ast_checker(
        functions, model_output, possible_answer, Language.PYTHON, _CHECKER_CATEGORY[category], CHECKER_MODEL_NAME
    )


# what a call written in a form our parser does not read looks like: a call tag, a JSON "name"/"arguments"
# key, or an offered function's name directly followed by "(" (BFCL's own prompt format, ``f(a=1)``)
_CALL_MARKERS = re.compile(r"</?tool_call|\"(?:name|arguments|parameters|function)\"\s*:")


def looks_like_call(text: str, names: Iterable[str]) -> bool:
    """Whether ``text`` seems to attempt a call: it holds ``<tool_call``/``</tool_call``, a JSON key
    ``"name"``, ``"arguments"``, ``"parameters"`` or ``"function"``, or one of ``names`` (tool names shown to
    the model, or BFCL's dotted function names) directly followed by ``(``.

    Used only for outputs that parse to no call (:func:`score_output`): such an output that looks like a call
    is a parse failure, not an abstention."""
    if _CALL_MARKERS.search(text):
        return True
    return any(re.search(rf"(?<![\w.]){re.escape(name)}\s*\(", text) for name in names if name)


def score_output(task: SingleTurnTask, text: str, truncated: bool = False) -> dict[str, Any]:
    """Score one model output of ``task``.

    Returns:
        ``{"valid": 0.0|1.0, "reward": same, "n_malformed": int (undecodable call blocks),
        "called": 1.0 when at least one call parsed, else 0.0, "parse_failure": 1.0 when a call block did not
        decode (``n_malformed > 0``) or the output parses to no call yet looks like one
        (:func:`looks_like_call`), else 0.0, "truncated": 0.0|1.0, "error_type": str|None, "error": str|None}``.
        A checker that raises on a strange output (its code assumes well-formed values) scores the task
        invalid with error type ``checker_error:<exception>``.
    """
    parsed = parse_tool_calls(text)
    names = task.names
    calls = [{names.get(c["name"], c["name"]): c["arguments"]} for c in parsed.calls]
    error_type = error = None
    if task.category == "irrelevance":
        valid = not calls
        if not valid:
            error_type, error = "irrelevance_error:called", f"{len(calls)} call(s) where no function fits"
    else:
        try:
            result = ast_checker(task.functions, calls, task.possible_answer, task.category)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            result = {
                "valid": False,
                "error": [f"{type(exc).__name__}: {exc}"],
                "error_type": f"checker_error:{type(exc).__name__}",
            }
        valid = bool(result["valid"])
        if not valid:
            error_type, error = result.get("error_type"), json.dumps(result.get("error"), default=str)[:TRACE_CHARS]
    return {
        "valid": float(valid),
        "reward": float(valid),
        "n_malformed": parsed.format_errors,
        "called": float(bool(parsed.calls)),
        "parse_failure": float(
            parsed.format_errors > 0 or (not parsed.calls and looks_like_call(text, [*names, *names.values()]))
        ),
        "truncated": float(truncated),
        "error_type": error_type,
        "error": error,
    }


def _accepted(options: list[Any], optional: bool) -> tuple[bool, Any]:
    """The value given for a parameter with these accepted values: (False, None) to leave it out (optional,
    ``""`` accepted, and ``optional`` False; or nothing but ``""``), else (True, the first value that is
    not ``""``)."""
    if "" in options and not optional:
        return False, None
    for option in options:
        if option != "":
            return True, _concrete(option, optional)
    return False, None


def _concrete(value: Any, optional: bool) -> Any:
    """A ground-truth value with nested ``{key: [accepted values]}`` objects resolved the same way."""
    if isinstance(value, dict):
        out = {}
        for key, options in value.items():
            present, chosen = _accepted(options, optional) if isinstance(options, list) else (True, options)
            if present:
                out[key] = chosen
        return out
    if isinstance(value, list):
        return [_concrete(v, optional) for v in value]
    return value


def gold_calls(task: SingleTurnTask, optional: bool = False) -> list[dict[str, Any]]:
    """The task's ground truth as our calls, ``[{"name": tool name, "arguments": {...}}]``: each required
    parameter takes its first accepted value; optional ones (``""`` accepted) are left out, or with
    ``optional`` given their first other accepted value (the longest answer, for the budget).

    A parameter the function declares required is always given, even where the ground truth also
    accepts ``""`` (``simple_python_17``); leaving the others out is what the checker is sure to accept
    (``parallel_multiple_12``'s ground truth lists an optional parameter its function does not declare)."""
    required = {f["name"]: set(f.get("parameters", {}).get("required") or []) for f in task.functions}
    calls = []
    for answer in task.possible_answer:
        ((name, params),) = answer.items()
        arguments = {}
        for param, options in params.items():
            present, chosen = _accepted(options, optional or param in required.get(name, set()))
            if present:
                arguments[param] = chosen
        calls.append({"name": tool_name(name), "arguments": arguments})
    return calls


def render_calls(calls: Sequence[Mapping[str, Any]]) -> str:
    """Calls as our chat template writes an assistant's calls: one ``<tool_call>`` JSON block each."""
    return "\n".join(
        f"<tool_call>\n{json.dumps({'name': c['name'], 'arguments': c['arguments']})}\n</tool_call>" for c in calls
    )


def generation_budget(category: str, count_tokens: Callable[[str], int] | None = None, floor: int = 1) -> int:
    """New tokens allowed per answer in ``category``: ``max(floor, ceil(BUDGET_FACTOR * longest))``, where
    ``longest`` is the longest ground-truth answer of any task of the category, optional parameters
    included (:func:`gold_calls`), rendered by :func:`render_calls` (``irrelevance``: none, so ``floor``).

    Args:
        count_tokens: tokens of a text (the model's tokenizer); None estimates ``chars / CHARS_PER_TOKEN``.
        floor: the smallest budget (the evaluation's usual ``max_new_tokens``).

    Raises:
        ValueError: unknown category.
    """
    if category not in BFCL_SINGLE_TURN_FILES:
        raise ValueError(f"BFCL single-turn: unknown category {category!r}")
    count = count_tokens or (lambda text: math.ceil(len(text) / CHARS_PER_TOKEN))
    longest = max(
        (count(render_calls(gold_calls(t, optional=True))) for t in load_tasks(None, [category]) if t.possible_answer),
        default=0,
    )
    return max(floor, math.ceil(BUDGET_FACTOR * longest))


def category_budgets(
    tasks: Iterable[SingleTurnTask], count_tokens: Callable[[str], int] | None, floor: int
) -> dict[str, int]:
    """``{category: generation_budget(category, count_tokens, floor)}`` for the categories of ``tasks``."""
    return {c: generation_budget(c, count_tokens, floor) for c in dict.fromkeys(t.category for t in tasks)}


def token_counter(policy: Any) -> Callable[[str], int] | None:
    """Tokens of a text under the policy's ``tokenizer`` (no special tokens added); None without one."""
    tokenizer = getattr(policy, "tokenizer", None)
    if tokenizer is None:
        return None
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def result_subsets(results: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``all``, ``no_overlap`` (tasks none of whose functions resemble a tool of a passed environment) and
    one subset per category present."""
    subsets = {"all": results, "no_overlap": [r for r in results if not r["tags"]["benchmark_overlap"]]}
    for category in CATEGORIES:
        group = [r for r in results if r["tags"]["category"] == category]
        if group:
            subsets[category] = group
    return subsets


class SingleTurnPolicy(Protocol):
    """What :func:`run_tasks` needs from a model (:class:`~envfactory_assets.evaluation.model_policy.Policy`):
    ``generate`` with a per-call budget, and ``last_cut_off`` (per output of the last call: stopped at the
    budget)."""

    last_cut_off: list[bool]

    def generate(
        self,
        conversations: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]],
        seed: int,
        max_new_tokens: int | None = None,
        prose_stop_tokens: int = 0,
    ) -> list[str]: ...


def run_tasks(
    policy: SingleTurnPolicy,
    tasks: Sequence[SingleTurnTask],
    seeds: Sequence[int],
    budgets: Mapping[str, int],
    overlap: Mapping[str, list[str]] | None = None,
    prose_stop_tokens: int = 0,
) -> list[dict[str, Any]]:
    """One answer per task and seed, scored; one ``generate`` call per category and seed.

    Args:
        policy: the model.
        tasks: from :func:`load_tasks`.
        seeds: sampling seeds.
        budgets: ``{category: max new tokens}`` (:func:`generation_budget`).
        overlap: ``{task id: env ids whose tools resemble the task's functions}`` (:func:`task_overlap`).
        prose_stop_tokens: passed to ``generate``: an answer stops once its calls can no longer change
            (:func:`~envfactory_assets.tooluse.tool_calls.answer_is_complete`; 0 = off).

    Returns:
        Per task and seed, the agent loop's result shape: ``{"task_id", "seed", "score": score_output(...),
        "n_calls", "turns": 1, "tags": {"category", "benchmark_overlap"}, "trace": [assistant message cut
        to 600 characters]}``, in task order within each seed.

    Raises:
        KeyError: a task's category has no budget.
    """
    overlap = overlap or {}
    results = []
    for seed in seeds:
        for category in dict.fromkeys(t.category for t in tasks):
            group = [t for t in tasks if t.category == category]
            texts = policy.generate(
                [(list(t.messages), task_tools(t)) for t in group],
                seed,
                max_new_tokens=budgets[category],
                prose_stop_tokens=prose_stop_tokens,
            )
            cut_off = list(policy.last_cut_off)
            for task, text, cut in zip(group, texts, cut_off, strict=True):
                results.append(
                    {
                        "task_id": task.id,
                        "seed": seed,
                        "score": score_output(task, text, cut),
                        "n_calls": len(parse_tool_calls(text).calls),
                        "turns": 1,
                        "tags": {"category": category, "benchmark_overlap": list(overlap.get(task.id, []))},
                        "trace": [{"role": "assistant", "content": text[:TRACE_CHARS]}],
                    }
                )
    return results


def task_overlap(tasks: Iterable[SingleTurnTask], overlap_rows: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """``{task id: sorted env ids}`` of the environments with a tool tagged as resembling one of the task's
    functions (``benchmark_overlap`` rows of benchmark :data:`BENCHMARK`, suite = the task's category)."""
    matched: dict[tuple[str, str], set[str]] = {}
    for row in overlap_rows:
        if row.get("benchmark") == BENCHMARK:
            matched.setdefault((row["suite"], row["benchmark_tool"]), set()).add(row["env_id"])
    out = {}
    for task in tasks:
        envs = set().union(*(matched.get((task.category, f["name"]), set()) for f in task.functions))
        if envs:
            out[task.id] = sorted(envs)
    return out


def category_metrics(results: Sequence[Mapping[str, Any]], budgets: Mapping[str, int]) -> dict[str, Any]:
    """Per-category breakdown of :func:`run_tasks` results (all seeds pooled).

    Returns:
        ``{"<category>/accuracy": mean valid, "<category>/n_results": int, "<category>/truncated": int,
        "<category>/budget": tokens, "<category>/call_rate": share of outputs with a parseable call (must-call
        categories only), "<category>/parse_failure": share of parse failures}`` for every category present;
        ``"truncated_outputs"``: the number of outputs that stopped at their budget; ``"call_rate"`` (must-call
        results; None without any), ``"parse_failure"`` (all results; None without any) and ``"balanced"``:
        the mean of the accuracies of :data:`BALANCED_CATEGORIES`, None (not measured, never 0) unless all five
        are present.
    """
    out: dict[str, Any] = {}
    for category in CATEGORIES:
        group = [r for r in results if r["tags"]["category"] == category]
        if not group:
            continue
        out[f"{category}/accuracy"] = sum(r["score"]["valid"] for r in group) / len(group)
        if category in MUST_CALL:
            out[f"{category}/call_rate"] = sum(r["score"]["called"] for r in group) / len(group)
        out[f"{category}/parse_failure"] = sum(r["score"]["parse_failure"] for r in group) / len(group)
        out[f"{category}/n_results"] = len(group)
        out[f"{category}/truncated"] = int(sum(r["score"]["truncated"] for r in group))
        out[f"{category}/budget"] = budgets[category]
    out["truncated_outputs"] = int(sum(r["score"]["truncated"] for r in results))
    must_call = [r for r in results if r["tags"]["category"] in MUST_CALL]
    out["call_rate"] = sum(r["score"]["called"] for r in must_call) / len(must_call) if must_call else None
    out["parse_failure"] = sum(r["score"]["parse_failure"] for r in results) / len(results) if results else None
    accuracies = [out.get(f"{c}/accuracy") for c in BALANCED_CATEGORIES]
    out["balanced"] = None if None in accuracies else sum(accuracies) / len(accuracies)
    return out
