"""Value kinds of tool parameters: what a parameter holds, from its name, type, format and description.

The expected kinds below are hand labels of parameters as they occur in the corpus's APIs (names and
descriptions copied in shape from real OpenAPI documents), not outputs of the classifier.
"""

from __future__ import annotations

import pytest

from envfactory_assets.graph.parameters import (
    SHARED_KINDS,
    VALUE_KINDS,
    edge_value_kind,
    extract_input_parameters,
    value_family,
    value_kind,
)


def _param(name: str, schema: dict):
    tool = {
        "env_id": "e",
        "name": "t",
        "input_schema": {"type": "object", "properties": {name: schema}},
        "output_schema": {"type": "object", "properties": {}},
    }
    (p,) = extract_input_parameters(tool)
    return p


def s(description: str = "", **extra) -> dict:
    return {"type": "string", "description": description, **extra}


LABELLED = [
    # identifiers: issued by the API
    ("company_id", s("Unique identifier of the company"), "identifier"),
    ("applicationId", s("Application identifier"), "identifier"),
    ("app_id", s("Identifier of the app"), "identifier"),
    ("account_sid", s("The SID of the Account that created the resource"), "identifier"),
    ("owner", s("Owner", format="uuid"), "identifier"),
    ("next_page_token", s("Token for the next page"), "identifier"),
    ("self", s("Link to this resource in the API", format="uri"), "identifier"),
    ("contact_ids", {"type": "array", "items": {"type": "string"}}, "identifier"),
    # e-mail addresses, phones, links
    ("email", s("Email address of the contact"), "email"),
    ("to", s("Recipient email address", format="email"), "email"),
    ("recipient_email_address", s("The email address where alerts will be sent."), "email"),
    ("phone_number", s("The phone number in E.164 format"), "phone"),
    ("mobile", s("mobile"), "phone"),
    ("website_url", s("A URL for this business."), "url"),
    ("callback", s("Where to send events", format="uri"), "url"),
    # people's and companies' names
    ("first_name", s("First name of employee"), "person_name"),
    ("lastname", s("Last name of the user"), "person_name"),
    ("name", s("Full name of the contact person"), "person_name"),
    ("passenger_name", s("Passenger name as it would appear on the ticket"), "person_name"),
    ("company_name", s("The name of the company."), "organization"),
    ("name", s("The company name."), "organization"),
    # dates: events versus a record's own bookkeeping
    ("due_date", s("Payment due date", format="date"), "datetime"),
    ("start_time", s("Event start time", format="date-time"), "datetime"),
    ("date_of_birth", s("Birth date", format="date"), "datetime"),
    ("scheduled_time", s("When the job runs"), "datetime"),
    ("created_at", s("When the row was created", format="date-time"), "record_time"),
    ("date_updated", s("Last update", format="date-time"), "record_time"),
    ("updated_date_utc", s("Last modified timestamp"), "record_time"),
    # places, amounts, codes
    ("city", s("The city."), "place"),
    ("postal_code", s("The postal code."), "place"),
    ("address_line1", s("Address line 1."), "place"),
    ("lat", {"type": "number", "description": "Latitude of POI"}, "place"),
    ("state", s("The state or province of the address"), "place"),
    ("ip_address", s("An IP address in dotted decimal notation"), "other"),
    ("amount_cents", {"type": "integer", "description": "Invoice total in cents"}, "money"),
    ("price", {"type": "number", "description": "price"}, "money"),
    ("balance", {"type": "number", "description": "Balance of bill due."}, "money"),
    ("currency", s("Three-letter ISO currency code", enum=["usd", "eur"]), "code"),
    ("country_code", s("The ISO2 code of the country"), "code"),
    ("language", s("Dataset language."), "code"),
    ("time_zone", s("The time zone of the account holder"), "code"),
    # free text and the rest
    ("subject", s("Subject line of the email"), "free_text"),
    ("description", s("The Function description."), "free_text"),
    ("name", s("Name of the dataset."), "free_text"),
    ("name", s("User-provided name for a compliance job."), "free_text"),
    ("query", s("Search query over subject and body"), "free_text"),
    ("status", s("Ticket status", enum=["open", "closed"]), "other"),
    ("type", s("Type of dataset data."), "other"),
    ("total", {"type": "integer", "description": "Total number of matching companies"}, "other"),
    ("limit", {"type": "integer", "description": "Maximum number of results"}, "other"),
    ("archived", {"type": "boolean", "description": "Whether the row is archived"}, "other"),
    ("password", s("The user's password"), "other"),
    ("restocking_fee_percentage", s("Deprecated"), "other"),
    ("region", s("Region where the instance runs, e.g. us-east"), "other"),
]


@pytest.mark.parametrize("name,schema,kind", LABELLED, ids=[f"{n}:{k}" for n, _, k in LABELLED])
def test_value_kind_matches_the_hand_label(name, schema, kind):
    assert kind in VALUE_KINDS
    assert value_kind(_param(name, schema)) == kind


def test_labels_cover_every_kind():
    assert {k for _, _, k in LABELLED} == set(VALUE_KINDS)


def test_edge_kind_and_families():
    assert edge_value_kind("email", "email") == "email"
    assert edge_value_kind("identifier", "free_text") == edge_value_kind("other", "identifier") == "identifier"
    assert edge_value_kind("datetime", "other") == "mixed" and "mixed" not in SHARED_KINDS
    assert "identifier" not in SHARED_KINDS and "free_text" not in SHARED_KINDS and "record_time" not in SHARED_KINDS
    fam = {
        n: value_family(_param(n, sch))
        for n, sch in [
            ("email", s("Email")),
            ("to", s("Recipient", format="email")),
            ("first_name", s("First name")),
            ("given_name", s("Given name of the person")),
            ("currency", s("ISO currency")),
            ("country", s("Country")),
            ("due_date", s("Due", format="date")),
            ("end_time", s("End", format="date-time")),
            ("created_at", s("Created", format="date-time")),
            ("website_url", s("Site")),
            ("city", s("City")),
        ]
    }
    assert fam["email"] == fam["to"] == "email"
    assert fam["first_name"] == fam["given_name"] == "person_name:first"
    assert fam["currency"] == "code:currency" != fam["country"]
    assert fam["due_date"] == fam["end_time"] == "datetime:end"
    assert fam["created_at"] is None and fam["website_url"] is None and fam["city"] == "place:city"
