"""Assistant replies that state only what the tool results say, in varied words, and the check that holds
every number, date, quote and identifier of a reply against the turn's results
(:mod:`envfactory_assets.quality.reply_facts`, independent of the writer
:mod:`envfactory_assets.synth.refinement.replies`)."""

from __future__ import annotations

import copy
import random
import re
from pathlib import Path

import orjson
import pytest

from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.quality.reply_facts import reply_figures, reply_problems
from envfactory_assets.sources.scan import inspect_file
from envfactory_assets.synth.refinement.operators import refine_turns
from envfactory_assets.synth.refinement.phrasing import flag_predicate
from envfactory_assets.synth.refinement.replies import call_sentence, join_replies, summary_action, write_reply
from envfactory_assets.synth.sampling.sampler import SamplerConfig, sample_chains
from envfactory_assets.synth.trajectories.execution import SynthConfig, ToolIndex, synthesize_trajectory
from envfactory_assets_tests.fixture_environments import corpus_environment, environment_worker

SEARCH = {
    "name": "bike_point_search",
    "kind": "search",
    "table": "bike_points",
    "description": "Gets all bike point locations.",
}
TOOLS = {
    SEARCH["name"]: SEARCH,
    "count_bike_points": {"name": "count_bike_points", "kind": "count", "table": "bike_points"},
    "get_bike_point": {"name": "get_bike_point", "kind": "get", "table": "bike_points"},
    "create_bike_point": {"name": "create_bike_point", "kind": "create", "table": "bike_points"},
    "update_bike_point": {"name": "update_bike_point", "kind": "update", "table": "bike_points"},
    "delete_bike_point": {"name": "delete_bike_point", "kind": "delete", "table": "bike_points"},
    "close_bike_point": {
        "name": "close_bike_point",
        "kind": "action",
        "table": "bike_points",
        "action": {"verb": "close", "field": "closed", "state": "closed"},
    },
}
ROW = {"id": "bp_12", "commonName": "River Street, Clerkenwell", "nb_docks": 19, "installed": "2024-05-26"}
#: The issue's example: a search with offset 5, limit 5 that returned one bike point of six.
ONE_OF_SIX = {
    "name": "bike_point_search",
    "arguments": {"query": "street", "offset": 5, "limit": 5},
    "output": {"items": [ROW], "total": 6},
}
SITUATIONS = {
    "rows read": ONE_OF_SIX,
    "no rows read": {"name": "bike_point_search", "arguments": {"query": "zz"}, "output": {"items": [], "total": 0}},
    "count": {"name": "count_bike_points", "arguments": {}, "output": {"count": 4}},
    "get": {"name": "get_bike_point", "arguments": {"id": "bp_12"}, "output": ROW},
    "create": {"name": "create_bike_point", "arguments": {"commonName": ROW["commonName"]}, "output": ROW},
    "update": {"name": "update_bike_point", "arguments": {"id": "bp_12", "nb_docks": 19}, "output": ROW},
    "delete": {"name": "delete_bike_point", "arguments": {"id": "bp_12"}, "output": {"id": "bp_12", "deleted": True}},
    "action": {"name": "close_bike_point", "arguments": {"id": "bp_12"}, "output": {**ROW, "closed": True}},
    "refused": {
        "name": "close_bike_point",
        "arguments": {"id": "bp_12"},
        "output": {"error": "precondition_failed", "message": "bike point bp_12 is already closed."},
    },
}


def key_of(tool):
    return "id"


def test_a_reply_with_a_wrong_count_fails_the_check():
    # what the writer said before: the total of the search as the rows found
    assert reply_problems("There are 6 bike points.", [ONE_OF_SIX])
    assert reply_problems("I found 6 bike points, including 'River Street, Clerkenwell'.", [ONE_OF_SIX])
    assert reply_problems("I found 2 bike points.", [ONE_OF_SIX])
    assert reply_problems("I found three bike points.", [ONE_OF_SIX])
    assert reply_problems("I found 1 bike point of 7.", [ONE_OF_SIX])
    assert reply_problems("I found 1 bike point, 'Baker Street'.", [ONE_OF_SIX])  # a name no result holds
    assert reply_problems("I found 1 bike point: bp_13.", [ONE_OF_SIX])  # an identifier no result holds
    assert reply_problems("It was installed on 27 May 2024.", [ONE_OF_SIX])
    assert reply_problems("I found 1 bike point.", []) and reply_problems("See bp_12.", [])  # no results at all
    for faithful in (
        "I found 1 bike point of 6: 'River Street, Clerkenwell'.",
        "1 bike point came back (6 in all), namely bp_12; it has 19 docks, installed 26 May 2024.",
        "Here is one bike point out of 6.",
    ):
        assert reply_problems(faithful, [ONE_OF_SIX]) == [], faithful


def test_a_month_a_result_also_holds_as_a_name_is_read_as_part_of_its_date():
    """A result holding the first name 'April' and the date 2025-04-29T23:12: "April 29, 2025 at 23:12 UTC" is
    one date (the name does not swallow its month); a day the results do not hold still fails."""
    created = {
        "name": "create_user",
        "arguments": {},
        "output": {"id": "use_1", "firstname": "April", "requested_at": "2025-04-29T23:12:00Z"},
    }
    assert reply_problems("Created use_1 for 'April', requested April 29, 2025 at 23:12 UTC.", [created]) == []
    assert reply_problems("Created use_1 for April, requested 29 April 2025 at 23:12 UTC.", [created]) == []
    assert reply_problems("Created use_1 for 'April', requested April 28, 2025 at 23:12 UTC.", [created])


def test_a_reply_that_claims_of_n_without_a_total_fails_the_check():
    no_total = {"name": "bike_point_search", "arguments": {}, "output": {"items": [ROW, {**ROW, "id": "bp_13"}]}}
    assert reply_problems("I found 2 bike points of 5.", [no_total])
    assert reply_problems("I found 2 bike points (5 in all).", [no_total])
    assert reply_problems("I found 2 bike points out of 2.", [no_total])  # the result states no total
    assert reply_problems("I found 2 bike points.", [no_total]) == []
    for seed in range(30):
        reply = write_reply([no_total], TOOLS, key_of, f"t{seed}")
        assert reply_problems(reply, [no_total]) == [], reply
        assert not re.search(r"\b(?:of|out of) \d|in all|in total", reply), reply


def test_one_parent_a_read_is_scoped_to_is_no_total():
    """A read of "the replies of one thread" names the parent a list read: it states no total, so a result whose total
    is 2 holds it; "1 of 3" and "out of one" stay totals."""
    replies = {
        "name": "list_thread_replies",
        "arguments": {"thread_id": "thr_00001"},
        "output": {
            "items": [{"id": "rep_00008", "thread_id": "thr_00001"}, {"id": "rep_00009", "thread_id": "thr_00001"}],
            "total": 2,
        },
    }
    said = "I listed the replies of one thread: two replies for thread thr_00001 (that is all of them)."
    assert reply_problems(said, [replies]) == []
    assert reply_problems("I listed the replies of 1 thread: rep_00008 and rep_00009.", [replies]) == []
    assert reply_problems("I found one reply of 3 replies.", [replies])
    assert reply_problems("I found two replies out of one thread.", [replies])


def test_the_writer_states_the_rows_returned_and_the_total_only_as_a_total():
    replies = {write_reply([ONE_OF_SIX], TOOLS, key_of, f"t{seed}") for seed in range(40)}
    for reply in replies:
        assert reply_problems(reply, [ONE_OF_SIX]) == [], reply
        assert re.search(r"\b(?:1|one) bike point\b", reply, re.I) and not re.search(r"\b6 bike points\b", reply), reply
    assert any("River Street, Clerkenwell" in r for r in replies)
    assert write_reply([ONE_OF_SIX], TOOLS, key_of, "t1") == write_reply([ONE_OF_SIX], TOOLS, key_of, "t1")
    # phrased from the operation's summary; a search for "street" did not get them all
    assert any("got the bike point locations" in r for r in replies)
    assert not [r for r in replies if "got all" in r]


def test_a_read_names_at_most_three_rows():
    rows = [{"id": f"bp_{i}", "name": f"Dock {chr(65 + i)}"} for i in range(5)]
    call = {"name": "bike_point_search", "arguments": {}, "output": {"items": rows, "total": 5}}
    for seed in range(20):
        reply = write_reply([call], TOOLS, key_of, f"s{seed}")
        assert reply_problems(reply, [call]) == [], reply
        assert len(re.findall(r"'Dock [A-E]'", reply)) <= 3 and "'Dock D'" not in reply, reply


@pytest.mark.parametrize("situation", sorted(SITUATIONS))
def test_every_situation_has_three_plans_and_each_checks_out(situation):
    call = SITUATIONS[situation]
    sentences = {call_sentence(call, TOOLS[call["name"]], "id", random.Random(f"{situation}{s}")) for s in range(40)}
    assert len(sentences) >= 3, sentences
    for seed in range(20):
        reply = write_reply([call], TOOLS, key_of, f"{situation}/{seed}")
        assert reply_problems(reply, [call]) == [], reply


def test_a_refused_call_is_reported_with_its_reason_and_never_as_done():
    refused = SITUATIONS["refused"]
    for seed in range(20):
        reply = write_reply([refused], TOOLS, key_of, f"r{seed}")
        assert "already closed" in reply and not re.search(r"\bis now closed\b|^Done", reply), reply
    assert reply_problems("Bike point bp_12 is now closed.", [refused])  # the reason is missing


def test_joined_replies_open_and_close_once():
    a, b = "Done. I found 1 bike point. Anything else?", "All set. I deleted bike point bp_12."
    assert join_replies(a, b) == "Done. I found 1 bike point. I deleted bike point bp_12."


def test_every_reply_of_the_fixture_trajectories_checks_out(environments, graph, worker):
    chains = sample_chains(graph, 30, "replies", SamplerConfig(min_tools=3))
    raws = [synthesize_trajectory(c, graph, environments, worker, SynthConfig(min_turns=2)) for c in chains]
    raws = [r for r in raws if r["status"] == "passed"]
    assert len(raws) >= 10
    refined = [
        {"status": "passed", "turns": refine_turns(r["turns"], environments, seed=f"r{n}")[0]}
        for n, r in enumerate(raws)
    ]
    for rows in (raws, refined):
        figures = reply_figures(rows)
        assert figures["replies"] >= 20 and figures["pass_share"] == 1.0, figures["failures"]
    replies = [t["assistant_summary"] for r in refined for t in r["turns"]]
    assert len({r.split()[0] for r in replies}) >= 4


@pytest.mark.parametrize("reply, passed", [("I found 1 bike point of 6.", True), ("There are 6 bike points.", False)])
def test_the_blocking_check_reads_the_stored_refined_trajectories(tmp_path, reply, passed):
    from envfactory_assets.defs.resources import EnvFactoryHome
    from envfactory_assets.defs.synth.assets import refined_replies_gate
    from envfactory_assets.store.db import Store

    turn = {"turn_index": 0, "query": "Find bike points on River Street.", "calls": [ONE_OF_SIX]}
    row = {
        "id": "ref-1",
        "raw_trajectory_id": "raw-1",
        "tool_chain_id": "chain-1",
        "env_ids": [],
        "domains": [],
        "status": "passed",
        "reasons": [],
        "n_turns": 1,
        "operators": [],
        "turns": [{**turn, "assistant_summary": reply}],
        "benchmark_overlap": [],
    }
    Store(tmp_path / "envfactory.duckdb").replace_current("refined_trajectories", [row])
    result = refined_replies_gate(envfactory=EnvFactoryHome(home=str(tmp_path)))
    assert result.passed is passed
    assert result.metadata["replies"].value == 1
    assert bool(result.metadata["failures"].value) is not passed


def test_the_report_shows_the_3_gram_variety_and_the_checker_pass_share():
    from envfactory_assets.reporting.report import replies_section, reply_figures_of

    turn = {"turn_index": 0, "query": "Find bike points on River Street.", "calls": [ONE_OF_SIX]}
    rows = [
        {"id": "a", "status": "passed", "turns": [{**turn, "assistant_summary": "I found 1 bike point of 6."}]},
        {"id": "b", "status": "passed", "turns": [{**turn, "assistant_summary": "There are 6 bike points."}]},
    ]
    figures = reply_figures_of(rows)
    assert figures["replies"] == 2 and figures["checker_pass_share"] == 0.5 and figures["failing"] == 1
    assert figures["distinct_trigrams_per_1000"] == 4000.0  # 5 + 3 distinct 3-grams over 2 replies
    text = "\n".join(replies_section(rows))
    assert "| checker pass share | 0.5 |" in text and "There are 6 bike points." in text


DOCKS = [
    {"id": "bp_12", "commonName": "River Street", "station_id": "st_1", "nb_docks": 19, "status": "open"},
    {"id": "bp_13", "commonName": "Baker Street", "station_id": "st_1", "nb_docks": 7, "status": "closed"},
]


def _replies(call, n=40):
    return [write_reply([call], TOOLS, key_of, f"f{seed}") for seed in range(n)]


def test_a_read_names_facts_of_the_rows_it_returned_and_nothing_else():
    call = {"name": "bike_point_search", "arguments": {"station_id": "st_1"}, "output": {"items": DOCKS}}
    replies = _replies(call)
    for reply in replies:
        assert reply_problems(reply, [call]) == [], reply
    assert any(re.search(r"'River Street' \((?:nb docks 19|status 'open')", r) for r in replies), replies
    assert any("for station st_1" in r for r in replies), replies  # the subject the arguments and rows share
    other = {**call, "arguments": {"station_id": "st_9"}}
    assert not any("st_9" in r for r in _replies(other))  # an argument the rows do not hold is not said


def test_a_create_states_the_values_the_returned_row_holds_for_what_the_call_set():
    created = {**ROW, "nb_docks": 21}
    call = {
        "name": "create_bike_point",
        "arguments": {"commonName": ROW["commonName"], "nb_docks": 20},
        "output": created,
    }
    replies = _replies(call)
    for reply in replies:
        assert reply_problems(reply, [call]) == [], reply
        assert "20" not in reply and "installed" not in reply and "26 May" not in reply, reply
    assert any("nb docks 21" in r for r in replies), replies


def test_a_get_states_at_most_three_facts_and_no_secret():
    row = {**ROW, "status": "open", "zone": "north", "capacity": 30, "password": "hunter22"}
    call = {"name": "get_bike_point", "arguments": {"id": "bp_12"}, "output": row}
    facts = ("nb docks 19", "status 'open'", "zone 'north'", "capacity 30", "installed ")
    for reply in _replies(call):
        assert reply_problems(reply, [call]) == [], reply
        assert sum(f in reply for f in facts) <= 3 and "hunter22" not in reply, reply


def test_replies_of_many_calls_stay_short_and_every_plan_of_the_fixture_calls_checks_out():
    calls = [SITUATIONS[s] for s in ("rows read", "get", "create")]
    for seed in range(40):
        reply = write_reply(calls, TOOLS, key_of, f"m{seed}")
        assert reply_problems(reply, calls) == [] and len(reply.split()) <= 60, reply
    sentences = {
        situation: {call_sentence(call, TOOLS[call["name"]], "id", random.Random(s)) for s in range(200)}
        for situation, call in SITUATIONS.items()
    }
    assert all(len(v) >= 3 for v in sentences.values()), {k: len(v) for k, v in sentences.items()}
    for situation, found in sentences.items():
        for sentence in found:
            assert reply_problems(sentence, [SITUATIONS[situation]]) == [], (situation, sentence)


def test_joined_replies_drop_a_closer_that_names_the_rows():
    first = "I found 1 bike point. Anything else about the bike points?"
    assert (
        join_replies(first, "Sure. I deleted bike point bp_12.") == "I found 1 bike point. I deleted bike point bp_12."
    )


def test_a_get_states_its_facts_as_noun_phrases_after_has_with_and_showing():
    row = {**ROW, "status": "open", "zone": "north"}
    call = {"name": "get_bike_point", "arguments": {"id": "bp_12"}, "output": row}
    sentences = {call_sentence(call, TOOLS["get_bike_point"], "id", random.Random(s)) for s in range(400)}
    joined_as_clause = [s for s in sentences if re.search(r"(has|with|showing|lists|shows) [a-z ]+ is ", s)]
    assert joined_as_clause == []
    # the clause form is still written where it reads well: after a colon or in brackets
    assert any(re.search(r"(: |\()[a-z ]+ is ", s) for s in sentences), sorted(sentences)[:10]
    assert all(reply_problems(s, [call]) == [] for s in sentences)


#: An office API shaped like the run's real specs whose summaries and fields the replies misread: "Create a
#: single Project", "List all product", "Creates a user and account records.", boolean fields (bot,
#: discoverable, blocked, is_active, can_invoice, has_duration).
OFFICE = Path(__file__).parent / "fixtures" / "openapi_replies"


@pytest.fixture(scope="module")
def office():
    """``(tool index, {situation: call})``: calls of the office environment run in a sandbox, each with the
    ``output`` the environment returned."""
    resource = inspect_file(OFFICE / "office_accounts.json", OFFICE)
    env = build_environment(resource.as_row(), orjson.loads((OFFICE / "office_accounts.json").read_bytes()))
    index = ToolIndex({env["env_id"]: env})
    calls: dict[str, dict] = {}
    with environment_worker({env["env_id"]: env}) as worker:
        episode = worker.open_episode({env["env_id"]: copy.deepcopy(env["initial_states"][0]["state"])})

        def run(situation, tool, **arguments):
            result = worker.call(episode, tool, arguments)
            assert result["ok"], result
            calls[situation] = {"name": tool, "arguments": arguments, "output": result["output"]}
            return result["output"]

        account = run(
            "create account",
            "create_account",
            display_name="Rachel Wilson",
            acct="song",
            bot=False,
            discoverable=True,
            blocked=False,
        )["account_id"]
        run("update account", "update_account", account_id=account, blocked=True, discoverable=False)
        run("get account", "get_account", account_id=account)
        run("list accounts", "list_accounts")
        project = run(
            "create project",
            "create_project",
            name="Design Project",
            number=14,
            is_active=True,
            can_invoice=False,
            has_duration=False,
        )["project_id"]
        run("get project", "get_project", project_id=project)
        run("list products", "list_products")
        run("delete project", "delete_project", project_id=project)
    return index, calls


def _office_replies(office, *situations, n=60):
    index, calls = office
    chosen = [calls[s] for s in situations]
    return chosen, [write_reply(chosen, index.tools, index.key_of, f"o{seed}") for seed in range(n)]


def test_a_done_phrase_says_the_row_once_and_an_article_agrees(office):
    calls, replies = _office_replies(office, "create project", "get project", "delete project")
    for reply in replies:
        assert reply_problems(reply, calls) == [], reply
        assert not re.search(r"(?i)\b(a|an|the|of|to|that|has) \1\b", reply), reply  # "created the the project"
    assert any("created the project" in r for r in replies), replies  # "Create a single Project", said once
    action = {"name": "archive_environment", "kind": "action", "table": "environments"}
    # the one row an action touched is "the" row; an article left before a vowel agrees with it
    assert summary_action({**action, "description": "Archive a environment."}) == "archived the environment"
    send = {"name": "send_environment", "kind": "side_effect", "table": "environments"}
    assert summary_action({**send, "description": "Send a environment."}) == "sent an environment"
    assert summary_action({**action, "kind": "get", "description": "Get a single token's data"}) == (
        "got the token's data"
    )


def test_what_a_list_returns_all_of_is_plural(office):
    calls, replies = _office_replies(office, "list products")
    for reply in replies:
        assert reply_problems(reply, calls) == [], reply
        assert not re.search(r"\ball product\b", reply), reply
    assert any("listed all products" in r for r in replies), replies
    pools = {"kind": "list", "table": "pools", "description": "Lists all of the pools in the specified account."}
    assert summary_action(pools) == "listed all of the pools in the account"


def test_a_summary_that_quotes_its_parameters_is_not_said_as_done():
    from envfactory_assets.synth.refinement.phrasing import describe_call

    # "I searched refunds by 'from' and 'to' date" quotes two values no result holds: the reply gate refuses it
    refunds = {"kind": "list", "table": "refunds", "description": "Search refunds by 'from' and 'to' date. Token."}
    assert summary_action(refunds) is None
    tool = refunds | {"name": "search_refunds", "input_schema": {"type": "object", "properties": {}}}
    requests = {describe_call(tool, "refund_id", {}, rng=random.Random(seed)) for seed in range(40)}
    assert len(requests) > 3 and not [r for r in requests if "'from'" in r], requests
    assert summary_action({**refunds, "description": "List the customers' refunds"}) == "listed the customers' refunds"


def test_a_reply_names_one_created_row_without_a_plural_summary(office):
    calls, replies = _office_replies(office, "create account")
    for reply in replies:
        assert reply_problems(reply, calls) == [], reply
        # "I created the user and account records, 'Rachel Wilson'": one row, named after a plural
        assert "records" not in reply, reply
    assert any("'Rachel Wilson'" in r for r in replies)


def test_a_boolean_is_said_as_what_it_says_of_the_row(office):
    created, replies = _office_replies(office, "create account", "update account", "get account", "list accounts")
    project, project_replies = _office_replies(office, "create project", "get project")
    said = replies + project_replies
    for reply in said:
        assert not re.search(
            r"\b(?:bot|discoverable|blocked|is active|can invoice|has duration)(?: is| is now)? (?:yes|no)\b", reply
        ), reply
    for reply in replies:
        assert reply_problems(reply, created) == [], reply
    # faithful to each value: the new account is not a bot and discoverable; the update blocked it and hid it
    assert not any(re.search(r"\bis (?:still )?a bot\b", r) for r in replies)
    assert any("not a bot" in r for r in replies), replies
    assert any(re.search(r"\bblocked now\b", r) and "not blocked now" not in r for r in replies), replies
    assert any(re.search(r"\bis active\b", r) for r in project_replies), project_replies
    assert any(re.search(r"\bcannot invoice\b|\bhas no duration\b", r) for r in project_replies), project_replies
    assert not any(re.search(r"\bcan invoice\b|\bhas a duration\b|\bis not active\b", r) for r in project_replies)


def test_flag_predicates_of_the_runs_boolean_fields():
    expected = {
        ("bot", False): "is not a bot",
        ("discoverable", False): "is not discoverable",
        ("is_active", True): "is active",
        ("is_admin", True): "is an admin",
        ("has_duration", False): "has no duration",
        ("has_target", True): "has a target",
        ("can_invoice", False): "cannot invoice",
        ("require_approval", True): "requires approval",
        ("uses_task_dependencies", False): "does not use task dependencies",
        ("charges_enabled", True): "has charges enabled",
        ("is_on_duty", False): "is not on duty",
        ("explicitly_trashed", True): "is explicitly trashed",
        ("mail", True): "has mail set to yes",
    }
    assert {k: flag_predicate(*k) for k in expected} == expected
    with pytest.raises(TypeError, match="bot"):
        flag_predicate("bot", "no")


def test_no_word_is_said_twice_where_a_connector_meets_a_refusal():
    calls = [SITUATIONS["create"], SITUATIONS["refused"], SITUATIONS["rows read"]]
    for seed in range(80):
        reply = write_reply(calls, TOOLS, key_of, f"d{seed}")
        assert not re.search(r"(?i)\b(that|to|has|a|the) \1\b", reply), reply
    to_field = {"id": "bp_14", "to": "easy", "nb_docks": 3}
    created = {"name": "create_bike_point", "arguments": {"to": "easy"}, "output": to_field}
    assert not any(re.search(r"\bto to\b", r) for r in _replies(created, 80))


def test_a_persona_opening_a_sentence_of_the_query_starts_with_a_capital():
    from envfactory_assets.synth.refinement.phrasing import shape_for_persona
    from envfactory_assets.synth.sampling.sampler import PERSONAS

    # a request as the run's queries read ("Hey! a DevOps engineer here." was one of them)
    request = "Create a new job with name 'Logistics JOB'."
    seen = set()
    for persona in {p for ps in PERSONAS.values() for p in ps}:
        for seed in range(40):
            query = shape_for_persona(request, persona, True, random.Random(seed))
            seen.add(query.split(persona[2:])[0])
            assert not re.search(r"(^|[.!?] )[a-z]", query), query
    assert "Hey! A " in seen and "Hello, a " in seen  # a persona inside a sentence keeps its article


#: googleapis.com/vault.json ``matters.create`` as the run's environment offers it, called without a name (the
#: spec requires none), so the created row has no label, only its identifier.
MATTERS_CREATE = {
    "name": "vault_matters_create",
    "kind": "create",
    "table": "matters",
    "description": "Creates a matter with the given name and description. The initial state is open, and the "
    "owner is the method caller. Returns the created matter with default view.",
}
MATTER_CALL = {
    "name": "vault_matters_create",
    "arguments": {"description": "Helps the Engineering team harness end-to-end e-commerce."},
    "output": {
        "matter_id": "mat_00025",
        "description": "Helps the Engineering team harness end-to-end e-commerce.",
        "state_value": "OPEN",
        "created_at": "2024-09-20T06:24:00Z",
    },
}


def test_a_created_row_without_a_label_is_named_by_its_id_in_a_sentence():
    tools = {"vault_matters_create": MATTERS_CREATE}
    replies = [write_reply([MATTER_CALL], tools, lambda _: "matter_id", f"m{seed}") for seed in range(200)]
    summarised = [r for r in replies if "with the name and description" in r]
    assert summarised, replies[:5]
    for reply in summarised:
        # "I created the matter with the name and description, mat_00025": the id read as a list item
        assert not re.search(r"description[,:] mat_00025", reply), reply
    assert any("(id mat_00025)" in r for r in summarised), summarised[:5]
    assert all(reply_problems(r, [MATTER_CALL]) == [] for r in replies)


def test_a_reply_says_it_is_done_once():
    tools = {"vault_matters_create": MATTERS_CREATE}
    replies = [write_reply([MATTER_CALL], tools, lambda _: "matter_id", f"d{seed}") for seed in range(1200)]
    assert any(r.startswith("Done, ") for r in replies), replies[:5]
    # "All done. Done, matter mat_00025 now exists"
    assert not [r for r in replies if re.search(r"(?i)\bdone\b.*\bdone\b", r)]
    # after another call's sentence: "finally, done, matter ...", "Once that was done, done, matter ..."
    tools = {**TOOLS, "vault_matters_create": MATTERS_CREATE}
    calls = [SITUATIONS["create"], MATTER_CALL]

    def keys(tool):
        return "matter_id" if tool["table"] == "matters" else key_of(tool)

    replies = [write_reply(calls, tools, keys, f"x{seed}") for seed in range(600)]
    assert not [r for r in replies if re.search(r"(?i)\bdone\b.*\bdone\b", r)]
    assert any(re.search(r"\bOnce that was done\b", r) for r in replies)
    assert all(reply_problems(r, calls) == [] for r in replies)


def test_a_flag_filter_named_by_a_verb_is_set_not_is():
    from envfactory_assets.synth.refinement.phrasing import describe_call
    from envfactory_assets_tests.test_clarifications import _calls_of

    # azure.com/batch-BatchService.json Job list as the run's environment offers it
    schema = {
        "type": "object",
        "properties": {
            "limit": {"type": "integer", "description": "Maximum number of jobs to return (default 20)."},
            "uses_task_dependencies": {
                "type": "boolean",
                "description": "Whether Tasks in the Job can define dependencies on each other.",
            },
        },
        "required": [],
    }
    tool = {
        "name": "job_list",
        "kind": "list",
        "table": "jobs",
        "description": "Lists all of the Jobs in the specified Account.",
        "input_schema": schema,
    }
    args = {"uses_task_dependencies": False}
    texts = [describe_call(tool, "job_id", args, rng=random.Random(i)) for i in range(30)]
    for text in texts:
        assert not re.search(r"uses task dependencies (is|is set to) (no|false)", text), text
        assert "uses task dependencies set to false" in text, text
    spec = {
        "type": "function",
        "function": {"name": "job_list", "description": tool["description"], "parameters": schema},
    }
    for text in texts[:5]:
        question, calls = _calls_of(text, [spec])
        assert not question and calls == [("job_list", args)], text


@pytest.mark.corpus
def test_an_action_reply_says_the_state_it_set_and_no_other_state_of_the_row():
    # DataSync's start_task_execution sets running on a row whose seeded data says cancelled and PREPARING:
    # "I marked task execution task_00017 as running, and it is cancelled" says two states of one row
    env = corpus_environment("amazonaws.com/datasync.json")
    index = ToolIndex({env["env_id"]: env})
    out = {
        "bytes_compressed": 7729024,
        "bytes_transferred": 2864197,
        "cancelled": True,
        "created_at": "2025-05-24T07:18:00Z",
        "estimated_files_to_transfer": 285,
        "running": True,
        "start_time": "2025-02-10T15:51:00Z",
        "status": "PREPARING",
        "task_execution_id": "task_00017",
    }
    call = {"name": "start_task_execution", "arguments": {"task_execution_id": "task_00017"}, "output": out}
    replies = [write_reply([call], index.tools, index.key_of, f"start/{s}") for s in range(40)]
    assert all("running" in r for r in replies), replies
    assert any("bytes transferred" in r or "files to transfer" in r for r in replies)
    assert not [r for r in replies if "cancelled" in r or "PREPARING" in r]
    # the row's other facts follow with a subject of their own: "I set X to running and keeps ..." has none
    assert not [r for r in replies if re.search(r"\brunning and keeps\b", r)], replies
    assert any(" and it keeps " in r for r in replies), replies


def test_an_action_done_phrase_names_the_row_it_touched():
    # billingo's "Cancel a document": the reply is about the one document the call cancelled
    cancel = {"name": "cancel_document", "kind": "action", "table": "documents", "description": "Cancel a document."}
    assert summary_action(cancel) == "cancelled the document"


@pytest.mark.corpus
def test_a_row_is_named_by_its_name_not_a_job_title_or_a_placeholder():
    # Apideck's customer has a title ("CEO", a job title) beside its display name; data2crm's call has the
    # spec's example "Subject of the call" as its subject: neither names the row
    accounting = corpus_environment("apideck.com/accounting.json")
    crm = corpus_environment("data2crm.com.json")
    index = ToolIndex({accounting["env_id"]: accounting, crm["env_id"]: crm})
    customer = {
        "company_name": "Johnson-Campbell",
        "created_at": "2025-06-30T12:00:00Z",
        "customer_id": "cus_00025",
        "display_name": "Brianna Small",
        "first_name": "Alexa",
        "title": "CEO",
    }
    added = {"name": "customers_add", "arguments": {k: customer[k] for k in customer if "_at" not in k}}
    replies = [write_reply([{**added, "output": customer}], index.tools, index.key_of, f"c/{s}") for s in range(30)]
    assert any("'Brianna Small'" in r for r in replies), replies
    assert not [r for r in replies if "'CEO'" in r]
    call = {
        "call_id": "cal_00011",
        "direction": "Inbound",
        "result": "Confirmed",
        "status": "Planned",
        "subject": "Subject of the call",
    }
    got = {"name": "get_call_entity", "arguments": {"call_id": "cal_00011"}, "output": call}
    replies = [write_reply([got], index.tools, index.key_of, f"g/{s}") for s in range(30)]
    assert any("cal_00011" in r for r in replies), replies
    assert not [r for r in replies if "Subject of the call" in r]


@pytest.mark.corpus
def test_a_filtered_list_reply_does_not_say_it_listed_all_rows():
    # billingo's "List all bank account" summary: a call filtered by currency did not list them all
    env = corpus_environment("billingo.hu.json")
    index = ToolIndex({env["env_id"]: env})
    row = {"bank_account_id": "ban_00021", "currency": "CAD", "name": "Partner Bank Account", "need_qr": True}
    listed = {"name": "list_bank_account", "output": {"items": [row], "total": 1}}
    filtered = [
        write_reply([{**listed, "arguments": {"currency": "CAD"}}], index.tools, index.key_of, f"l/{s}")
        for s in range(40)
    ]
    assert any("listed the bank accounts" in r for r in filtered), filtered
    assert not [r for r in filtered if "all bank accounts" in r]
    unfiltered = [
        write_reply([{**listed, "arguments": {"limit": 5}}], index.tools, index.key_of, f"l/{s}") for s in range(40)
    ]
    assert any("listed all bank accounts" in r for r in unfiltered), unfiltered


@pytest.mark.parametrize(
    "summary",
    [
        "Search refunds by-'from' and-'to' date",  # the reply gate refuses "-'from'": a value no result holds
        "Search refunds by'from' and'to' date",
        "Search refunds by from' and to' date",
        "Search refunds by \u2018from\u2019 and \u2018to\u2019 date",
        "Search refunds by `from` and `to` date",
    ],
)
def test_a_summary_quoting_its_parameters_without_a_space_before_is_not_said(summary):
    from envfactory_assets.synth.refinement.phrasing import describe_call, quotes_a_word

    refunds = {"kind": "list", "table": "refunds", "description": summary}
    assert quotes_a_word(summary) and summary_action(refunds) is None
    tool = refunds | {"name": "search_refunds", "input_schema": {"type": "object", "properties": {}}}
    requests = {describe_call(tool, "refund_id", {}, rng=random.Random(seed)) for seed in range(40)}
    assert len(requests) > 3 and not [r for r in requests if "from" in r], requests


def test_an_apostrophe_of_a_possessive_or_an_elision_quotes_nothing():
    for summary, said in [
        ("List the customers' refunds", "listed the customers' refunds"),
        ("List the customer's refunds", "listed the customer's refunds"),
        ("List rock'n'roll refunds", "listed rock'n'roll refunds"),
    ]:
        assert summary_action({"kind": "list", "table": "refunds", "description": summary}) == said
        assert reply_problems(f"I {said}.", [{"output": []}]) == []


def test_an_action_reply_keeps_no_record_times_among_the_rows_other_facts():
    # "class 'Engineering Class' went to active and it keeps created at 30 June 2025 at 12:00 UTC": when the
    # row was created or updated is no fact the action left as it was
    times = {"created_at": "2025-06-30T12:00:00Z", "updateTime": "2025-07-01T09:30:00Z"}
    out = {**ROW, **times, "closed": True}
    call = {"name": "close_bike_point", "arguments": {"id": "bp_12"}, "output": out}
    replies = [write_reply([call], TOOLS, key_of, f"close/{s}") for s in range(40)]
    assert all("closed" in r for r in replies), replies
    assert any("docks" in r or "installed" in r for r in replies), replies
    assert not [r for r in replies if re.search(r"created|update time|June|July", r, re.IGNORECASE)], replies
    # a row of nothing but its key, its state and its record times: the reply says the state and no more
    bare = {"id": "bp_12", **times, "closed": True}
    call = {"name": "close_bike_point", "arguments": {"id": "bp_12"}, "output": bare}
    replies = [write_reply([call], TOOLS, key_of, f"bare/{s}") for s in range(40)]
    assert not [r for r in replies if re.search(r"keeps|still has|\(with|record shows|June", r)], replies
