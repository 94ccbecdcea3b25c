"""Table names as a person says them (no "payments 2", "b" or "rateplans"), and the solver reading them back.

The fixture ``openapi_names/storage.json`` is shaped like Google Cloud Storage: buckets live at ``/b/{bucket}``
and objects at ``/b/{bucket}/o/{object}`` (segments no person says: the tables and keys are named by the path
parameters, ``buckets``/``bucket_id`` and ``object_id``), bucket and object ACLs both end in ``/acl`` (told apart
by their parents: ``bucket_acl`` and ``object_acl``), and rate plans sit at ``/rateplans`` with operations named
``listRatePlans``.
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest

from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.envgen.tools import openai_tool
from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.sources.names import (
    name_nouns,
    plural,
    singular,
    speakable,
    split_glued,
    spoken_thing,
    spoken_things,
)
from envfactory_assets.sources.scan import inspect_file
from envfactory_assets.synth.refinement.expansion import expand_goal
from envfactory_assets.synth.refinement.phrasing import describe_call, spoken_tables
from envfactory_assets.synth.refinement.replies import write_reply
from envfactory_assets.synth.refinement.solver.base import SolverView
from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver
from envfactory_assets.synth.trajectories.execution import ToolIndex
from envfactory_assets_tests.fixture_environments import environment_worker

FIXTURES = Path(__file__).parent / "fixtures" / "openapi_names"


@pytest.fixture(scope="module")
def storage_env() -> dict:
    resource = inspect_file(FIXTURES / "storage.json", FIXTURES)
    return build_environment(resource.as_row(), orjson.loads((FIXTURES / "storage.json").read_bytes()))


def test_name_rules_on_words():
    assert spoken_thing("payments_2") == "payment" and spoken_things("payments_2") == "payments"
    assert singular("aliases") == "alias" and spoken_thing("email_aliases") == "email alias"
    assert spoken_things("aliases") == "aliases"
    assert plural("bucket") == "buckets" and plural("buckets") == "buckets" and plural("address") == "addresses"
    assert plural("policy") == "policies" and singular("anywhere_caches") == "anywhere_cache"
    assert singular("send_as") == "send_as"
    assert not speakable("b") and not speakable("v4_7") and not speakable("o") and speakable("acl_2")
    assert name_nouns("storage.buckets.list") == ["storage", "buckets"]
    assert name_nouns("Gets a shipment details") == ["shipment"]
    bigrams = {("rate", "plans"), ("job", "schedule")}
    assert split_glued("rateplans", bigrams) == ["rate", "plans"]
    assert split_glued("jobschedules", bigrams) == ["job", "schedules"]
    assert split_glued("webhooks", bigrams) == ["webhooks"]  # the spec never writes "web hooks"
    # a version glued to a path word (FinSpace's /datasetsv2) is not said; ipv4 and dev1 are words of their own
    assert spoken_thing("datasetsv2") == "dataset" and spoken_things("changesetsv2") == "changesets"
    assert spoken_thing("ipv4_range") == "ipv4 range" and spoken_thing("dev1") == "dev1"


def test_tables_are_named_by_the_specs_own_words(storage_env):
    assert set(storage_env["tables"]) == {"buckets", "bucket_acl", "object_acl", "rateplans"}
    assert storage_env["tables"]["buckets"]["key"] == "bucket_id"
    inputs = {t["name"]: set(t["input_schema"]["properties"]) for t in storage_env["tools"]}
    assert "object_id" in inputs["storage_object_access_controls_insert"]  # the parent {object}, not "o"
    assert "bucket_id" in inputs["storage_bucket_access_controls_insert"]
    names = spoken_tables(storage_env["tools"])
    # a glued table name splits; the rest are already words
    assert names == {
        "buckets": "buckets",
        "rateplans": "rate_plans",
        "bucket_acl": "bucket_acl",
        "object_acl": "object_acl",
    }
    assert [spoken_thing(names[t]) for t in ("buckets", "rateplans", "bucket_acl", "object_acl")] == [
        "bucket",
        "rate plan",
        "bucket acl",
        "object acl",
    ]
    assert spoken_things(names["object_acl"]) == "object acls"


def test_the_queries_speak_the_tables_and_keys_in_words(storage_env):
    index = ToolIndex({storage_env["env_id"]: storage_env})
    get_bucket, get_oacl = index.tools["storage_buckets_get"], index.tools["storage_object_access_controls_get"]
    texts = [describe_call(get_bucket, "bucket_id", {"bucket_id": "buc_00001"}, rng=random.Random(s)) for s in range(6)]
    assert all("bucket 'buc_00001'" in t for t in texts), texts
    listing = describe_call(index.tools["storage_list_rate_plans"], "rateplan_id", {}, rng=random.Random(0))
    assert "rate plans" in listing and "rateplans" not in listing
    oacl = describe_call(get_oacl, "object_acl_id", {"object_acl_id": "obj_00003"}, rng=random.Random(1))
    assert "object acl 'obj_00003'" in oacl and " 2" not in oacl
    listed = describe_call(
        index.tools["storage_object_access_controls_list"],
        "object_acl_id",
        {"object_id": "obj_00009"},
        rng=random.Random(2),
    )
    assert "o id" not in listed and " o " not in listed, listed
    got = {"name": "storage_buckets_get", "arguments": {"bucket_id": "buc_1"}, "output": {"bucket_id": "buc_1"}}
    replies = [write_reply([got], index.tools, index.key_of, f"s{s}") for s in range(8)]
    assert all("bucket buc_1" in r.lower() for r in replies), replies


def _solve(tools, query, outputs, seed):
    calls = []

    def call(name, args):
        calls.append((name, args))
        return {"ok": True, "output": outputs.get(name, {})}

    ProgrammaticSolver().attempt(SolverView.for_turn([], query, tools), call, seed=seed)
    return calls


def test_the_solver_finds_the_tool_and_row_by_the_spoken_names(storage_env):
    index = ToolIndex({storage_env["env_id"]: storage_env})
    specs = tuple(openai_tool(t) for t in storage_env["tools"])
    buckets = {
        "items": [{"bucket_id": "buc_00001", "name": "Logs"}, {"bucket_id": "buc_00002", "name": "Media"}],
        "total": 2,
    }
    for seed in range(6):
        rng = random.Random(seed)
        for tool, key, args in (
            ("storage_buckets_get", "bucket_id", {"bucket_id": "buc_00002"}),
            ("storage_buckets_delete", "bucket_id", {"bucket_id": "buc_00002"}),
            ("storage_object_access_controls_get", "object_acl_id", {"object_acl_id": "obj_00003"}),
            ("storage_bucket_access_controls_get", "bucket_acl_id", {"bucket_acl_id": "buc_00004"}),
            ("storage_get_rate_plan", "rateplan_id", {"rateplan_id": "rat_00005"}),
        ):
            text = describe_call(index.tools[tool], key, args, rng=rng)
            query = text[0].upper() + text[1:] + "."
            assert _solve(specs, query, {}, seed) == [(tool, args)], query
        # a row named by what the user knows of it: the solver lists the buckets, then reads the one named Media
        refs = {"bucket_id": "the bucket whose name is 'Media'"}
        text = describe_call(
            index.tools["storage_bucket_access_controls_list"],
            "bucket_acl_id",
            {"bucket_id": "buc_00002"},
            refs,
            rng=rng,
        )
        calls = _solve(specs, text[0].upper() + text[1:] + ".", {"storage_buckets_list": buckets}, seed)
        assert calls[0][0] == "storage_buckets_list", (text, calls)
        assert calls[-1] == ("storage_bucket_access_controls_list", {"bucket_id": "buc_00002"}), (text, calls)


def test_goal_expansion_names_the_tables_as_a_person_says_them(storage_env):
    # an access control written to a bucket: the follow-up reads the bucket it belongs to, in words
    envs = {storage_env["env_id"]: storage_env}
    with environment_worker(envs) as worker:
        valid = next(st["state"] for st in storage_env["initial_states"] if st["name"] == "valid")
        episode = worker.open_episode({storage_env["env_id"]: valid})
        bucket = worker.call(episode, "storage_buckets_insert", {"name": "logs", "location": "EU"})
        arguments = {"bucket_id": bucket["output"]["bucket_id"], "name": "reader", "role": "READER"}
        acl = worker.call(episode, "storage_bucket_access_controls_insert", arguments)
        assert bucket["ok"] and acl["ok"], (bucket, acl)
        state = worker.save(episode)
        worker.close_episode(episode)
        request = "Please add a bucket access control named 'reader' with role 'READER'."
        turn = {
            "turn_index": 0,
            "query": request,
            "query_raw": request,
            "calls": [
                {"name": "storage_bucket_access_controls_insert", "kind": "create", "arguments": arguments}
                | {"output": acl["output"], "env_id": storage_env["env_id"]}
            ],
            "state_after": state,
            "state_after_hash": state_hash(state),
            "intent": [],
            "target_tools": [],
            "assistant_summary": "Done.",
            "operators": [],
        }
        new = expand_goal(turn, envs, worker, 0)
    assert new is not None
    assert new["calls"][-1]["name"] == "storage_buckets_get"
    assert "look up the bucket it belongs to" in new["query"], new["query"]
    assert " b " not in new["query"] and " b " not in new["query_raw"]


def test_a_table_of_ids_is_said_as_ids_once():
    from envfactory_assets.sources.names import singular, spoken_thing, spoken_things

    # a table named "ids" read "Create a ids." and "the idses"
    assert (spoken_thing("ids"), spoken_things("ids")) == ("id", "ids")
    assert (spoken_thing("user_ids"), spoken_things("user_ids")) == ("user id", "user ids")
    assert spoken_thing("ips") == "ip" and spoken_things("bus") == "buses"
    assert singular("ids") == "ids"  # names made from the table stay as they were


def test_a_description_phrase_of_generic_words_labels_no_field():
    # Google Storage's bucket default_event_based_hold, "The default value for event-based hold on newly created
    # objects in this bucket.": a request that says "with default value no" names no field
    from envfactory_assets.synth.refinement.phrasing import field_labels
    from envfactory_assets_tests.fixture_environments import corpus_environment

    env = corpus_environment("googleapis.com/storage.json")
    create = next(t for t in env["tools"] if t["kind"] == "create" and t["table"] == "buckets")
    schema = create["input_schema"]["properties"]["default_event_based_hold"]
    assert schema["description"].startswith("The default value for event-based hold")
    assert field_labels("default_event_based_hold", schema) == ["default event based hold"]
    # a phrase that names the field more fully is still a label, and so is a generic word the name says too
    assert field_labels("name", {"type": "string", "description": "Full name of the author."}) == ["name", "full name"]
    value = {"type": "number", "description": "Declared value of the parcel."}
    assert field_labels("value", value) == ["value", "declared value"]
