"""The verl tool config of an export: ``envfactory_tools.yaml`` for
``actor_rollout_ref.rollout.multi_turn.tool_config_path``.

verl's format (``verl/tools/tool_registry.py``): ``tools: [{class_name, config: {type: native}, tool_schema:
{type: function, function: {name, description, parameters}}}]``; every entry here names
:class:`envfactory_assets.exports.verl_tools.EnvFactoryTool` (shipped as ``envfactory_tools.py``). verl keys
its tools by name, so one entry per tool name: where environments share a name with different parameters,
the first environment's schema is listed (calls still run in the row's own environments) and the name is
reported. verl refuses to start on a parameter schema its models cannot read (a property without ``type``, a
``properties`` that is not an object); such a tool is left out and reported.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from envfactory_assets.envgen.tools import openai_tool
from envfactory_assets.exports.formats import check_tool_names

TOOLS_MODULE = "envfactory_tools.py"
TOOLS_CONFIG = "envfactory_tools.yaml"
TOOL_CLASS = "envfactory_tools.EnvFactoryTool"
#: the module the export copies as :data:`TOOLS_MODULE`; copied, never imported here (it imports verl where
#: verl is installed)
TOOLS_SOURCE = Path(__file__).with_name("verl_tools.py")


def verl_schema_problem(parameters: Any) -> str | None:
    """Why verl's ``OpenAIFunctionParametersSchema`` (0.9) would refuse ``parameters``, or None: it needs an
    object with a string ``type`` and a ``properties`` object whose every value has a ``type`` (a string or a
    list of strings)."""
    if not isinstance(parameters, Mapping) or not isinstance(parameters.get("type"), str):
        return "parameters has no string 'type'"
    properties = parameters.get("properties")
    if not isinstance(properties, Mapping):
        return "parameters has no 'properties' object"
    for name, prop in properties.items():
        kind = prop.get("type") if isinstance(prop, Mapping) else None
        if not (isinstance(kind, str) or (isinstance(kind, list) and kind and all(isinstance(k, str) for k in kind))):
            return f"property {name!r} has no 'type' verl can read"
    return None


def verl_tool_config(
    environments: Mapping[str, Mapping[str, Any]], env_ids: Iterable[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tool config of the tools of ``env_ids`` (in env id order, then each environment's tool order).

    Args:
        environments: ``{env_id: Environment dict}`` with ``tools`` (ToolSpecs).
        env_ids: the environments the export's RL rows use.

    Returns:
        ``(config, report)``: ``config`` is ``{"tools": [entry]}`` (each entry's ``config`` also lists the
        ``env_ids`` defining the name); ``report`` is ``{"tools": n listed, "left_out": {name: reason},
        "shared_names": {name: [env_ids whose parameters differ]}}``.

    Raises:
        KeyError: an env id missing from ``environments``.
        ValueError: a tool name is not a function name a model API accepts
            (:func:`~envfactory_assets.exports.formats.check_tool_names`).
    """
    entries: dict[str, dict[str, Any]] = {}
    definitions: dict[str, list[tuple[str, Any]]] = {}
    left_out: dict[str, str] = {}
    for env_id in sorted(set(env_ids)):
        check_tool_names(environments[env_id]["tools"], f"environment {env_id}")
        for spec in environments[env_id]["tools"]:
            schema = openai_tool(spec)
            name = schema["function"]["name"]
            definitions.setdefault(name, []).append((env_id, schema["function"]["parameters"]))
            problem = verl_schema_problem(schema["function"]["parameters"])
            if problem:
                left_out.setdefault(name, f"{env_id}: {problem}")
            elif name not in entries and name not in left_out:
                entries[name] = {
                    "class_name": TOOL_CLASS,
                    "config": {"type": "native", "env_ids": []},
                    "tool_schema": schema,
                }
    for name, entry in entries.items():
        entry["config"]["env_ids"] = [e for e, _ in definitions[name]]
    shared = {
        name: [e for e, _ in defs]
        for name, defs in definitions.items()
        if len({json.dumps(p, sort_keys=True) for _, p in defs}) > 1
    }
    return ({"tools": list(entries.values())}, {"tools": len(entries), "left_out": left_out, "shared_names": shared})
