"""How refinement names a row the hidden state holds, and that the solver reads every wording it writes."""

import random
import re

import pytest

from envfactory_assets.synth.refinement.operators import _state_reference
from envfactory_assets.synth.refinement.phrasing import COMMA_JOINTS, LAST_JOINTS, SENTENCE_JOINTS, join_sentences
from envfactory_assets.synth.refinement.solver.programmatic import _clauses, _resolve_reference
from envfactory_assets.synth.trajectories.conversation import _without
from envfactory_assets_tests.fixture_environments import corpus_environment

BOOKS = [
    {"book_id": "boo_00001", "title": "Dune", "city": "Rome", "shelf": "A", "stock": 3},
    {"book_id": "boo_00002", "title": "Emma", "city": "Oslo", "shelf": "B", "stock": 3},
    {"book_id": "boo_00003", "title": "Emma", "city": "Rome", "shelf": "B", "stock": 3},
]


class _Listing:
    """What the solver keeps of a tool result it saw (``action``, ``output``)."""

    action = "list"

    def __init__(self, rows):
        self.output = {"items": rows, "total": len(rows)}


def test_a_row_is_named_by_one_fact_when_one_picks_it_out():
    assert _state_reference(BOOKS, "book_id", "boo_00001", "books") == "the book whose title is 'Dune'"


def test_a_row_no_single_fact_picks_out_is_named_by_two_and_the_solver_finds_it():
    phrase = _state_reference(BOOKS, "book_id", "boo_00003", "books")
    assert phrase == "the book whose title is 'Emma' and whose city is 'Rome'"
    for seed in range(5):  # the two facts together leave one row: no attempt can pick another
        assert _resolve_reference(phrase, "book_id", [_Listing(BOOKS)], random.Random(seed)) == "boo_00003"


def test_a_row_named_by_its_etag_is_named_without_the_etags_double_quotes():
    # googleapis.com/storage.json buckets as the run's environment seeds them: the ETag holds its HTTP quotes
    buckets = [
        {"bucket_id": "buck_00001", "etag": '"7f945236ae67e16fbf87577a"', "location_type": "region"},
        {"bucket_id": "buck_00002", "etag": '"0c2b9fd99a6513f57607cde6"', "location_type": "region"},
    ]
    phrase = _state_reference(buckets, "bucket_id", "buck_00002", "buckets")
    # "the bucket whose etag is '"0c2b9fd99a6513f57607cde6"'" read as quotes inside quotes
    assert phrase == "the bucket whose etag is '0c2b9fd99a6513f57607cde6'"
    quoted = "the bucket whose etag is '\"0c2b9fd99a6513f57607cde6\"'"  # as an earlier writer put it
    for seed in range(5):
        for said in (phrase, quoted):
            assert _resolve_reference(said, "bucket_id", [_Listing(buckets)], random.Random(seed)) == "buck_00002"


def test_a_row_no_pair_of_facts_picks_out_is_not_described():
    twins = [
        {"book_id": "boo_00001", "title": "Emma", "city": "Rome"},
        {"book_id": "boo_00002", "title": "Emma", "city": "Rome"},
    ]
    assert _state_reference(twins, "book_id", "boo_00002", "books") is None


def test_what_an_earlier_call_of_the_turn_wrote_does_not_describe_the_row():
    # another row may hold 'Dune' by now: the row is named by a fact nothing wrote
    assert _state_reference(BOOKS, "book_id", "boo_00001", "books", [{"title": "Dune"}]) == (
        "the book whose shelf is 'A'"
    )
    assert _state_reference(BOOKS, "book_id", "boo_00001", "books", [{"title": "Dune", "shelf": "A"}]) is None
    # the row itself was written earlier in the turn: it may no longer look as the state says
    assert _state_reference(BOOKS, "book_id", "boo_00001", "books", [{"book_id": "boo_00001", "stock": 9}]) is None
    # a write that touched neither the row nor the fact leaves the description as it was
    assert _state_reference(BOOKS, "book_id", "boo_00001", "books", [{"title": "Persuasion"}]) == (
        "the book whose title is 'Dune'"
    )


@pytest.mark.parametrize("seed", range(40))
def test_the_solver_splits_a_message_at_every_connective_phrasing_joins_with(seed):
    parts = [
        "delete book 'boo_00001'",
        "show me the books where city is 'Rome'",
        "count the authors",
        "create a new book with title 'Emma' and stock 3",
    ]
    joined = _clauses(join_sentences(parts, random.Random(seed)))
    assert [joined[0][0].lower() + joined[0][1:], *joined[1:]] == parts


def test_every_connective_is_one_the_solver_knows():
    for joint in (*COMMA_JOINTS, *LAST_JOINTS):
        text = (", " if joint[0].islower() else ". ") + joint + " "
        assert _clauses("delete book 'boo_00001'" + text + "count the authors") == [
            "delete book 'boo_00001'",
            "count the authors",
        ], joint
    for joint in SENTENCE_JOINTS:
        assert _clauses(f"delete book 'boo_00001'. {joint} count the authors") == [
            "delete book 'boo_00001'",
            "count the authors",
        ], joint


@pytest.mark.parametrize(
    ("query", "segment", "expected"),
    [
        ("Add a book with title 'Dune' and price 9.", "title 'Dune'", "Add a book with price 9."),
        (
            "Add a book with title 'Dune', price 9 and stock 3, and afterwards delete it.",
            "stock 3",
            "Add a book with title 'Dune', price 9, and afterwards delete it.",
        ),
        ("Add a book with title 'Dune', price 9 and stock 3.", "price 9", "Add a book with title 'Dune' and stock 3."),
        (
            "Add a book with title 'Dune', and following that, count the books.",
            "title 'Dune'",
            "Add a book, and following that, count the books.",
        ),
    ],
)
def test_a_value_left_for_the_user_to_give_leaves_a_list_that_still_reads(query, segment, expected):
    assert _without(query, segment) == expected


@pytest.fixture(scope="module")
def bookshop_tools():
    from envfactory_assets_tests.fixture_environments import build_fixture_environment

    env = build_fixture_environment("bookshop.json")
    return env, {t["name"]: t for t in env["tools"]}


@pytest.mark.parametrize("seed", range(30))
def test_the_solver_reads_every_way_a_create_request_pairs_a_field_with_its_value(bookshop_tools, seed):
    from envfactory_assets.envgen.tools import openai_tool
    from envfactory_assets.synth.refinement.phrasing import describe_call
    from envfactory_assets.synth.refinement.solver.base import SolverView
    from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver

    env, tools = bookshop_tools
    args = {
        "title": "Dune",
        "author_id": "aut_00002",
        "genre": "fiction",
        "price": 9.5,
        "in_stock": True,
        "published": "2024-05-01",
    }
    query = describe_call(tools["books_create"], "book_id", args, rng=random.Random(seed))
    calls = []

    def call(name, arguments):
        calls.append((name, arguments))
        return {"ok": True, "output": {"book_id": "boo_00009", **arguments}}

    ProgrammaticSolver().attempt(
        SolverView.for_turn([], query[0].upper() + query[1:] + ".", tuple(openai_tool(t) for t in env["tools"])),
        call,
        seed,
    )
    assert calls == [("books_create", args)], query


def test_create_requests_use_every_field_value_pairing():
    from envfactory_assets.synth.refinement.phrasing import describe_call
    from envfactory_assets_tests.fixture_environments import build_fixture_environment

    tool = next(t for t in build_fixture_environment("bookshop.json")["tools"] if t["name"] == "books_create")
    texts = [describe_call(tool, "book_id", {"title": "Dune", "price": 9.5}, rng=random.Random(s)) for s in range(60)]
    assert any("title set to 'Dune'" in t for t in texts) and any("price of 9.5" in t for t in texts)
    assert any("title 'Dune'" in t for t in texts)
    assert describe_call(tool, "book_id", {"title": "Dune", "price": 9.5}) == (
        "create a new book with title 'Dune', price 9.5"
    )  # the raw query keeps one plain form


@pytest.mark.parametrize("seed", range(30))
def test_the_solver_reads_every_way_a_list_request_states_its_filters(bookshop_tools, seed):
    from envfactory_assets.envgen.tools import openai_tool
    from envfactory_assets.synth.refinement.phrasing import describe_call
    from envfactory_assets.synth.refinement.solver.base import SolverView
    from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver

    env, tools = bookshop_tools
    args = {"genre": "fiction", "in_stock": False}
    query = describe_call(tools["books_list"], "book_id", args, rng=random.Random(seed))
    calls = []

    def call(name, arguments):
        calls.append((name, arguments))
        return {"ok": True, "output": {"items": [], "total": 0}}

    ProgrammaticSolver().attempt(
        SolverView.for_turn([], query[0].upper() + query[1:] + ".", tuple(openai_tool(t) for t in env["tools"])),
        call,
        seed,
    )
    assert calls == [("books_list", args)], query


@pytest.mark.parametrize(
    "value",
    ["2025-03-20T21:40:00Z", "2025-03-20T00:05:00Z", "2025-12-01T12:00:00Z", "2024-02-29", "2025-07-04T09:07:00Z"],
)
def test_every_way_a_date_is_written_reads_back_as_the_same_value(value):
    from envfactory_assets.synth.refinement.phrasing import parse_spoken_value, spoken_forms, spoken_value

    forms = spoken_forms(value)
    assert len(forms) == (2 if len(value) == 10 else 4)
    assert {parse_spoken_value(f) for f in forms} == {value}
    assert {spoken_value(value, None, random.Random(s)) for s in range(60)} == forms


@pytest.mark.parametrize(
    "text",
    [
        "31 February 2025",
        "February 30, 2025",
        "1 May 2025 at 13:05 PM UTC",
        "1 May 2025 at 0:05 AM UTC",
        "1 May 2025 at 24:00 UTC",
        "May 1 2025",
    ],
)
def test_a_date_no_calendar_has_is_not_read_as_one(text):
    from envfactory_assets.synth.refinement.phrasing import parse_spoken_value

    assert parse_spoken_value(text) is None


@pytest.mark.parametrize(
    "value", ["2025-02-31", "2025-04-31", "2025-03-00", "2025-03-01T25:61:00Z", "2025-03-01T24:00:00Z"]
)
def test_a_date_like_text_no_calendar_has_is_stated_as_written(value):
    """Text shaped like a date that no calendar has ("2025-02-31") is a value like any other: said as a date
    it could not be read back into the call, so every form is the quoted text itself."""
    from envfactory_assets.synth.refinement.phrasing import spoken_forms, spoken_value

    assert spoken_forms(value) == {f"'{value}'"}
    assert {spoken_value(value, None, random.Random(s)) for s in range(20)} == {f"'{value}'"}


def test_a_value_an_earlier_action_of_the_turn_set_does_not_describe_the_row():
    # cancel_order(order_id='ord_2') takes only the key but makes ord_2 'cancelled' as well: ord_1 is no
    # longer "the order whose status is 'cancelled'"
    from envfactory_assets.synth.refinement.operators import _what_it_wrote

    orders = [
        {"order_id": "ord_1", "status": "cancelled", "total": 5},
        {"order_id": "ord_2", "status": "open", "total": 5},
        {"order_id": "ord_3", "status": "open", "total": 7},
    ]
    cancel = {
        "name": "cancel_order",
        "kind": "action",
        "table": "orders",
        "action": {"verb": "cancel", "field": "status", "value": "cancelled", "blocked": []},
    }
    wrote = _what_it_wrote(cancel, {"order_id": "ord_2"})
    assert wrote == {"order_id": "ord_2", "status": "cancelled"}
    assert _state_reference(orders, "order_id", "ord_1", "orders") == "the order whose status is 'cancelled'"
    assert _state_reference(orders, "order_id", "ord_1", "orders", [wrote]) is None
    # other writes are their arguments
    assert _what_it_wrote({"kind": "update", "table": "orders"}, {"order_id": "ord_3", "total": 9}) == {
        "order_id": "ord_3",
        "total": 9,
    }


@pytest.mark.parametrize(
    "title",
    [
        "Salt, then pepper",
        "Mr. Next, Mrs. Then",
        "Tea, and finally cake",
        "Ask. Also go",
        "A list of the best",
        "The list of all things",
    ],
)
def test_a_quoted_value_holding_a_connective_or_list_of_is_read_whole(bookshop_tools, title):
    # the solver splits requests and rewrites "a list of the" outside quoted values only
    from envfactory_assets.envgen.tools import openai_tool
    from envfactory_assets.synth.refinement.solver.base import SolverView
    from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver

    env, _ = bookshop_tools
    query = f"Create a new book with author id 'aut_00001', title '{title}' and genre 'fiction', then count the books."
    assert _clauses(query) == [query.split(", then count")[0], "count the books"]
    calls = []

    def call(name, arguments):
        calls.append((name, arguments))
        return {"ok": True, "output": {"book_id": "boo_00009", **arguments}}

    ProgrammaticSolver().attempt(SolverView.for_turn([], query, tuple(openai_tool(t) for t in env["tools"])), call, 0)
    assert calls[0] == ("books_create", {"author_id": "aut_00001", "title": title, "genre": "fiction"})


@pytest.mark.parametrize("name", ["Country of 5", "Country set to yes", "Country 5"])
def test_a_label_inside_another_fields_quoted_value_fills_nothing(bookshop_tools, name):
    from envfactory_assets.envgen.tools import openai_tool
    from envfactory_assets.synth.refinement.solver.base import SolverView
    from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver

    env, _ = bookshop_tools
    calls = []

    def call(tool, arguments):
        calls.append((tool, arguments))
        return {"ok": True, "output": {"author_id": "aut_00009", **arguments}}

    query = f"Create a new author with name '{name}' and email 'a@b.c'."
    ProgrammaticSolver().attempt(SolverView.for_turn([], query, tuple(openai_tool(t) for t in env["tools"])), call, 0)
    assert calls == [("create_author", {"name": name, "email": "a@b.c"})]


def _cad_bank_accounts_turn(env: dict, query: str) -> dict:
    """A turn of billingo's environment ``env`` listing the bank accounts in 'CAD', asked as ``query``, on the
    environment's valid state."""
    from envfactory_assets_tests.fixture_environments import valid_state

    call = {
        "name": "list_bank_account",
        "env_id": env["env_id"],
        "kind": "list",
        "arguments": {"currency": "CAD"},
        "provenance": {"currency": {"source": "user"}},
        "output": {"items": [], "total": 0},
    }
    return {"query": query, "calls": [call], "state_before": {env["env_id"]: valid_state(env)}}


@pytest.mark.corpus
def test_a_filtered_list_keeps_its_filter_and_names_its_rows_in_the_plural():
    # billingo's "List all bank account" summary, asked with a currency filter the operator turns into an
    # adjective: the request must still say which currency and name the accounts in the plural
    from envfactory_assets.synth.refinement.operators import refine_turns

    env = corpus_environment("billingo.hu.json")
    turn = _cad_bank_accounts_turn(env, "Show me the bank accounts where currency is 'CAD'.")
    queries = [refine_turns([turn], {env["env_id"]: env}, seed=str(s))[0][0]["query"] for s in range(60)]
    assert any(q.startswith("List all ") for q in queries), "the spec's summary plan was never drawn"
    assert not [q for q in queries if re.search(r"bank account\b", q)]
    assert all("CAD" in q for q in queries), [q for q in queries if "CAD" not in q]


def test_a_persona_opening_a_conversation_introduces_themselves():
    # a persona is a role ("an online shopper"): "it's an online shopper" names a thing, not the person
    from envfactory_assets.synth.refinement.phrasing import shape_for_persona

    for persona in ("an online shopper", "a finance analyst"):
        texts = [shape_for_persona("list the shipping policies.", persona, True, random.Random(s)) for s in range(200)]
        assert any(f"I'm {persona}" in t or f"I am {persona}" in t for t in texts)
        assert not [t for t in texts if re.search(r"\bit's an? ", t)], persona


@pytest.mark.corpus
@pytest.mark.parametrize("disabled", [True, False])
def test_an_update_asks_for_a_flag_as_how_the_row_is_and_the_solver_reads_it(disabled):
    # traccar's device has a "disabled" flag: "so that its disabled is yes" names no field a person says
    from envfactory_assets.envgen.tools import openai_tool
    from envfactory_assets.synth.refinement.phrasing import describe_call
    from envfactory_assets.synth.refinement.solver.base import SolverView
    from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver

    env = corpus_environment("traccar.org.json")
    tool = next(t for t in env["tools"] if t["name"] == "update_device")
    args = {"device_id": "dev_00025", "category": "logistics", "disabled": disabled, "model": "LS-1479"}
    specs = tuple(openai_tool(t) for t in env["tools"])
    asked = [describe_call(tool, "device_id", args, rng=random.Random(s)) for s in range(40)]
    so_that = [q for q in asked if " so that " in q]
    assert so_that, asked
    assert not [q for q in so_that if "its disabled is" in q]
    assert all(("it is disabled" if disabled else "it is not disabled") in q for q in so_that), so_that
    for seed, query in enumerate(so_that):
        calls = []

        def call(name, arguments, calls=calls):
            calls.append((name, arguments))
            return {"ok": True, "output": {**arguments}}

        ProgrammaticSolver().attempt(SolverView.for_turn([], query[0].upper() + query[1:] + ".", specs), call, seed)
        assert calls == [("update_device", args)], query


@pytest.mark.corpus
def test_a_filter_the_drawn_plan_cannot_say_as_an_adjective_stays_a_filter():
    # a summary naming the rows in other words ("list all accounts" of bank_accounts) has no "bank accounts"
    # to put "'CAD'" before: the currency is then asked as a filter and no implicit constraint is recorded
    import copy

    from envfactory_assets.synth.refinement.operators import refine_turns

    env = copy.deepcopy(corpus_environment("billingo.hu.json"))
    next(t for t in env["tools"] if t["name"] == "list_bank_account")["description"] = "List all account"
    turn = _cad_bank_accounts_turn(env, "x")
    refined = [refine_turns([turn], {env["env_id"]: env}, seed=str(s)) for s in range(60)]
    stated = [t[0]["query"] for t, ops in refined if not ops]
    assert stated, "the summary plan was never drawn"
    assert all("currency" in q and "'CAD'" in q for q in stated), stated
    assert all("CAD" in t[0]["query"] for t, _ in refined)
