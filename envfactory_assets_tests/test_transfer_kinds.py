"""Transfers of an amount between rows of one table (money between bank accounts, stock between bins) and
computed reads of the same rows (an account's balance, the stock summary) on a fixture document written for them:
what extraction infers, what coverage counts, what the environment does in the sandbox, and the verification gate
rejecting a broken implementation of each transfer and computed read."""

from __future__ import annotations

import copy
import random
from pathlib import Path

import pytest

from envfactory_assets.envgen.tools import openai_tool
from envfactory_assets.envgen.verify import computed_figures, moved, verify_environment
from envfactory_assets.quality.reply_facts import reply_problems
from envfactory_assets.runtime.sandbox import SandboxWorker, StateRejected
from envfactory_assets.sources.coverage import operation_coverage, summarize
from envfactory_assets.sources.resources import extract_resources
from envfactory_assets.sources.transfers import TransferShape, balance_field, transfer_shape
from envfactory_assets.synth.datasets.rows import replay_check, rl_rows
from envfactory_assets.synth.refinement.phrasing import describe_call
from envfactory_assets.synth.refinement.solver.programmatic import read_tools
from envfactory_assets.synth.sampling.sampler import SamplerConfig, sample_chains
from envfactory_assets.synth.trajectories.execution import SynthConfig, synthesize_trajectory
from envfactory_assets_tests.fixture_environments import (
    document_environment,
    document_spec,
    environment_fixture,
    environment_worker,
    failed_checks,
    failed_semantics,
    fixture_graph,
    mutate,
    states_where,
    valid_state,
    variant_environment,
)

TRANSFERS = Path(__file__).parent / "fixtures" / "openapi_transfers"
SERVICES = Path(__file__).parent / "fixtures" / "openapi_services"
DOCUMENT = TRANSFERS / "ledger.json"

ledger = environment_fixture(DOCUMENT, "ledger")


def _spec() -> dict:
    return document_spec(DOCUMENT)


def test_extraction_reads_transfer_paths_with_an_amount():
    resources = {r.name: r for r in extract_resources(_spec())}
    assert set(resources) == {"accounts", "bins"}
    shapes = {
        (t.path, t.transfer.verb, t.transfer.amount, t.transfer.destination) for t in resources["accounts"].transfers
    }
    assert shapes == {
        ("/accounts/{account_id}/transfers", "transfer", "amount", "destination_account"),
        ("/accounts/{account_id}/withdraw", "withdraw", "amount", None),
        ("/accounts/{account_id}/deposit", "deposit", "amount", None),
    }
    (move,) = resources["bins"].transfers
    assert (move.transfer.verb, move.transfer.amount, move.transfer.destination) == ("transfer", "quantity", "to_bin")


def test_transfer_shapes_and_balance_fields():
    # a transfer without a destination takes the amount out of the row; no amount, no transfer
    assert transfer_shape("transfers", ["amount", "memo"]).verb == "withdraw"
    assert transfer_shape("transfers", ["memo"]) is None
    assert transfer_shape("restart", ["amount"]) is None
    assert transfer_shape("topUp", ["credits"]).verb == "deposit"
    # the balance is a numeric field named like one, kept non-negative unless the API states a minimum
    assert balance_field({"name": {"type": "string"}, "stock": {"type": "integer"}}) == (
        "stock",
        {"type": "integer", "minimum": 0},
        False,
    )
    assert balance_field({"available_balance": {"type": "number", "minimum": -500}})[1]["minimum"] == -500
    assert balance_field({"name": {"type": "string"}}) == ("balance", {"type": "number", "minimum": 0}, True)


def test_a_sub_collection_with_rows_of_its_own_stays_a_nested_resource():
    # the savings goals' deposits have an item path and a list: deposit records, not a balance change
    spec = document_spec(SERVICES / "savings_goals.json")
    resources = {r.name: r for r in extract_resources(spec)}
    assert "deposits" in resources and all(not r.transfers for r in resources.values())


def test_coverage_counts_transfer_operations_as_mapped():
    coverage = operation_coverage(_spec())
    kinds = {(c.method, c.path): c.kind or c.reason for c in coverage}
    assert kinds[("post", "/accounts/{account_id}/transfers")] == "transfer"
    assert kinds[("post", "/bins/{bin_id}/transfer")] == "transfer"
    assert kinds[("post", "/bins/{bin_id}/recount")] == "action_without_state"
    assert summarize(coverage)["by_kind"]["transfer"] == 4
    assert kinds[("get", "/accounts/{account_id}/balance")] == kinds[("get", "/bins/summary")] == "computed_read"
    assert summarize(coverage)["by_kind"]["computed_read"] == 2


def test_the_built_environment_has_transfer_tools(ledger):
    tools = {t["name"]: t for t in ledger["tools"] if t["kind"] == "transfer"}
    assert {n: t["transfer"]["verb"] for n, t in tools.items()} == {
        "transfer_funds": "transfer",
        "withdraw_funds": "withdraw",
        "deposit_funds": "deposit",
        "move_stock": "transfer",
    }
    move = tools["move_stock"]
    assert move["input_schema"]["required"] == ["bin_id", "to_bin", "quantity"]
    assert move["input_schema"]["properties"]["quantity"]["type"] == "integer"
    # the stock field of the bins gets its floor: no bin holds fewer than 0 units
    assert ledger["tables"]["bins"]["fields"]["quantity"] == {"type": "integer", "minimum": 0}
    assert not move["read_only"]


def test_transfer_tools_in_the_sandbox(ledger):
    # a float balance is stored rounded to 9 decimals (moved): 288.77 - 80.48 reads 208.29
    state = valid_state(ledger)
    env_id = ledger["env_id"]
    first, second = state["tables"]["accounts"][:2]
    a, b = first["account_id"], second["account_id"]
    with SandboxWorker() as worker:
        worker.load_environment(env_id, ledger["source"])
        episode = worker.open_episode({env_id: state})

        def call(name, **args):
            return worker.call(episode, name, args)

        made = call("transfer_funds", account_id=a, destination_account=b, amount=10)
        assert made["ok"], made
        out = made["output"]
        assert out["source"]["balance"] == moved(first["balance"], -10)
        assert out["destination"]["balance"] == moved(second["balance"], 10) and out["amount"] == 10
        saved = worker.save(episode)
        # more than the account holds: refused, typed, and neither account changes
        too_much = call("transfer_funds", account_id=a, destination_account=b, amount=first["balance"])
        assert too_much["error"]["type"] == "precondition_failed"
        assert too_much["error"]["message"].startswith("insufficient balance")
        assert worker.save(episode) == saved
        # a destination that does not exist: nothing is debited
        gone = call("transfer_funds", account_id=a, destination_account="acc_99999", amount=1)
        assert gone["error"]["type"] == "not_found" and worker.save(episode) == saved
        for bad in (0, -5, True, "ten", float("inf")):
            assert call("withdraw_funds", account_id=a, amount=bad)["error"]["type"] == "bad_arguments"
        assert call("transfer_funds", account_id=a, destination_account=a, amount=1)["error"]["type"] == "bad_arguments"
        assert worker.save(episode) == saved
        # a deposit past the balance's stated maximum is refused too
        assert call("deposit_funds", account_id=a, amount=1_000_000)["error"]["type"] == "precondition_failed"
        assert call("deposit_funds", account_id=a, amount=5)["output"]["balance"] == moved(
            moved(first["balance"], -10), 5
        )
        # integer stock moves in whole units only
        bins = state["tables"]["bins"]
        assert call("move_stock", bin_id=bins[0]["bin_id"], to_bin=bins[1]["bin_id"], quantity=0.5)["error"][
            "type"
        ] == ("bad_arguments")


def test_a_state_with_a_negative_balance_is_rejected(ledger):
    negative = valid_state(ledger)
    negative["tables"]["bins"][0]["quantity"] = -1
    with SandboxWorker() as worker:
        worker.load_environment(ledger["env_id"], ledger["source"])
        with pytest.raises(StateRejected, match="quantity must be >= 0"):
            worker.open_episode({ledger["env_id"]: negative})


def test_every_transfer_tool_passes_the_gate_with_its_checks(ledger):
    report = verify_environment(ledger)
    assert report.status == "passed", report.reasons
    passed = {(c.check, c.tool) for c in report.checks if c.passed}
    for name in ("transfer_funds", "withdraw_funds", "deposit_funds", "move_stock"):
        assert {("semantics", name), ("invariant", name), ("tool_invalid", name)} <= passed


@pytest.mark.parametrize(
    ("pattern", "replacement", "check", "tool_name"),
    [
        # a transfer that debits the source without crediting the destination: the sum is not conserved
        (r"    rows\[to\] = \{\*\*target, field: received\}\n", "", "semantics", "transfer_funds"),
        # a transfer that lets a balance go negative
        (
            r'if "minimum" in schema and new < schema\["minimum"\]:',
            "if False:",
            "invariant",
            "transfer_funds",
        ),
        # a transfer that writes the debit before it finds the destination: not atomic on refusal
        (
            r"    target = _row\(state, table, to\)\n",
            "    rows[key] = {**source, field: left}\n    target = _row(state, table, to)\n",
            "tool_invalid",
            "transfer_funds",
        ),
        # an amount of 0 or below accepted (a negative transfer moves money backwards)
        (r" or not amount > 0:", ":", "tool_invalid", "move_stock"),
        # a withdrawal that adds instead of taking
        (
            r"left = _moved\(table, key, source, field, -amount, words\)",
            "left = _moved(table, key, source, field, amount, words)",
            "semantics",
            "withdraw_funds",
        ),
        # a deposit that ignores the balance's maximum
        (
            r'if "maximum" in schema and new > schema\["maximum"\]:',
            "if False:",
            "invariant",
            "deposit_funds",
        ),
    ],
    ids=[
        "debits-without-crediting",
        "allows-a-negative-balance",
        "debits-before-finding-the-destination",
        "accepts-a-non-positive-amount",
        "withdraw-adds",
        "deposit-past-the-maximum",
    ],
)
def test_gate_rejects_a_broken_transfer_implementation(ledger, pattern, replacement, check, tool_name):
    assert (check, tool_name) in failed_checks(mutate(ledger, pattern, replacement))


def test_a_transfer_no_state_can_check_fails_the_gate(ledger):
    def empty_bins(state: dict) -> None:
        state["tables"]["bins"] = [dict(r, quantity=0) for r in state["tables"]["bins"]]

    failed = failed_semantics(states_where(ledger, empty_bins))
    assert "no loadable initial state has the rows of bins to check transfer on" in failed["move_stock"]


def test_computed_reads_are_derived_from_the_rows(ledger):
    tools = {t["name"]: t for t in ledger["tools"] if t["kind"] == "computed_read"}
    assert {n: t["computed"]["scope"] for n, t in tools.items()} == {
        "get_account_balance": "item",
        "get_stock_summary": "collection",
    }
    assert all(t["read_only"] for t in tools.values())
    assert list(tools["get_stock_summary"]["output_schema"]["properties"]) == ["count", "total_quantity"]
    state = valid_state(ledger)
    env_id = ledger["env_id"]
    bins = state["tables"]["bins"]
    account = state["tables"]["accounts"][0]
    with SandboxWorker() as worker:
        worker.load_environment(env_id, ledger["source"])
        episode = worker.open_episode({env_id: state})

        def call(name, **args):
            result = worker.call(episode, name, args)
            assert result["ok"], result
            return result["output"]

        units = sum(b.get("quantity") or 0 for b in bins)
        assert call("get_stock_summary") == {"count": len(bins), "total_quantity": units}
        assert call("get_account_balance", account_id=account["account_id"]) == {
            "account_id": account["account_id"],
            "balance": account["balance"],
        }
        # a move of stock between bins leaves the total as it was; a withdrawal lowers the balance read
        source = max(bins, key=lambda b: b.get("quantity") or 0)
        target = next(b for b in bins if b is not source)
        call("move_stock", bin_id=source["bin_id"], to_bin=target["bin_id"], quantity=1)
        assert call("get_stock_summary")["total_quantity"] == units
        call("withdraw_funds", account_id=account["account_id"], amount=1)
        balance = call("get_account_balance", account_id=account["account_id"])["balance"]
        assert balance == moved(account["balance"], -1)
        call("create_bin", label="Overflow shelf", quantity=5)
        assert call("get_stock_summary") == {"count": len(bins) + 1, "total_quantity": units + 5}


def test_every_computed_read_passes_the_gate_with_its_derived_check(ledger):
    report = verify_environment(ledger)
    passed = {(c.check, c.tool) for c in report.checks if c.passed}
    for name in ("get_account_balance", "get_stock_summary"):
        assert {("semantics", name), ("derived", name)} <= passed


def _constant(ledger: dict, function: str, args: dict) -> dict:
    """``ledger`` whose helper ``function`` returns what the tool gives on the valid state, whatever the state."""
    tool = next(t for t in ledger["tools"] if t["kind"] == "computed_read" and t["computed"]["scope"] == args["scope"])
    call = {k: v for k, v in args.items() if k != "scope"}
    value = computed_figures(ledger, tool, call, valid_state(ledger))
    return mutate(ledger, rf"def {function}\(([^)]*)\):\n", rf"def {function}(\1):\n    return {value!r}\n")


def test_gate_rejects_computed_reads_that_return_a_constant(ledger):
    summary = _constant(ledger, "_totals", {"scope": "collection"})
    assert ("derived", "get_stock_summary") in failed_checks(summary)
    account = valid_state(ledger)["tables"]["accounts"][-1]["account_id"]
    balance = _constant(ledger, "_figures", {"scope": "item", "account_id": account})
    assert ("derived", "get_account_balance") in failed_checks(balance)


def test_gate_rejects_a_summary_that_counts_without_summing(ledger):
    broken = mutate(ledger, r"sum\(r\[field\] for r in rows if r\.get\(field\) is not None\)", "0")
    assert ("semantics", "get_stock_summary") in failed_checks(broken)


def test_trajectories_use_the_new_kinds_on_rows_the_state_holds(ledger):
    hub = document_environment(TRANSFERS / "messaging.json")
    envs = {ledger["env_id"]: ledger, hub["env_id"]: hub}
    graph = fixture_graph(envs)
    with environment_worker(envs) as worker:
        chains = sample_chains(graph, 20, "new-kinds", SamplerConfig(min_tools=3))
        trajs = [synthesize_trajectory(c, graph, envs, worker, SynthConfig(min_turns=2)) for c in chains]
        passed = [{**t, "id": f"raw-{i}", "domains": ["x"]} for i, t in enumerate(trajs) if t["status"] == "passed"]
        calls = [(turn, c) for t in passed for turn in t["turns"] for c in turn["calls"]]
        assert {"transfer", "side_effect", "computed_read"} <= {c["kind"] for _, c in calls}
        for turn, call in calls:
            assert reply_problems(turn["assistant_summary"], turn["calls"]) == []
            tool = next(t for e in envs.values() for t in e["tools"] if t["name"] == call["name"])
            if call["kind"] == "transfer" and tool["transfer"]["destination"]:
                # the destination is a row of the table, never a made-up value
                rows = turn["state_before"][ledger["env_id"]]["tables"][tool["table"]]
                key = ledger["tables"][tool["table"]]["key"]
                assert call["arguments"][tool["transfer"]["destination"]] in {r[key] for r in rows}
        for traj in passed:
            for row in rl_rows(traj, envs):
                problem = replay_check(row, worker)
                assert problem is None or problem.startswith("no-op task"), problem


@pytest.fixture(scope="module")
def unbounded(tmp_path_factory) -> dict:
    # the ledger whose balances state no maximum
    spec = _spec()
    del spec["components"]["schemas"]["Account"]["properties"]["balance"]["maximum"]
    return variant_environment(spec, tmp_path_factory.mktemp("unbounded") / DOCUMENT.name)


def test_a_balance_stays_a_number_json_carries(unbounded):
    # 1e308 twice is inf, which no state can save; an integer past 64 bits cannot be sent back either
    state = valid_state(unbounded)
    account = state["tables"]["accounts"][0]["account_id"]
    other, held = state["tables"]["accounts"][1]["account_id"], state["tables"]["accounts"][1]["balance"]
    with SandboxWorker() as worker:
        worker.load_environment(unbounded["env_id"], unbounded["source"])
        episode = worker.open_episode({unbounded["env_id"]: state})
        saved = worker.save(episode)
        for amount in (1e308, 2**53, 2**62):
            refused = worker.call(episode, "deposit_funds", {"account_id": account, "amount": amount})
            assert refused["error"]["type"] == "precondition_failed", refused
            assert "at most" in refused["error"]["message"]
        assert worker.save(episode) == saved
        # nor may a transfer push its destination past the limit
        near = worker.call(episode, "deposit_funds", {"account_id": other, "amount": 2**53 - 50 - int(held) - 1})
        assert near["ok"], near
        pushed = worker.call(
            episode, "transfer_funds", {"account_id": account, "destination_account": other, "amount": 100}
        )
        assert pushed["error"]["type"] == "precondition_failed", pushed


def test_an_amount_finer_than_the_stored_decimals_is_refused(ledger):
    # a balance keeps 9 decimals: 1e-10 would move nothing yet succeed, and an amount of more decimals is
    # rounded differently on its two rows (106.74 - 78.16089588349993 and 1184.13 + it gain 1e-9 together)
    state = valid_state(ledger)
    first, second = state["tables"]["accounts"][:2]
    with SandboxWorker() as worker:
        worker.load_environment(ledger["env_id"], ledger["source"])
        episode = worker.open_episode({ledger["env_id"]: state})
        saved = worker.save(episode)
        for amount in (1e-10, 0.1 + 0.2, 78.16089588349993):
            args = {"account_id": first["account_id"], "destination_account": second["account_id"], "amount": amount}
            refused = worker.call(episode, "transfer_funds", args)
            assert refused["error"]["type"] == "bad_arguments", refused
            assert "9 decimals" in refused["error"]["message"]
        assert worker.save(episode) == saved
        made = worker.call(episode, "withdraw_funds", {"account_id": first["account_id"], "amount": 0.123456789})
        assert made["output"]["balance"] == moved(first["balance"], -0.123456789)


def test_the_gate_checks_the_limit_and_the_decimals(unbounded):
    report = verify_environment(unbounded)
    assert report.status == "passed", report.reasons
    passed = {(c.check, c.tool) for c in report.checks if c.passed}
    assert {("invariant", "deposit_funds"), ("tool_invalid", "withdraw_funds")} <= passed
    unlimited = mutate(unbounded, r"abs\(new\) > _BALANCE_LIMIT", "False")
    assert ("invariant", "deposit_funds") in failed_checks(unlimited)
    coarse = mutate(unbounded, r"round\(amount, 9\) != amount", "False")
    assert ("tool_invalid", "withdraw_funds") in failed_checks(coarse)


def test_a_transfer_is_checked_on_a_destination_with_little_room(ledger):
    # every account near the stated maximum of 1,000,000: half of the richest one fits nowhere, a smaller amount does
    full = copy.deepcopy(ledger)
    for initial in full["initial_states"]:
        if initial["expect"] == "load":
            rows = initial["state"]["tables"]["accounts"]
            for i, row in enumerate(rows):
                row["balance"] = 999_990.0 - i
    report = verify_environment(full)
    passed = {(c.check, c.tool) for c in report.checks if c.passed}
    assert {("semantics", "transfer_funds"), ("invariant", "transfer_funds")} <= passed, report.reasons


def test_a_total_of_decimal_figures_has_no_binary_residue(tmp_path):
    # 0.1 + 0.2 is 0.30000000000000004 in binary floats; a total is kept to the 9 decimals of a balance
    spec = _spec()
    spec["paths"]["/accounts/totals"] = {
        "get": {"operationId": "getAccountTotals", "summary": "Totals over the bank accounts.", "responses": {}}
    }
    env = variant_environment(spec, tmp_path / DOCUMENT.name)
    state = valid_state(env)
    state["tables"]["accounts"] = state["tables"]["accounts"][:3]
    for row, balance in zip(state["tables"]["accounts"], (0.1, 0.2, 0.4), strict=True):
        row["balance"] = balance
    with SandboxWorker() as worker:
        worker.load_environment(env["env_id"], env["source"])
        episode = worker.open_episode({env["env_id"]: state})
        totals = worker.call(episode, "get_account_totals", {})
    assert totals["output"]["total_balance"] == 0.7, totals
    tool = next(t for t in env["tools"] if t["name"] == "get_account_totals")
    assert computed_figures(env, tool, {}, state)["total_balance"] == 0.7


def test_the_gate_asks_for_amounts_of_at_most_9_decimals(ledger):
    # 3.69 + 0.5 is 4.1899999999999995 in binary floats: asked so, the refusal would be for its decimals, not
    # for the balance
    held = copy.deepcopy(ledger)
    for initial in held["initial_states"]:
        if initial["expect"] == "load":
            for i, row in enumerate(initial["state"]["tables"]["accounts"]):
                row["balance"] = 3.69 if i == 0 else 1.0
    report = verify_environment(held)
    passed = {(c.check, c.tool) for c in report.checks if c.passed}
    assert {("invariant", "transfer_funds"), ("invariant", "withdraw_funds")} <= passed, report.reasons


def test_a_destination_is_a_name_that_can_hold_a_row():
    # a target date, a recipient's e-mail or a payee's name says when or to whom, not which row: no destination
    for names in (["amount", "target_date"], ["amount", "recipient_email"], ["amount", "payee_name"]):
        assert transfer_shape("transfers", names) == TransferShape("withdraw", "amount", None), names
    assert transfer_shape("transfers", ["amount", "target_date", "to_account"]).destination == "to_account"
    assert transfer_shape("transfers", ["to", "amount"]).destination == "to"


def test_a_bad_destination_is_named_in_the_error(ledger):
    # the error names the argument that is wrong, and a transfer to itself is refused as such whatever the amount
    state = valid_state(ledger)
    account = state["tables"]["accounts"][0]
    with SandboxWorker() as worker:
        worker.load_environment(ledger["env_id"], ledger["source"])
        episode = worker.open_episode({ledger["env_id"]: state})
        for to in (None, 12, [account["account_id"]]):
            args = {"account_id": account["account_id"], "destination_account": to, "amount": 1}
            error = worker.call(episode, "transfer_funds", args)["error"]
            assert error["type"] == "bad_arguments" and "destination_account" in error["message"], error
        args = {"account_id": account["account_id"], "destination_account": account["account_id"], "amount": 10**9}
        error = worker.call(episode, "transfer_funds", args)["error"]
        assert error["type"] == "bad_arguments" and "itself" in error["message"], error


@pytest.fixture(scope="module")
def pockets(tmp_path_factory) -> dict:
    # the ledger whose accounts hold savings pockets, with the totals of one account's pockets
    spec = _spec()
    account = [{"name": "account_id", "in": "path", "required": True, "schema": {"type": "string"}}]
    ref = {"$ref": "#/components/schemas/Pocket"}
    one = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}
    many = {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "array", "items": ref}}}}}
    spec["components"]["schemas"]["Pocket"] = {
        "type": "object",
        "required": ["label"],
        "properties": {"label": {"type": "string"}, "saved": {"type": "number", "minimum": 0, "maximum": 5000}},
    }
    spec["paths"]["/accounts/{account_id}/pockets"] = {
        "parameters": account,
        "get": {"operationId": "listPockets", "responses": many},
        "post": {
            "operationId": "createPocket",
            "requestBody": {"content": {"application/json": {"schema": ref}}},
            "responses": one,
        },
    }
    item = [*account, {"name": "pocket_id", "in": "path", "required": True, "schema": {"type": "string"}}]
    spec["paths"]["/accounts/{account_id}/pockets/{pocket_id}"] = {
        "parameters": item,
        "get": {"operationId": "getPocket", "responses": one},
    }
    spec["paths"]["/accounts/{account_id}/pockets/summary"] = {
        "parameters": account,
        "get": {"operationId": "getPocketSummary", "summary": "Totals of the pockets of an account.", "responses": {}},
    }
    return variant_environment(spec, tmp_path_factory.mktemp("pockets") / DOCUMENT.name)


def test_the_totals_of_a_parent_filtered_by_is_set_to_are_solved_with_the_computed_read(pockets):
    # "could you sum up the pockets where account ID is set to 'acc_1'" asks for no change: "is set" names
    # the filter's state, so the solver's best tool is the totals, not update_account
    tool = next(t for t in pockets["tools"] if t["name"] == "get_pocket_summary")
    toolset = read_tools([openai_tool(t) for t in pockets["tools"]])
    requests = {describe_call(tool, "pocket_id", {"account_id": "acc_00001"}, rng=random.Random(s)) for s in range(80)}
    filtered = [r for r in requests if " is set to " in r]
    assert len(filtered) >= 3, requests
    for request in requests:
        scored = sorted(toolset.scores(request), key=lambda pair: -pair[0])
        assert scored[0][1].name == "get_pocket_summary" and scored[0][0] > scored[1][0], (request, scored[:2])


def test_the_totals_of_one_parent_need_that_parent(pockets):
    # totals "of an account's pockets" asked for no account, or one not there, are not every pocket's totals
    state = valid_state(pockets)
    with SandboxWorker() as worker:
        worker.load_environment(pockets["env_id"], pockets["source"])
        episode = worker.open_episode({pockets["env_id"]: state})
        owner = state["tables"]["pockets"][0]["account_id"]
        mine = [p for p in state["tables"]["pockets"] if p["account_id"] == owner]
        assert worker.call(episode, "get_pocket_summary", {"account_id": owner})["output"]["count"] == len(mine)
        unnamed = worker.call(episode, "get_pocket_summary", {"account_id": None})
        assert unnamed["error"]["type"] == "bad_arguments" and "account_id" in unnamed["error"]["message"], unnamed
        absent = worker.call(episode, "get_pocket_summary", {"account_id": "acc_99999"})
        assert absent["error"]["type"] == "not_found", absent
    report = verify_environment(pockets)
    assert report.status == "passed", report.reasons
    assert ("tool_invalid", "get_pocket_summary") in {(c.check, c.tool) for c in report.checks if c.passed}
    lax = mutate(pockets, r"    _check_refs\(state, table, scope\)\n", "")
    assert ("tool_invalid", "get_pocket_summary") in failed_checks(lax)
