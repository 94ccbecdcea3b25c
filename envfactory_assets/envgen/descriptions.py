"""Descriptions of at least a sentence for every tool and parameter of an environment.

An agent picks a tool and fills its arguments from the descriptions alone, so a description that is only the
operation's name (``getSiteRfdiagRecording``), one word or empty tells it nothing the name does not. The
spec's own text is kept where it is a sentence (:func:`~envfactory_assets.sources.names.is_sentence`); elsewhere
a sentence is derived from what the ToolSpec itself says: its kind (list, get, create, an action's verb, ...),
its table as a person names it (:func:`~envfactory_assets.synth.refinement.phrasing.spoken_tables`), its key,
scope and filter parameters, and for a parameter its own name. Nothing is said that those do not say: "Gets
one rfdiag by its ID.",
"The status of the recording." An MCP tool's own description (and its arguments') is kept whenever it has
one that is not just its name: the server's author wrote it for agents.
"""

from __future__ import annotations

import re
from typing import Any

from envfactory_assets.sources.names import (
    indefinite_article,
    inflected_plural,
    is_sentence,
    plain_name,
    plural,
    singular,
    spoken_thing,
)
from envfactory_assets.sources.spoken import spoken_field, spoken_name, spoken_tables

#: Last words of a field name after which a noun must follow (``completed_at``, ``created_by``).
_PREPOSITIONS = frozenset("at on by in to for from of with since until before after".split())


def _a(noun: str) -> str:
    return f"{indefinite_article(noun)} {noun}"


def _listing(names: list[str]) -> str:
    """``["a", "b", "c"]`` -> ``"a, b or c"``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _thing(snake: str) -> str:
    """One row of the snake_case table words ``snake`` as a person writes it (``"rfdiag_recordings"`` ->
    ``"rfdiag recording"``, ``"vm_hosts"`` -> ``"VM host"``)."""
    return spoken_name(spoken_thing(snake).replace(" ", "_"))


def _things(thing: str) -> str:
    words = thing.split()
    return " ".join([*words[:-1], inflected_plural(words[-1])]) if words else thing


def _key_words(key: str) -> str:
    """How a description names a row's key: ``"ID"`` for an ``..._id`` key (the row's own words are already in
    the sentence: "one recording by its ID", not "by its recording ID"), else the key's own words."""
    said = spoken_name(key)
    return "ID" if said.split()[-1] in ("ID", "IDs") or key.lower().endswith("id") else said


#: First words of a flag's name that make it a clause about the row ("can activate", "is archived").
_CLAUSE_HEADS = frozenset("can is has does should will".split())


def _filter_words(name: str, schema: Any) -> str:
    """How a list tool's description names the filter parameter ``name``: its spoken words, or for a boolean
    whose words open with a verb of a clause ("can activate") ``"whether it can activate"``, since "filtered
    by can activate" reads as no phrase."""
    said = spoken_field(name)
    words = said.split()
    boolean = isinstance(schema, dict) and schema.get("type") == "boolean"
    if boolean and len(words) > 1 and words[0].lower() in _CLAUSE_HEADS:
        return f"whether it {said}"
    return said


def tool_sentence(tool: dict[str, Any], thing: str) -> str:
    """A description of ``tool`` (a ToolSpec) derived from its kind, its table's row as a person names it
    (``thing``, singular), its input parameters and, for an action, its verb; for a relation tool its
    ``relation`` words. Ends with a period."""
    kind = tool["kind"]
    inp = tool.get("input_schema") or {}
    props = list((inp.get("properties") or {}).keys())
    required = list(inp.get("required") or [])
    things = _things(thing)
    keyed = [p for p in required if p in props]
    key = _key_words(keyed[0]) if keyed else "identifier"
    if kind.startswith("relation_") and "relation" in tool:
        rel = tool["relation"]
        parent, member, role = rel["parent_thing"], rel["member_thing"], rel["role"]
        if kind == "relation_list":
            return f"Lists the {plural(role.replace(' ', '_')).replace('_', ' ')} of {_a(parent)}."
        if kind == "relation_add":
            return f"Adds {_a(member)} to {_a(parent)} as {_a(role)}."
        return f"Removes {_a(role)} from {_a(parent)}."
    scope = [p for p in required if p not in ("query",)]
    within = f" of one {spoken_field(scope[0])}" if scope and kind in ("list", "search", "count") else ""
    params = inp.get("properties") or {}
    filters = [_filter_words(p, params[p]) for p in props if p not in ("limit", "offset", "query", *scope)]
    # a flag said as a clause ("whether it can activate") goes last, after the fields said as nouns
    filters.sort(key=lambda f: f.startswith("whether "))
    by = f", optionally filtered by {_listing(filters)}" if filters else ""
    if kind == "list":
        return f"Lists the {things}{within}{by}."
    if kind == "search":
        return f"Searches the {things}{within} by text."
    if kind == "count":
        return f"Counts the {things}{within}{by}."
    if kind == "get":
        return f"Gets the {thing}." if tool.get("singleton") else f"Gets one {thing} by its {key}."
    if kind == "create":
        fields = [spoken_name(p) for p in required]
        needs = f" Requires its {_listing(fields).replace(' or ', ' and ')}." if fields else ""
        return f"Creates {_a(thing)}.{needs}"
    if kind == "update":
        return f"Updates the {thing}." if tool.get("singleton") else f"Updates fields of one {thing} by its {key}."
    if kind == "delete":
        return f"Deletes one {thing} by its {key}."
    if kind == "action":
        verb = (tool.get("action") or {}).get("verb") or "act on"
        return f"{inflected_plural(verb).capitalize()} one {thing} by its {key}."
    if kind == "transfer":
        tr = tool.get("transfer") or {}
        said = spoken_field(tr.get("field") or "balance")
        if tr.get("verb") == "transfer":
            return f"Moves an amount of {said} from one {thing} to another; both change or neither."
        direction = "out of" if tr.get("verb") == "withdraw" else "into"
        return f"Moves an amount of {said} {direction} one {thing} by its {key}."
    if kind == "side_effect":
        verb = (tool.get("side_effect") or {}).get("verb") or "act on"
        return f"{inflected_plural(verb).capitalize()} one {thing} by its {key}; the {thing} itself does not change."
    return f"{kind.replace('_', ' ').capitalize()} on the {things}."


def parameter_sentence(name: str, schema: dict[str, Any], thing: str) -> str:
    """A description of the parameter ``name`` (JSON Schema ``schema``) of a row that is ``thing``: its own
    words as a person writes them (:func:`~envfactory_assets.synth.refinement.phrasing.spoken_name`); a boolean
    named ``is_...``/``has_...`` reads as the question it asks ("Whether the recording is active."), another
    boolean says it is a flag. Ends with a period."""
    said = spoken_name(name)
    if said.split()[-1].lower() in _PREPOSITIONS:
        said += " value"  # "completed_at": "the completed at value of the task", not "the completed at of"
    if schema.get("type") == "boolean":
        if re.match(r"^(?:is|has) ", said):
            return f"Whether the {thing} {said}."
        return f"The {said} flag of the {thing} (true or false)."
    return f"The {said} of the {thing}."


def _is_mcp(tool: dict[str, Any]) -> bool:
    return (tool.get("operation") or {}).get("method") == "MCP"


def _kept(text: str | None, names: tuple[str | None, ...], mcp: bool) -> bool:
    """Whether a description stays as written: a sentence, or an MCP server's own words that are not just the
    name (``names``) and more than one word (a bare ``"Optional."`` says nothing of the value)."""
    if is_sentence(text, names):
        return True
    t = (text or "").strip()
    return mcp and len(t.split()) > 1 and not any(n and plain_name(n) == plain_name(t) for n in names)


def _describe_properties(schema: dict[str, Any], thing: str, mcp: bool) -> int:
    """Set a derived description on each property of ``schema`` (and of its ``items``) that has no sentence;
    returns how many it set."""
    set_count = 0
    for holder in (schema, schema.get("items") if isinstance(schema.get("items"), dict) else None):
        for name, prop in ((holder or {}).get("properties") or {}).items():
            if not isinstance(prop, dict):
                continue
            spoken = name.replace("_", " ")
            if not _kept(prop.get("description"), (name, spoken), mcp):
                prop["description"] = parameter_sentence(name, prop, thing)
                set_count += 1
    return set_count


def table_things(tools: list[dict[str, Any]]) -> dict[str, str]:
    """``{table: one row as a person names it}`` for the tables of one environment's ``tools`` (ToolSpecs), as
    :func:`tool_sentence` and :func:`parameter_sentence` name them (``"rfdiags"`` -> ``"rfdiag"``)."""
    spoken = spoken_tables(tools)
    return {t["table"]: _thing(spoken.get(t["table"], t["table"])) for t in tools}


def describe_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``tools`` (one environment's named ToolSpecs) with a description of at least a sentence on every tool and
    on every property of its input and output schemas, set in place: the spec's own where :func:`is_sentence`
    (or, for an MCP tool, any text that is not its name), else :func:`tool_sentence` and
    :func:`parameter_sentence`. Property schemas shared between tools are described once, the same way."""
    spoken = spoken_tables(tools)
    things = table_things(tools)
    for tool in tools:
        thing = things[tool["table"]]
        op = tool.get("operation") or {}
        mcp = _is_mcp(tool)
        if not _kept(tool.get("description"), (tool.get("name"), op.get("operation_id")), mcp):
            tool["description"] = tool_sentence(tool, thing)
        if "relation" in tool:
            # a relation's parameters name two rows; each already says which (tools.tools_for_relation)
            member = _thing(spoken.get(tool["relation"]["member"], singular(tool["relation"]["member"])))
            _describe_properties(tool.get("input_schema") or {}, thing, mcp)
            _describe_properties(
                tool.get("output_schema") or {}, member if tool["kind"] == "relation_list" else thing, mcp
            )
        else:
            _describe_properties(tool.get("input_schema") or {}, thing, mcp)
            _describe_properties(tool.get("output_schema") or {}, thing, mcp)
    return tools
