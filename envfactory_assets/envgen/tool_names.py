"""Readable tool names for one environment's tools.

A tool keeps the API's own name (its ``operationId`` or MCP tool name, in snake_case) when that name is at most
:data:`~envfactory_assets.sources.names.MAX_TOOL_NAME_CHARS` characters once the counters a code generator leaves
in it are dropped (``getUserUsingGET_1`` -> ``get_user``). Otherwise it is named by what it does: its verb and
its table (``list_jobs``, ``get_job``, ``cancel_order``, ``add_group_member``).

Two tools that would share a name are told apart by what they differ in, never by a counter: one operation read
as several tables (an MCP ``read_graph`` over entities and relations) keeps its name with each table
(``read_graph_entities``); other tools are named by what they do, then by the words of their paths that the other
tools of the clash lack (``/apps/{app_id}/webhooks`` and ``/webhooks`` give ``list_app_webhooks`` and
``list_webhooks``), then by their HTTP method, then by the words of their own names, then by the number of their
table's word (``/product`` and ``/products``).

Every name matches :data:`~envfactory_assets.sources.names.TOOL_NAME_RE` and is no Python keyword, builtin or
name the environment module or the task environment class defines (:data:`RESERVED_TOOL_NAMES`), so it is a
valid function name for OpenAI tools, MCP, verl, LlamaFactory and TRL alike.
"""

from __future__ import annotations

import builtins
import keyword
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envfactory_assets.sources.names import MAX_TOOL_NAME_CHARS, TOOL_NAME_RE, singular, snake_case, tool_name_problems

#: Names a tool function must not take: the environment module's builtins and own names (``load``, ``save``,
#: ``TABLES``) and the task environment class's ``reset``.
RESERVED_TOOL_NAMES = frozenset(dir(builtins)) | {"load", "save", "TABLES", "reset"}
#: kinds whose tool reads or writes many rows, named by the plural of its table
_PLURAL_KINDS = frozenset({"list", "search", "count", "relation_list"})
#: the verb of a relation's tools (``add_group_member``, ``list_group_members``)
_RELATION_VERBS = {"relation_add": "add", "relation_remove": "remove", "relation_list": "list"}
_HTTP_METHODS = frozenset({"get", "post", "put", "patch", "delete", "head", "options"})
#: a code generator's method suffix (Springfox: ``getUserUsingGET``)
_USING_METHOD = re.compile(r"_using_(?:get|post|put|patch|delete|head|options)(?=_|$)")
_MAX_ROUNDS = 8


class ToolNameError(ValueError):
    """Two tools of one environment that nothing in their operations tells apart; the message names them."""


@dataclass
class _Name:
    verb: str
    qualifiers: list[str]  # outermost first
    obj: list[str]
    own: str | None  # the API's own name, used while nothing collides with it
    path_words: list[str]  # innermost first
    method: str
    own_words: list[str]
    table: str
    tried: set[str] = field(default_factory=set)
    suffixed: bool = False  # the own name carries its table

    def text(self) -> str:
        if self.own is not None:
            return self.own
        return _fit([self.verb], self.qualifiers, self.obj)


def own_name(operation_id: str | None) -> str | None:
    """The API's own name for a tool (an ``operationId`` or an MCP tool name) as a readable snake_case function
    name, or None when it is not one: counters and generator suffixes are dropped (``getUserUsingGET_1`` ->
    ``get_user``, ``list_items_2`` -> ``list_items``); a name longer than
    :data:`~envfactory_assets.sources.names.MAX_TOOL_NAME_CHARS` characters, shorter than 3, or reserved
    (:data:`RESERVED_TOOL_NAMES`, a keyword) gives None."""
    if not operation_id:
        return None
    text = _USING_METHOD.sub("", snake_case(operation_id))
    name = "_".join(t for t in text.split("_") if t and not t.isdigit())
    if not 3 <= len(name) <= MAX_TOOL_NAME_CHARS or not TOOL_NAME_RE.match(name) or not name[0].isalpha():
        return None
    if name in RESERVED_TOOL_NAMES or keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return None
    return name


def _words(text: str) -> list[str]:
    return [t for t in snake_case(text).split("_") if t and not t.isdigit()]


def _path_words(path: str) -> list[str]:
    """The words of a path's literal segments, innermost first (``/apps/{app_id}/webhooks`` -> ``["webhooks",
    "apps"]``); parameters and digits are no words."""
    segments = [s for s in path.split("/") if s and not (s.startswith("{") and s.endswith("}"))]
    return [w for s in reversed(segments) for w in reversed(_words(s))]


def _fit(verb: list[str], qualifiers: list[str], obj: list[str]) -> str:
    """``verb + qualifiers + obj`` joined, cut to the length limit by dropping the object's leading words (the last,
    its head noun, stays), then the outermost qualifiers (the innermost stays), then letters of the longest word."""
    obj, qualifiers = list(obj), list(qualifiers)
    while len("_".join(verb + qualifiers + obj)) > MAX_TOOL_NAME_CHARS and len(obj) > 1:
        obj.pop(0)
    while len("_".join(verb + qualifiers + obj)) > MAX_TOOL_NAME_CHARS and len(qualifiers) > 1:
        qualifiers.pop(0)
    words = verb + qualifiers + obj
    while len("_".join(words)) > MAX_TOOL_NAME_CHARS:
        i = max(range(len(words)), key=lambda j: len(words[j]))
        words[i] = words[i][: len(words[i]) - (len("_".join(words)) - MAX_TOOL_NAME_CHARS)] or words[i][:1]
    return "_".join(words)


def _plain(tool: Mapping[str, Any]) -> tuple[str, list[str]]:
    kind = tool["kind"]
    verb = (tool.get("action") or {}).get("verb") if kind == "action" else _RELATION_VERBS.get(kind, kind)
    if kind in ("transfer", "side_effect"):
        verb = (tool.get(kind) or {}).get("verb") or kind
    obj = _words(tool["table"]) or ["items"]
    if kind not in _PLURAL_KINDS and not tool.get("singleton"):
        obj = singular("_".join(obj)).split("_")  # the whole name: a short last word ("primary_ips") counts
    return snake_case(verb or kind) or kind, obj


def _qualifier(member: _Name, others: list[_Name]) -> str | None:
    """The first thing ``member`` has that some other tool of its clash lacks: a word of its path (innermost
    first), its HTTP method, a word of its own name; None when it has nothing the others do not all share."""
    in_name = set(member.text().split("_")) | {singular(w) for w in member.text().split("_")}
    candidates = [
        *member.path_words,
        *([member.method] if member.method in _HTTP_METHODS else []),
        *member.own_words,
    ]
    for word in candidates:
        if word in in_name or singular(word) in in_name or word in member.tried:
            continue
        theirs = [o.path_words + [o.method] + o.own_words for o in others]
        if any(word not in t for t in theirs):
            return word
    return None


def tool_names(tools: Iterable[Mapping[str, Any]]) -> list[str]:
    """A readable, unique name for each of one environment's tools, in their order (see the module docstring).

    Each tool is a ToolSpec-shaped mapping with ``kind``, ``table``, ``operation`` (``method``, ``path``,
    ``operation_id``), and for an action ``action["verb"]``; ``singleton`` tools keep their table's number.
    Deterministic: the names depend on the tools alone (their order only decides the order of the result).

    Raises:
        ToolNameError: two tools whose operations have the same path, method and name words (nothing tells
            them apart).
    """
    names: list[_Name] = []
    for tool in tools:
        op = tool.get("operation") or {}
        verb, obj = _plain(tool)
        names.append(
            _Name(
                verb=verb,
                qualifiers=[],
                obj=obj,
                own=own_name(op.get("operation_id")),
                path_words=_path_words(str(op.get("path") or "")),
                method=str(op.get("method") or "").lower(),
                own_words=_words(op.get("operation_id") or ""),
                table=str(tool["table"]),
            )
        )
    for _ in range(_MAX_ROUNDS):
        groups: dict[str, list[_Name]] = defaultdict(list)
        for n in names:
            groups[n.text()].append(n)
        clashes = [g for text, g in groups.items() if len(g) > 1 or text in RESERVED_TOOL_NAMES]
        if not clashes:
            return [n.text() for n in names]
        for group in clashes:
            if any(n.own is not None for n in group):
                ops = {(n.method, tuple(n.path_words), n.own) for n in group}
                one_operation = len(ops) == 1 and len({tuple(_words(n.table)) for n in group}) == len(group)
                for n in group:
                    with_table = "_".join([n.own or "", *_words(n.table)])
                    if one_operation and not n.suffixed:
                        # one operation read as several tables (an MCP read_graph): its name and each table
                        n.own, n.suffixed = (with_table if len(with_table) <= MAX_TOOL_NAME_CHARS else None), True
                    else:  # the API's own names do not tell these apart: name them by what they do
                        n.own = None
                continue
            progressed = False
            for n in group:
                word = _qualifier(n, [o for o in group if o is not n])
                if word is not None:
                    n.tried.add(word)
                    n.qualifiers.insert(0, singular(word))
                    progressed = True
            if progressed:
                continue
            for n in group:  # /product and /products: the number of the path's word is what they differ in
                n.obj = _words(n.table) or n.obj
    groups = defaultdict(list)
    for n in names:
        groups[n.text()].append(n)
    clash = next((g for g in groups.values() if len(g) > 1), [])
    described = [f"{n.text()} ({n.method.upper()} {'/'.join(reversed(n.path_words))}, table {n.table})" for n in clash]
    raise ToolNameError("nothing tells these tools apart: " + "; ".join(described))


def readability_figures(environments: Iterable[Mapping[str, Any]], examples: int = 10) -> dict[str, Any]:
    """How readable the tool names of ``environments`` (Environment dicts with ``env_id`` and ``tools``) are:
    ``tools`` and ``environments`` counted, then for each problem of
    :func:`~envfactory_assets.sources.names.tool_name_problems` (``long``, ``artefact``, ``duplicate``) the number
    of tool names that have it, the number of environments with one, and up to ``examples`` of them as
    ``"env_id: name"`` (in the order of ``environments``)."""
    out: dict[str, Any] = {"environments": 0, "tools": 0}
    found: dict[str, list[str]] = {"long": [], "artefact": [], "duplicate": []}
    envs_with: dict[str, int] = dict.fromkeys(found, 0)
    for env in environments:
        names = [t["name"] for t in env.get("tools") or []]
        out["environments"] += 1
        out["tools"] += len(names)
        for problem, bad in tool_name_problems(names).items():
            found[problem] += [f"{env['env_id']}: {n}" for n in bad]
            envs_with[problem] += bool(bad)
    for problem, bad in found.items():
        out[problem] = len(bad)
        out[f"environments_{problem}"] = envs_with[problem]
        out[f"{problem}_examples"] = bad[:examples]
    return out
