"""Values by what the field is: the field-semantic check on fields that name a format or a kind of thing
(an ISBN, an ISO country code, an ETag, coordinates, a place, a unit...), the share of generated values it
covers, and the generator giving such fields values of their kind."""

from __future__ import annotations

import pytest

from envfactory_assets.envgen.values import ValueFactory
from envfactory_assets.quality.value_semantics import (
    check_value,
    coverage_figures,
    generated_arguments,
    is_random_word,
    isbn_valid,
)

TEXT = {"type": "string"}


def test_an_isbn_field_with_a_random_word_fails_as_a_random_word():
    judgement = check_value("isbn", TEXT, "just")
    assert judgement.verdict == "fail" and judgement.defect == "random word"
    assert check_value("isbn", TEXT, "978-0-306-40615-7").verdict == "pass"
    assert check_value("isbn", TEXT, "978-0-306-40615-8").verdict == "fail"  # wrong check digit
    assert check_value("isbn_10", TEXT, "0-306-40615-2").verdict == "pass"
    # the description names the kind where the name does not
    assert check_value("book_code", TEXT, "force", "The ISBN-13 of the book.").verdict == "fail"


def test_an_iso_alpha3_field_with_a_country_name_fails():
    judgement = check_value("country_iso_code_alpha3", TEXT, "Curaçao")
    assert judgement.verdict == "fail" and judgement.defect == "wrong kind"
    assert check_value("country_iso_code_alpha3", TEXT, "CUW").verdict == "pass"
    assert check_value("country_iso_code_alpha3", TEXT, "CW").verdict == "fail"
    assert check_value("country_code", TEXT, "Germany").verdict == "fail"
    assert check_value("country_code", TEXT, "DE").verdict == "pass"
    assert check_value("country", TEXT, "Germany").verdict == "pass"


@pytest.mark.parametrize(
    ("field", "value", "defect"),
    [
        ("etag", "force", "random word"),
        ("location", "character", "random word"),
        ("coordinate_format", "threat", "random word"),
        ("org_unit_id", "hours", "random word"),
        ("unit", "threat", "random word"),
        ("colour", "force", "random word"),
        ("coordinates", "north", "random word"),
        ("description", "Lorem ipsum dolor sit amet, consectetur adipiscing elit.", "placeholder"),
        ("isbn", "string", "placeholder"),
        ("mime_type", "Report.pdf", "wrong kind"),
        ("schedule", "finally", "random word"),  # described as cron syntax (below)
        ("created_by", "arrive", "random word"),
        ("manufacturer", "those", "random word"),
        ("decimal_separator", "dot", "random word"),
    ],
)
def test_values_that_are_not_of_their_fields_kind_fail_with_what_is_wrong(field, value, defect):
    judgement = check_value(field, TEXT, value, "Schedule CRON syntax." if field == "schedule" else "")
    assert (judgement.verdict, judgement.defect) == ("fail", defect), judgement


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("etag", '"33a64df551425fcc55e4d42a148795d9f25f89d4"'),
        ("etag", 'W/"0815"'),
        ("location", "Lisbon"),
        ("location", "Lisbon, Portugal"),
        ("location", "221B Baker Street, London"),
        ("location", "Conference Room B"),
        ("coordinate_format", "dms"),
        ("coordinates", "38.7223,-9.1393"),
        ("latitude", "38.7223"),
        ("org_unit_id", "ou_00042"),
        ("unit", "kg"),
        ("units", "metric"),
        ("colour", "#1a2b3c"),
        ("colour", "teal"),
        ("uuid", "c2d6a8f0-6a1e-4c5b-9d1e-0a4f3b2c1d0e"),
        ("cron", "*/15 9-17 * * MON-FRI"),
        ("cron", "@daily"),
        ("cron", "0 0 12 ? * WED"),  # Quartz, with seconds
        ("created_by", "Mary Carter"),
        ("created_by", "kevin19@example.org"),
        ("owner", "usr_00042"),
        ("manufacturer", "Lopez, Carson and Hicks"),
        ("manufacturer", "Beck-Williams"),
        ("decimal_separator", ","),
        ("icon", "https://example.com/images/pin.png"),
    ],
)
def test_values_of_their_fields_kind_pass(field, value):
    assert check_value(field, TEXT, value).verdict == "pass"


def test_an_icon_named_in_words_is_not_judged_as_a_link():
    assert check_value("icon", TEXT, "restaurant").verdict == "unknown"
    assert check_value("icon", TEXT, "https://exa mple.com/x.png").verdict == "fail"


def test_a_number_the_description_calls_an_identifier_is_a_whole_number():
    integer = {"type": "integer"}
    for desc in ("Doctor ID", "ID of this appointment's patient.", "Index of the exam room"):
        assert check_value("doctor", integer, 130, desc).verdict == "pass", desc
        assert check_value("doctor", integer, -3, desc).verdict == "fail", desc
    assert check_value("contract_id", {"type": "number"}, 906.86).verdict == "fail"
    assert check_value("contract_id", {"type": "number"}, 906.0).verdict == "pass"
    # a count of identifiers is a count, and a number described otherwise is not judged here
    assert check_value("doctor", integer, 3, "ID count of doctors").verdict == "unknown"
    assert check_value("doctor", integer, 3, "How many doctors").verdict == "unknown"
    # a fraction the description calls an index is a measure, not an identifier
    assert check_value("refraction_index", {"type": "number"}, 1.33, "Index of refraction").verdict == "unknown"


def test_a_cron_number_out_of_its_fields_range_fails_and_an_organisation_id_is_no_name():
    cron = "Cron expression"
    assert check_value("schedule", TEXT, "61 25 * * *", cron).verdict == "fail"
    assert check_value("schedule", TEXT, "0 0 12 * * ? 2025", cron).verdict == "pass"  # Quartz, seconds and year
    assert check_value("schedule", TEXT, "*/15 0-23 1 1,6 0-7", cron).verdict == "pass"
    assert check_value("organization", TEXT, "org_123", "Organisation ID").verdict != "fail"


def test_a_rule_covers_only_kinds_narrower_than_free_text_and_the_rest_is_unknown():
    items = [
        ("isbn", TEXT, "just", ""),
        ("isbn", TEXT, "9780306406157", ""),
        ("timezone", TEXT, "Europe/Lisbon", ""),
        ("trigger_value", TEXT, "local", ""),  # nothing says what it holds
        ("query", TEXT, "Lisbon", ""),
    ]
    figures = coverage_figures(items)
    assert figures["values"] == 5 and figures["covered"] == 3 and figures["unknown"] == 2
    assert figures["unknown_share"] == 0.4
    assert figures["random_words"] == 1 and figures["random_word_share"] == round(1 / 3, 4)
    assert figures["top_unknown_fields"] == {"trigger_value": 1, "query": 1}


def test_generated_arguments_are_the_values_the_user_gave():
    env = {
        "bookshop": {
            "tools": [
                {
                    "name": "create_book",
                    "input_schema": {
                        "properties": {
                            "isbn": {"type": "string", "description": "ISBN-13"},
                            "author_id": {"type": "string"},
                            "tags": {"type": "array", "items": {"type": "string"}},
                        }
                    },
                }
            ]
        }
    }
    call = {
        "name": "create_book",
        "env_id": "bookshop",
        "arguments": {"isbn": "just", "author_id": "aut_00001", "tags": ["a", "b"]},
        "provenance": {"isbn": {"source": "user"}, "author_id": {"source": "state"}, "tags": {"source": "user"}},
    }
    got = generated_arguments([{"id": "t1", "turns": [{"calls": [call]}]}], env)
    assert [(a["field"], a["value"], a["description"]) for a in got] == [
        ("isbn", "just", "ISBN-13"),
        ("tags", "a", ""),
        ("tags", "b", ""),
    ]


def test_isbn_check_digits():
    assert isbn_valid("ISBN 978-3-16-148410-0") and isbn_valid("080442957X")
    assert not isbn_valid("9783161484101") and not isbn_valid("just")
    assert is_random_word("force") and not is_random_word("Force Majeure") and not is_random_word("kg2")


# Fields whose name or description implies a kind of thing, as tool schemas of the default run write them.
KIND_FIELDS = [
    ("isbn", TEXT, "books", ""),
    ("isbn13", TEXT, "books", ""),
    ("book_code", {"type": "string", "description": "The ISBN of the book"}, "books", ""),
    ("etag", TEXT, "documents", ""),
    ("if_match", TEXT, "documents", "ETag of the version to replace"),
    ("country_iso_code_alpha3", TEXT, "countries", ""),
    ("country_alpha2", TEXT, "addresses", ""),
    ("country_code", TEXT, "addresses", ""),
    ("coordinates", TEXT, "places", ""),
    ("latitude", TEXT, "stations", ""),
    ("location", TEXT, "events", ""),
    ("venue", TEXT, "events", ""),
    ("destination", TEXT, "trips", ""),
    ("coordinate_format", TEXT, "geocodes", ""),
    ("response_format", TEXT, "reports", ""),
    ("org_unit_id", TEXT, "users", ""),
    ("unit", TEXT, "measurements", ""),
    ("colour", TEXT, "labels", ""),
    ("uuid", TEXT, "devices", ""),
    ("mime_type", TEXT, "files", ""),
    ("timezone", TEXT, "users", ""),
    ("website", TEXT, "companies", ""),
    ("contact_email", TEXT, "companies", ""),
    ("phone_number", TEXT, "contacts", ""),
    ("currency", TEXT, "prices", ""),
    ("language_code", TEXT, "users", ""),
    ("city", TEXT, "offices", ""),
    ("street_address", TEXT, "offices", ""),
    ("start_date", {"type": "string", "format": "date"}, "events", ""),
    ("schedule", TEXT, "functions", "Schedule CRON syntax."),
    ("contract_id", {"type": "number"}, "contracts", "The internal identifier of the trading product"),
    ("last_time_location", {"type": "string", "format": "uri"}, "devices", ""),
]


@pytest.mark.parametrize(("field", "schema", "table", "desc"), KIND_FIELDS, ids=[f[0] for f in KIND_FIELDS])
def test_the_generator_gives_a_field_a_value_of_the_kind_it_names(field, schema, table, desc):
    values = ValueFactory(36)
    for _ in range(25):
        value = values.value(field, schema, table, desc, future=True)
        judgement = check_value(field, schema, value, desc or schema.get("description", ""))
        assert judgement.verdict == "pass", (value, judgement)
