"""Side-effect actions (sending a message, pinging a webhook) on a fixture document written for them: what
extraction infers, what coverage counts, the outbox the environment gains, what the tools do in the sandbox, and
the verification gate rejecting a broken implementation."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfactory_assets.envgen.tools import OUTBOX_NAMES
from envfactory_assets.envgen.verify import verify_environment
from envfactory_assets.runtime.sandbox import SandboxWorker
from envfactory_assets.sources.coverage import operation_coverage, summarize
from envfactory_assets.sources.resources import extract_resources
from envfactory_assets.sources.side_effects import side_effect_verb
from envfactory_assets_tests.fixture_environments import (
    document_spec,
    environment_fixture,
    failed_checks,
    mutate,
    valid_state,
    variant_environment,
)

DOCUMENT = Path(__file__).parent / "fixtures" / "openapi_transfers" / "messaging.json"

hub = environment_fixture(DOCUMENT, "hub")


def _spec() -> dict:
    return document_spec(DOCUMENT)


def test_only_the_stated_verbs_are_side_effects():
    assert side_effect_verb("send") == side_effect_verb("Send") == "send"
    assert side_effect_verb("synchronize") == "sync"
    assert side_effect_verb("archive_logs") is None and side_effect_verb("cancel") is None
    resources = {r.name: r for r in extract_resources(_spec())}
    (send,) = resources["messages"].side_effects
    assert (send.verb, send.path) == ("send", "/messages/{message_id}/send")
    assert [(f.name, f.required) for f in send.arguments] == [("channel", True), ("priority", False)]
    assert [op.verb for op in resources["webhooks"].side_effects] == ["ping"]


def test_coverage_reports_side_effects_as_their_own_kind():
    coverage = {(c.method, c.path): c.kind or c.reason for c in operation_coverage(_spec())}
    assert coverage[("post", "/messages/{message_id}/send")] == "side_effect"
    assert coverage[("post", "/webhooks/{webhook_id}/ping")] == "side_effect"
    # a verb not on the list stays unmapped
    assert coverage[("post", "/messages/{message_id}/archive_logs")] == "action_without_state"
    assert summarize(operation_coverage(_spec()))["by_kind"]["side_effect"] == 2


def test_the_environment_gains_an_empty_outbox(hub):
    assert hub["tables"]["outbox"]["outbox"] and hub["tables"]["outbox"]["key"] == "outbox_id"
    assert all(s["state"]["tables"]["outbox"] == [] for s in hub["initial_states"] if s["expect"] == "load")
    send = next(t for t in hub["tools"] if t["name"] == "send_message")
    assert send["kind"] == "side_effect" and not send["read_only"]
    assert send["input_schema"]["required"] == ["message_id", "channel"]
    assert hub["state_schema"]["properties"]["tables"]["properties"]["outbox"]["items"]["required"][0] == "outbox_id"


def test_side_effect_tools_in_the_sandbox(hub):
    state = valid_state(hub)
    env_id = hub["env_id"]
    message = state["tables"]["messages"][0]
    with SandboxWorker() as worker:
        worker.load_environment(env_id, hub["source"])
        episode = worker.open_episode({env_id: state})
        sent = worker.call(episode, "send_message", {"message_id": message["message_id"], "channel": "sms"})
        assert sent["ok"], sent
        assert sent["output"] == {
            "outbox_id": f"out_{state['meta']['next_id']:05d}",
            "verb": "send",
            "target_table": "messages",
            "target_id": message["message_id"],
            "arguments": "[('channel', 'sms')]",
            "created_at": state["meta"]["now"],
        }
        after = worker.save(episode)[env_id]
        assert after["tables"]["messages"] == state["tables"]["messages"]  # the message itself is unchanged
        assert after["tables"]["outbox"] == [sent["output"]]
        bad = worker.call(episode, "send_message", {"message_id": message["message_id"], "channel": "pigeon"})
        missing = worker.call(episode, "send_message", {"message_id": "mes_99999", "channel": "sms"})
        assert bad["error"]["type"] == "bad_arguments" and missing["error"]["type"] == "not_found"
        assert worker.save(episode)[env_id] == after


def test_every_side_effect_tool_passes_the_gate(hub):
    report = verify_environment(hub)
    assert report.status == "passed", report.reasons
    passed = {(c.check, c.tool) for c in report.checks if c.passed}
    assert {("semantics", "send_message"), ("semantics", "ping_webhook"), ("tool_invalid", "send_message")} <= passed


@pytest.mark.parametrize(
    ("pattern", "replacement", "check", "tool_name"),
    [
        # a side effect that records nothing
        (r"    state\[\"tables\"\]\[outbox\]\[record\] = row\n", "", "semantics", "send_message"),
        # one that records the call without its arguments
        (r"repr\(sorted\(given\.items\(\)\)\)", "'[]'", "semantics", "send_message"),
        # one that changes its target row as well
        (
            r"    _row\(state, table, key\)\n",
            "    _row(state, table, key)['created_at'] = state['meta']['now']\n",
            "semantics",
            "ping_webhook",
        ),
        # one that records a call with a wrong-typed argument
        (r"        _check_schema\(name, schemas\[name\], value\)\n", "        pass\n", "tool_invalid", "send_message"),
    ],
    ids=["records-nothing", "records-no-arguments", "changes-the-target", "accepts-a-wrong-argument"],
)
def test_gate_rejects_a_broken_side_effect_implementation(hub, pattern, replacement, check, tool_name):
    assert (check, tool_name) in failed_checks(mutate(hub, pattern, replacement))


def test_a_required_argument_given_as_null_is_refused(hub):
    # the channel is required: a message "sent" on no channel is no send, and must record nothing
    state = valid_state(hub)
    message = state["tables"]["messages"][0]["message_id"]
    with SandboxWorker() as worker:
        worker.load_environment(hub["env_id"], hub["source"])
        episode = worker.open_episode({hub["env_id"]: state})
        saved = worker.save(episode)
        refused = worker.call(episode, "send_message", {"message_id": message, "channel": None})
        assert refused["error"]["type"] == "bad_arguments" and "channel" in refused["error"]["message"], refused
        assert worker.save(episode) == saved
        # an optional one given as null is left out of the record, as when it is not given
        sent = worker.call(episode, "send_message", {"message_id": message, "channel": "sms", "priority": None})
        assert sent["output"]["arguments"] == "[('channel', 'sms')]"


def test_gate_rejects_a_side_effect_that_records_a_null_required_argument(hub):
    lax = mutate(
        hub,
        r"    for name in required:\n        if given\.get\(name\) is None:\n",
        "    for name in ():\n        if 0:\n",
    )
    assert ("tool_invalid", "send_message") in failed_checks(lax)


def test_the_outbox_takes_a_free_name_when_the_document_has_every_usual_one(tmp_path):
    # a document whose own collections are outbox, outbox_records and call_outbox, beside the messages it sends
    spec = _spec()
    del (
        spec["paths"]["/webhooks"],
        spec["paths"]["/webhooks/{webhook_id}"],
        spec["paths"]["/webhooks/{webhook_id}/ping"],
    )
    del spec["paths"]["/webhooks/{webhook_id}/deliveries"]
    for name in OUTBOX_NAMES:
        ref = {"$ref": f"#/components/schemas/{name}"}
        ok = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}
        spec["components"]["schemas"][name] = {
            "type": "object",
            "required": ["subject"],
            "properties": {"subject": {"type": "string"}, "verb": {"type": "string"}},
        }
        spec["paths"][f"/{name}"] = {
            "post": {
                "operationId": f"create_{name}",
                "requestBody": {"content": {"application/json": {"schema": ref}}},
                "responses": ok,
            }
        }
        item = {"name": "item_id", "in": "path", "required": True, "schema": {"type": "string"}}
        spec["paths"][f"/{name}/{{item_id}}"] = {
            "parameters": [item],
            "get": {"operationId": f"get_{name}", "responses": ok},
        }
    env = variant_environment(spec, tmp_path / DOCUMENT.name)
    assert set(OUTBOX_NAMES) < set(env["tables"])
    (outbox,) = [t for t, meta in env["tables"].items() if meta.get("outbox")]
    assert outbox not in OUTBOX_NAMES
    assert next(t for t in env["tools"] if t["name"] == "send_message")["side_effect"]["outbox"] == outbox
    assert verify_environment(env).status == "passed"


def test_a_record_never_overwrites_a_row_the_state_holds(hub):
    # a state written by hand whose outbox already holds the id meta.next_id would mint: the old record stays
    state = valid_state(hub)
    message = state["tables"]["messages"][0]["message_id"]
    number = state["meta"]["next_id"]
    earlier = {
        "outbox_id": f"out_{number:05d}",
        "verb": "send",
        "target_table": "messages",
        "target_id": message,
        "arguments": "[('channel', 'email')]",
        "created_at": state["meta"]["now"],
    }
    state["tables"]["outbox"] = [earlier]
    with SandboxWorker() as worker:
        worker.load_environment(hub["env_id"], hub["source"])
        episode = worker.open_episode({hub["env_id"]: state})
        sent = worker.call(episode, "send_message", {"message_id": message, "channel": "sms"})
        assert sent["output"]["outbox_id"] == f"out_{number + 1:05d}", sent
        assert worker.save(episode)[hub["env_id"]]["tables"]["outbox"] == [earlier, sent["output"]]
