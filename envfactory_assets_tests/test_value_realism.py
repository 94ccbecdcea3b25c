"""Values a real user and a real API would have: the field-semantic checker against hand-labelled values,
and the seeded states and synthesized create/update arguments of the fixture environments judged by it."""

from __future__ import annotations

import ast
import datetime as dt
import json
import random
import zoneinfo
from pathlib import Path

import pytest

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
    config = {"ops": {"source_resources": {"config": {"corpus_dir": str(FIXTURES)}}}}
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
