"""Clarification questions ask only for what the conversation has not given, name fields as a person does and
read well; user text carries no spec identifiers. Small fixtures: the bookshop and calendar documents and
hand-written turns."""

from __future__ import annotations

import random
import re

import pytest

from envfactory_assets.quality.conversation_text import (
    clarification_figures,
    clarification_findings,
    malformed,
    spec_identifiers,
    spoken_names,
)
from envfactory_assets.synth.datasets.rows import tools_of
from envfactory_assets.synth.refinement.phrasing import describe_call, spoken_field
from envfactory_assets.synth.refinement.solver.base import SolverView
from envfactory_assets.synth.refinement.solver.programmatic import (
    ProgrammaticSolver,
    answered_value,
    clarification_question,
)
from envfactory_assets.synth.trajectories.simulated_user import ProgrammaticUser, UserContext, answer_sentence


def _calls_of(query: str, tools: list[dict], answers: tuple[tuple[str, str], ...] = ()) -> tuple[str | None, list]:
    """``(question, calls)`` of one programmatic solver attempt in conversational mode; every call succeeds
    with its arguments echoed (the solver's reading of the text is what is tested, not the environment)."""
    messages = [{"role": "user", "content": query}]
    for q, a in answers:
        messages += [{"role": "assistant", "content": q}, {"role": "user", "content": a}]
    calls = []

    def call_tool(name: str, args: dict) -> dict:
        calls.append((name, args))
        return {"ok": True, "output": {**args, "id": "x_1"}}

    attempt = ProgrammaticSolver(ask=True).attempt(SolverView(tuple(messages), tuple(tools)), call_tool, 0)
    return attempt.question, calls


@pytest.fixture(scope="module")
def tools(environments) -> list[dict]:
    return tools_of(environments, sorted(environments))


def test_no_question_for_a_value_the_request_states(tools):
    # "set to" is one of the writer's connectors: the value is given, nothing is to be asked
    question, calls = _calls_of("Please add a new author with name set to 'Ada Lovelace'.", tools)
    assert not question
    assert calls == [("create_author", {"name": "Ada Lovelace"})]


def _create_tool(name: str, description: str, required: list[str], optional: list[str]) -> dict:
    props = {p: {"type": "string", "description": f"The {p.replace('_', ' ')}."} for p in required + optional}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


def test_a_derived_description_listing_parameters_does_not_make_another_tool_the_reading():
    # Mist's API: create_org keeps its spec's prose, create_org_mx_edge a derived description naming its
    # required parameters; "name" there is a parameter, not what the tool creates, so "create an org with
    # name ..." reads as create_org and nothing is asked
    tools = [
        _create_tool(
            "create_org",
            "Org admin can invite people to manage the org.",
            ["name"],
            ["created_time"],
        ),
        _create_tool(
            "create_org_mx_edge",
            "Creates an org mxedge. Requires its org ID, name and model.",
            ["org_id", "name", "model"],
            ["created_time"],
        ),
    ]
    question, calls = _calls_of("I'd like to create an org with name 'Design ORG', created time set to 17.", tools)
    assert not question
    assert calls == [("create_org", {"name": "Design ORG", "created_time": "17"})]
    question, _ = _calls_of("Create an org mxedge with org ID 'org_1', name 'Edge'.", tools)
    assert question == "Which model should I use?"


def test_a_missing_value_is_asked_once_and_the_answer_fills_it(tools):
    query = "Please add a new book. Then create a new calendar."
    question, calls = _calls_of(query, tools)
    assert question == "Which title should I use?" and malformed(question, "") is None and not calls
    answer = ProgrammaticUser().reply(
        question,
        UserContext(
            ({"name": "creer_calendrier", "arguments": {"title": "Team"}},),
            {},
            {"creer_calendrier": frozenset({"title"})},
        ),
    )
    assert answer == "The title is 'Team'."
    assert answered_value("title", {}, [answer]) == "'Team'"


def test_merged_and_flag_questions_read_as_a_person_writes_them():
    assert malformed("Which query and query should I use?", "The query is 'x'.")
    assert malformed("Which is active should I use?", "The is active is true.")
    question = clarification_question(
        ["title", "qr_no", "title", "is_active"], {"is_active": {"type": "boolean"}, "qr_no": {"type": "string"}}
    )
    assert question == "Which title and QR number should I use, and should it be active?"
    answers = [answer_sentence("qr_no", "Q-7"), answer_sentence("is_active", False)]
    assert answers == ["The QR number is 'Q-7'.", "No, it should not be active."]
    assert all(malformed(question, a) is None for a in answers)
    assert answered_value("qr_no", {"type": "string"}, answers) == "'Q-7'"
    assert answered_value("is_active", {"type": "boolean"}, answers) == "false"
    # the simulated user hears the question as it is asked
    context = UserContext(
        ({"name": "t", "arguments": {"title": "A", "qr_no": "Q-7", "is_active": False}},),
        {},
        {"t": frozenset({"title", "qr_no", "is_active"})},
    )
    assert ProgrammaticUser().reply(question, context) == (
        "The title is 'A'. The QR number is 'Q-7'. No, it should not be active."
    )


def _turn(query: str, arguments: dict, question: str, answer: str) -> dict:
    return {
        "query": query,
        "calls": [{"name": "search_projects", "arguments": arguments}],
        "clarification": [{"role": "assistant", "content": question}, {"role": "user", "content": answer}],
        "operators": [],
    }


def test_the_detector_finds_a_question_for_a_value_already_given():
    asked_again = _turn(
        "Search for projects matching 'Billing'.",
        {"query": "Billing"},
        "Which query should I use?",
        "The query is 'Billing'.",
    )
    missing = _turn(
        "Search the projects.", {"query": "Billing"}, "Which query should I use?", "The query is 'Billing'."
    )
    dated = _turn(
        "Add a task due 26 May 2026.", {"due": "2026-05-26"}, "Which due should I use?", "The due is '2026-05-26'."
    )
    assert [f["given"] for f in clarification_findings([asked_again])] == [["query"]]
    assert [f["given"] for f in clarification_findings([missing])] == [[]]
    assert [f["given"] for f in clarification_findings([dated])] == [["due"]]
    # a value an earlier turn gave counts as given too
    assert clarification_findings([{"query": "Find 'Billing' projects.", "calls": []}, missing])[0]["given"] == [
        "query"
    ]
    figures = clarification_figures(
        [{"id": "a", "status": "passed", "turns": [asked_again]}, {"id": "m", "status": "passed", "turns": [missing]}]
    )
    assert figures["questions"] == 2 and figures["asking_for_given"] == 1 and figures["asking_for_given_share"] == 0.5
    assert figures["examples"][0]["question"] == "Which query should I use?"


def test_field_names_in_user_text_are_found_and_the_writer_says_them():
    named = spoken_names(["qr_no", "b_id", "title", "book_id"])
    assert named == [("qr_no", "qr no"), ("b_id", "b id")]
    assert spec_identifiers("I need qr no 'Q-1' for it", named) == ["qr no"]
    assert spec_identifiers("list the objects in b id 'b_00001'", named) == ["b id"]
    assert spec_identifiers("use max_value 3 and orgUnit 'a_b', see /v1/items/{id}", named) == [
        "max_value",
        "orgUnit",
        "/v1/items/{id}",
    ]
    assert spec_identifiers("create a book with title 'my_file_name'", named) == []  # a quoted value is a value
    tool = {
        "name": "tickets_create",
        "kind": "create",
        "table": "tickets",
        "description": "Create a ticket",
        "input_schema": {"type": "object", "properties": {"qr_no": {"type": "string"}}, "required": ["qr_no"]},
    }
    texts = [describe_call(tool, "ticket_id", {"qr_no": "Q-1"}, rng=random.Random(i)) for i in range(20)]
    assert all("QR number 'Q-1'" in t or "QR number set to 'Q-1'" in t for t in texts), texts
    assert not any(spec_identifiers(t, named) for t in texts)
    spec = {
        "type": "function",
        "function": {"name": "tickets_create", "description": "Create a ticket", "parameters": tool["input_schema"]},
    }
    for text in texts[:5]:
        question, calls = _calls_of(text, [spec])
        assert not question and calls == [("tickets_create", {"qr_no": "Q-1"})], text


def test_a_field_name_with_an_initialism_is_written_in_capitals_and_read_back():
    # field names seen in the default run's specs ("color rgb", "need qr", "vm size" were written as the spec's
    # lowercase words, which no person writes)
    props = {
        "color_rgb": {"type": "string"},
        "need_qr": {"type": "boolean"},
        "vm_size": {"type": "string"},
        "wms_end_point": {"type": "string"},
        "mp4_support": {"type": "string"},
        "refresh_interval_s": {"type": "integer"},
    }
    args = {
        "color_rgb": "#577614",
        "need_qr": False,
        "vm_size": "Standard_B2ms",
        "wms_end_point": "imagine",
        "mp4_support": "standard",
        "refresh_interval_s": 15844,
    }
    tool = {
        "name": "drives_create",
        "kind": "create",
        "table": "drives",
        "description": "Create a drive",
        "input_schema": {"type": "object", "properties": props, "required": list(props)},
    }
    named = spoken_names(props)
    assert [said for _, said in named] == [
        "color rgb",
        "need qr",
        "vm size",
        "wms end point",
        "mp4 support",
        "refresh interval s",
    ]
    raw = describe_call(tool, "drive_id", args)
    texts = [describe_call(tool, "drive_id", args, rng=random.Random(i)) for i in range(20)]
    assert not any(spec_identifiers(t, named) for t in [raw, *texts]), [raw, *texts]
    assert all("color RGB" in t and "VM size" in t and "MP4 support" in t for t in [raw, *texts])
    assert all("refresh interval in seconds" in t for t in texts)
    assert spoken_field("account_sid") == "account SID" and spoken_field("address_guid") == "address GUID"
    spec = {
        "type": "function",
        "function": {"name": "drives_create", "description": "Create a drive", "parameters": tool["input_schema"]},
    }
    for text in [raw, *texts[:5]]:
        question, calls = _calls_of(text, [spec])
        assert not question and calls == [("drives_create", args)], text


def test_a_number_glued_to_a_field_word_is_set_apart_and_read_back():
    props = {
        "address_line1": {"type": "string"},
        "address_line2": {"type": "string"},
        "extra_phone1": {"type": "string"},
        "mp4_support": {"type": "boolean"},
    }
    args = {
        "address_line1": "1 Main St",
        "address_line2": "Flat 2",
        "extra_phone1": "+14666428545",
        "mp4_support": True,
    }
    tool = {
        "name": "contacts_create",
        "kind": "create",
        "table": "contacts",
        "description": "Create a contact",
        "input_schema": {"type": "object", "properties": props, "required": list(props)},
    }
    raw = describe_call(tool, "contact_id", args)
    texts = [describe_call(tool, "contact_id", args, rng=random.Random(i)) for i in range(20)]
    for text in [raw, *texts]:
        bare = re.sub(r"'[^']*'", " ", text)
        assert "address line 1" in bare and "extra phone 1" in bare and "MP4 support" in bare, text
        assert not re.search(r"\b(?:line|phone)\d", bare), text
    spec = {
        "type": "function",
        "function": {"name": "contacts_create", "description": "Create a contact", "parameters": tool["input_schema"]},
    }
    for text in [raw, *texts[:5]]:
        question, calls = _calls_of(text, [spec])
        assert not question and calls == [("contacts_create", args)], text


def test_a_word_shared_by_two_labels_or_a_one_letter_value_is_not_taken_for_a_given_value():
    # the request gives the contact's name; the question asks for the given name, which the answer states
    other_label = _turn(
        "Add a contact named 'Ada Lovelace'.",
        {"name": "Ada Lovelace", "first_name": "Ada"},
        "What given name should I use?",
        "Use 'Ada' as the given name.",
    )
    # 'a' quoted in the request is the section, not the query the question asks for
    short = _turn("Open section 'a' of the guide.", {"section": "a", "query": "a"}, "Which query?", "The query is 'a'.")
    assert [f["asked"] for f in clarification_findings([other_label])] == [["first_name"]]
    assert [f["given"] for f in clarification_findings([other_label])] == [[]]
    assert [f["given"] for f in clarification_findings([short])] == [[]]
    # the same letter right after the field's words was given
    said = _turn("Search with query 'a'.", {"query": "a"}, "Which query should I use?", "The query is 'a'.")
    assert [f["given"] for f in clarification_findings([said])] == [["query"]]


def test_a_kept_turn_carries_the_first_passing_exchange_that_asks_only_for_what_is_missing():
    from envfactory_assets.synth.refinement.calibrate import kept_dialogue

    turn = _turn("Search for projects matching 'Billing'.", {"query": "Billing"}, "", "")
    redundant = [
        {"role": "assistant", "content": "Which query should I use?"},
        {"role": "user", "content": "The query is 'Billing'."},
    ]
    solve = {
        "attempts": [
            {"passed": False, "dialogue": []},
            {"passed": True, "dialogue": redundant},
            {"passed": True, "dialogue": []},
        ]
    }
    assert kept_dialogue(solve, [], turn) == []
    # with no other passing attempt there is none to keep (the caller reverts an omission, or the gate reports)
    solve["attempts"].pop()
    assert kept_dialogue(solve, [], turn) is None
    missing = _turn("Search the projects.", {"query": "Billing"}, "", "")
    assert kept_dialogue(solve, [], missing) == redundant
    # a request that leaves the query out on purpose keeps only an exchange that asks for it
    missing["operators"] = [{"operator": "user_clarification", "argument": "query", "value": "Billing"}]
    silent = {"attempts": [{"passed": True, "dialogue": []}]}
    assert kept_dialogue(silent, [], missing) is None
    assert kept_dialogue({"attempts": [*silent["attempts"], *solve["attempts"]]}, [], missing) == redundant
