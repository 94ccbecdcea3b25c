"""Abstention turns: requests no offered tool can serve, answered by saying so instead of calling a tool.

Every synthesized turn is solvable with the offered tools, so a model trained only on them learns to call
some tool for any request, even when none fits. An abstention turn is a user request for something the
trajectory's tools cannot do; the gold answer is a plain assistant reply that says so and names what the
tools do cover, with no tool call (its RL row's gold calls are empty, and its final state is its
initial state).

The request comes from one of these sources (tried first with :data:`SOURCE_WEIGHTS`, then the others
in this order):

1. a tool of another environment (another domain first) whose table none of the offered tools touches
   ("create a new ticket with title ...", offered a bookshop's tools);
2. an operation the offered tools lack on a table they do touch ("delete book 'boo_00003'" when no tool
   deletes books; only create and delete are used, since a missing update or list might be served by the
   other operations);
3. a small set of everyday requests (weather, taxis, translation, ...) kept only when no offered tool's
   name, table or description mentions their topic.
"""

from __future__ import annotations

import random
from typing import Any

from envfactory_assets.envgen.values import ValueFactory
from envfactory_assets.sources.names import indefinite_article, singular
from envfactory_assets.synth.refinement.phrasing import describe_call, words

# (request, what it would take, topic words an offered tool must not mention for the request to be unservable)
EVERYDAY_REQUESTS = (
    ("What will the weather be like in Lisbon this weekend?", "look up weather forecasts", ("weather", "forecast")),
    ("Book me a taxi to the airport for 6 am tomorrow.", "book taxis or rides", ("taxi", "ride", "cab")),
    ("Translate 'see you next week' into Japanese for me.", "translate text", ("translat", "language")),
    (
        "Reserve a table for four at an Italian restaurant tonight.",
        "make restaurant reservations",
        ("restaurant", "reserv", "table_booking"),
    ),
    ("How much is 250 US dollars in euros right now?", "look up exchange rates", ("exchange", "currency", "fx")),
    ("Send a text message to my sister saying I'll be late.", "send text messages", ("sms", "text_message", "message")),
    ("Play some relaxing jazz on the living room speaker.", "play music", ("music", "song", "playlist", "speaker")),
    ("Track my parcel with tracking number 1Z999AA10123456784.", "track parcels", ("parcel", "shipment", "tracking")),
    (
        "What's the current share price of a large chip maker, say NVIDIA?",
        "look up stock prices",
        ("stock", "share_price", "ticker", "quote"),
    ),
    ("Find me a flight from Madrid to Oslo next Friday.", "search flights", ("flight", "airline", "airport")),
    ("Set an alarm for 6:30 tomorrow morning.", "set alarms", ("alarm", "clock", "reminder")),
    (
        "Turn the thermostat in the bedroom down to 19 degrees.",
        "control home devices",
        ("thermostat", "device", "temperature", "home"),
    ),
    (
        "How long does it take to drive from Lyon to Geneva right now?",
        "look up routes or traffic",
        ("route", "traffic", "map", "direction"),
    ),
    ("Order a large pepperoni pizza to my home address.", "order food", ("food", "pizza", "meal", "menu")),
)
SOURCES = ("foreign", "missing_operation", "everyday")
SOURCE_WEIGHTS = (0.5, 0.2, 0.3)
"""How often each source (foreign tool, missing operation, everyday request) is tried first."""
REPLIES = (
    (
        "I can't do that with the tools I have here: none of them can {ability}. I can help with {offered}, "
        "if that is useful."
    ),
    ("Sorry, that is not something the available tools support; none of them can {ability}. They cover {offered}."),
    ("None of the tools available to me can {ability}, so I can't do that here. I can work with {offered} instead."),
)


def _offered_text(tools: list[dict[str, Any]]) -> str:
    """What the offered tools are about, in words: ``"authors and books"``."""
    tables = sorted({words(t["table"]) for t in tools})
    if len(tables) > 4:
        tables = tables[:4] + ["more"]
    return tables[0] if len(tables) == 1 else ", ".join(tables[:-1]) + " and " + tables[-1]


def _mentions(tools: list[dict[str, Any]], topic: str) -> bool:
    topic = topic.lower()
    return any(
        topic in t["name"].lower() or topic in t["table"].lower() or topic in str(t.get("description") or "").lower()
        for t in tools
    )


def _article(thing: str) -> str:
    return f"{indefinite_article(thing)} {thing}"


def _foreign_request(
    offered: list[dict[str, Any]],
    offered_domains: set[str],
    environments: dict[str, dict[str, Any]],
    env_ids: list[str],
    rng: random.Random,
) -> tuple[str, str] | None:
    offered_names = {t["name"] for t in offered}
    offered_tables = {t["table"] for t in offered} | {singular(t["table"]) for t in offered}
    pools: list[list[tuple[dict[str, Any], dict[str, Any]]]] = [[], []]
    for env_id in sorted(environments):
        if env_id in env_ids:
            continue
        env = environments[env_id]
        for tool in env["tools"]:
            table = tool["table"]
            if (
                tool["kind"] not in ("create", "list")
                or tool["name"] in offered_names
                or table in offered_tables
                or singular(table) in offered_tables
                or _mentions(offered, singular(table))
            ):
                continue
            pools[0 if env.get("domain") not in offered_domains else 1].append((env, tool))
    pool = pools[0] or pools[1]
    if not pool:
        return None
    env, tool = pool[rng.randrange(len(pool))]
    key = env["tables"][tool["table"]]["key"]
    foreign_keys = env["tables"][tool["table"]].get("foreign_keys") or {}
    values = ValueFactory(rng.randrange(2**31))
    args = {}
    for name, schema in tool["input_schema"]["properties"].items():
        # identifiers would have to be invented; a list's filters are left out so the request stays plain
        if name == key or name in foreign_keys or name.endswith("_id") or name == "limit" or tool["kind"] == "list":
            continue
        if name in tool["input_schema"].get("required", []) or rng.random() < 0.5:
            args[name] = values.value(name, schema, tool["table"])
    text = describe_call(tool, key, args)
    thing = words(singular(tool["table"]))
    ability = f"create {_article(thing)}" if tool["kind"] == "create" else f"list {words(tool['table'])}"
    return text[0].upper() + text[1:] + ".", ability


def _missing_operation_request(
    offered: list[dict[str, Any]],
    environments: dict[str, dict[str, Any]],
    env_ids: list[str],
    state: dict[str, Any],
    rng: random.Random,
) -> tuple[str, str] | None:
    options = []
    for env_id in env_ids:
        env = environments[env_id]
        for table, meta in sorted(env["tables"].items()):
            kinds = {t["kind"] for t in env["tools"] if t["table"] == table}
            if not kinds or meta.get("relation"):
                continue  # a relation's pairs are made and removed by its own tools, never by a create
            thing = words(singular(table))
            rows = ((state.get(env_id) or {}).get("tables") or {}).get(table) or []
            if "delete" not in kinds and rows and meta["key"] in rows[0]:
                row = rows[rng.randrange(len(rows))]
                options.append((f"Please delete {thing} '{row[meta['key']]}'.", f"delete {words(table)}"))
            if "create" not in kinds:
                options.append((f"Add a new {thing} for me.", f"create {_article(thing)}"))
    return options[rng.randrange(len(options))] if options else None


def _everyday_request(offered: list[dict[str, Any]], rng: random.Random) -> tuple[str, str] | None:
    options = [(q, a) for q, a, topics in EVERYDAY_REQUESTS if not any(_mentions(offered, w) for w in topics)]
    return options[rng.randrange(len(options))] if options else None


def abstention_turn(
    trajectory: dict[str, Any], environments: dict[str, dict[str, Any]], position: int, rng: random.Random
) -> dict[str, Any] | None:
    """A turn to insert before ``trajectory["turns"][position]`` (``position == len(turns)``: at the end) whose
    request none of the trajectory's tools can serve, or None when no such request can be made.

    ``environments`` holds every environment requests may be drawn from (at least the trajectory's own).
    The turn has the keys of a synthesized turn (``query``, ``calls`` = ``[]``, ``assistant_summary`` = the
    reply, equal ``state_before``/``state_after`` and hashes) plus ``abstention``: ``{"source": one of
    SOURCES, "ability": what the request would take, e.g. "create a ticket"}``.

    Raises:
        ValueError: ``position`` is outside ``0..len(turns)``.
    """
    turns = trajectory["turns"]
    if not 0 <= position <= len(turns):
        raise ValueError(f"position {position} is outside 0..{len(turns)} for a trajectory of {len(turns)} turns")
    env_ids = list(trajectory["env_ids"])
    offered = [t for e in env_ids for t in environments[e]["tools"]]
    if position == 0:
        state, digest = turns[0]["state_before"], turns[0]["state_before_hash"]
    else:
        state, digest = turns[position - 1]["state_after"], turns[position - 1]["state_after_hash"]
    domains = {environments[e].get("domain") for e in env_ids}
    sources = [
        lambda: _foreign_request(offered, domains, environments, env_ids, rng),
        lambda: _missing_operation_request(offered, environments, env_ids, state, rng),
        lambda: _everyday_request(offered, rng),
    ]
    # mostly the preferred order, sometimes another source first, so every kind of request is seen
    first = rng.choices(range(3), weights=SOURCE_WEIGHTS)[0]
    found = None
    for option in list(zip(SOURCES, sources, strict=False))[first:] + list(zip(SOURCES, sources, strict=False))[:first]:
        name, source = option
        found = source()
        if found is not None:
            break
    if found is None:
        return None
    query, ability = found
    reply = REPLIES[rng.randrange(len(REPLIES))].format(ability=ability, offered=_offered_text(offered))
    return {
        "query": query,
        "intent": [],
        "target_tools": [],
        "calls": [],
        "assistant_summary": reply,
        "state_before": state,
        "state_after": state,
        "state_before_hash": digest,
        "state_after_hash": digest,
        "abstention": {"source": name, "ability": ability},
    }
