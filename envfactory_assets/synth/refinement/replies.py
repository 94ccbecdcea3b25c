"""The assistant's closing reply of a turn, written from the turn's tool results alone (the offline writer).

One sentence per call, chosen among several sentence plans per situation (rows read, none read, a count, a
row looked up, created, updated, deleted, moved to a state, a refused call), joined with varied connectors.
Every fact a sentence states comes from the call's result:

- after a read, the number of rows the result returned, and a total ("of 6") only where the result states
  one (``total``); up to three of the rows named by a readable field (a name, title, subject...) or else by
  their identifier;
- after a write, the row as the result shows it (its label or identifier, the values the call set, as the
  returned row holds them);
- a refused call is reported with the reason its result gives, never as done.

Plans are phrased from the operation's own summary where it reads as an action ("Gets all bike point
locations" -> "I got all bike point locations"), else from the tool's kind. The plan and connectors are drawn
from ``random.Random(seed)``, the seed derived from the trajectory and turn, so a run reproduces exactly.
:mod:`envfactory_assets.quality.reply_facts` checks the written replies independently.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from envfactory_assets.sources.names import spoken_thing, spoken_things
from envfactory_assets.synth.refinement.phrasing import spoken_table, spoken_value, words

#: Field names (lower-cased, underscores and case folded away) that label a row for a person, best first.
_LABEL_FIELDS = (
    "name",
    "title",
    "displayname",
    "fullname",
    "commonname",
    "subject",
    "label",
    "username",
    "email",
    "summary",
)
#: Verbs a summary may start with, and how the reply says them done.
_PAST = {
    "get": "got",
    "gets": "got",
    "find": "found",
    "finds": "found",
    "list": "listed",
    "lists": "listed",
    "search": "searched",
    "searches": "searched",
    "retrieve": "retrieved",
    "retrieves": "retrieved",
    "fetch": "fetched",
    "fetches": "fetched",
    "return": "pulled up",
    "returns": "pulled up",
    "show": "pulled up",
    "shows": "pulled up",
    "look": "looked",
    "looks": "looked",
    "read": "read",
    "reads": "read",
    "count": "counted",
    "counts": "counted",
    "create": "created",
    "creates": "created",
    "add": "added",
    "adds": "added",
    "register": "registered",
    "registers": "registered",
    "update": "updated",
    "updates": "updated",
    "modify": "modified",
    "modifies": "modified",
    "edit": "edited",
    "edits": "edited",
    "delete": "deleted",
    "deletes": "deleted",
    "remove": "removed",
    "removes": "removed",
}
#: Tails of a generated default summary that say how, not what ("List books, optionally filtered.").
_SUMMARY_TAILS = re.compile(r"\s*(?:,.*|\bby (?:its |their )?(?:identifier|id|text)\b.*|\boptionally\b.*)$", re.I)


def row_label(row: Any) -> str | None:
    """A row's readable label: the value of its first field among :data:`_LABEL_FIELDS` (compared without case
    or underscores, ``commonName`` = ``common_name``) that is short non-empty text; None when it has none."""
    if not isinstance(row, Mapping):
        return None
    folded = {re.sub(r"[_\W]", "", str(k)).lower(): v for k, v in row.items()}
    for field in _LABEL_FIELDS:
        value = folded.get(field)
        if isinstance(value, str) and 0 < len(value.strip()) <= 80 and "\n" not in value:
            return value.strip()
    return None


def _quoted(text: str) -> str:
    return f"'{text}'"


def summary_action(tool: Mapping[str, Any]) -> str | None:
    """The operation's summary said as done (``"Gets all bike point locations."`` -> ``"got all bike point
    locations"``), or None when it does not start with a known verb, is long or holds more than words."""
    summary = (tool.get("description") or "").strip().split(". ")[0].strip().rstrip(".")
    summary = _SUMMARY_TAILS.sub("", summary).strip()
    toks = summary.split()
    if not toks or len(toks) > 9 or not re.fullmatch(r"[A-Za-z' -]+", summary):
        return None
    if any(w.lower() in ("one", "two", "three", "single", "all") for w in toks[1:]) and tool.get("kind") in (
        "get",
        "create",
        "update",
        "delete",
        "action",
    ):
        toks = [w if w.lower() not in ("one", "single") else "the" for w in toks]
    past = _PAST.get(toks[0].lower())
    if past is None or len(toks) < 2:
        return None
    rest = [w.lower() if re.fullmatch(r"[A-Z][a-z]+", w) else w for w in toks[1:]]
    if rest[0].lower() in ("a", "an", "one") and tool.get("kind") in ("get", "create", "update", "delete"):
        rest[0] = "the"  # the reply is about the one row the call touched
    return " ".join([past, *rest])


class _Call:
    """What one call's sentence needs: its words and its result, read once."""

    def __init__(self, call: Mapping[str, Any], tool: Mapping[str, Any], key: str) -> None:
        self.tool, self.key, self.args = tool, key, call.get("arguments") or {}
        self.out = call.get("output")
        self.kind = tool.get("kind") or call.get("kind") or ""
        table = spoken_table(dict(tool)) if tool.get("table") else words(str(tool.get("name", "item")))
        self.thing, self.things = spoken_thing(table), spoken_things(table)
        self.done = summary_action(tool)
        out = self.out if isinstance(self.out, Mapping) else {}
        self.refusal = (
            str(out["message"]).strip().rstrip(".")
            if set(out) == {"error", "message"} and str(out.get("message") or "").strip()
            else None
        )
        label = row_label(out)
        ident = out.get(key) if isinstance(out.get(key), (str, int)) and not isinstance(out.get(key), bool) else None
        self.label, self.ident = label, ident
        if tool.get("singleton"):
            self.who = f"the {self.thing}"
        elif label:
            self.who = f"{self.thing} {_quoted(label)}"
        elif ident is not None:
            self.who = f"{self.thing} {ident}"
        else:
            self.who = f"the {self.thing}"

    def noun(self, n: int) -> str:
        return self.thing if n == 1 else self.things


def _names(rows: Sequence[Any], key: str, rng: random.Random) -> list[str]:
    """Up to three rows as a person names them: by label, else by identifier (results' own values)."""
    named = []
    for row in rows[:3]:
        label = row_label(row)
        if label:
            named.append(_quoted(label))
        elif isinstance(row, Mapping) and isinstance(row.get(key), (str, int)) and not isinstance(row.get(key), bool):
            named.append(str(row[key]))
    return named


def _listing(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _facts(c: _Call, rng: random.Random, most: int = 2) -> list[str]:
    """Up to ``most`` fields of the returned row as "label value" (the key, labels and long texts left out)."""
    out = c.out if isinstance(c.out, Mapping) else {}
    skip = {c.key, *(k for k in out if re.sub(r"[_\W]", "", str(k)).lower() in _LABEL_FIELDS)}
    fields = [
        (k, v)
        for k, v in out.items()
        if k not in skip
        and not str(k).lower().endswith("id")
        and (isinstance(v, (int, float, str)) or isinstance(v, bool))
        and len(str(v)) <= 40
        and "'" not in str(v)
        and "e" not in (repr(v) if isinstance(v, float) else "")
    ]
    if len(fields) > most:
        fields = rng.sample(fields, most)
    return [f"{words(_snake(k)).lower()} {spoken_value(v, rng=rng)}" for k, v in fields]


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", str(name))


def _pick(rng: random.Random, options: Sequence[str]) -> str:
    return options[rng.randrange(len(options))]


def _read_sentence(c: _Call, rng: random.Random) -> str:
    out = c.out if isinstance(c.out, Mapping) else {}
    items = out.get("items") if isinstance(out.get("items"), list) else (c.out if isinstance(c.out, list) else [])
    n = len(items)
    total = out.get("total") if isinstance(out.get("total"), int) and not isinstance(out.get("total"), bool) else None
    if n == 0:
        if total:
            plans = (
                f"no {c.things} came back on this page, though the result counts {total} in all",
                f"this page held no {c.things} (the result gives a total of {total})",
                f"nothing came back this time; the result says there are {total} {c.noun(total)} in all",
            )
        else:
            plans = (
                f"I found no {c.things}",
                f"no {c.things} came back",
                f"there are no {c.things} to show",
                f"the result holds no {c.things}",
            )
        if c.done and total is None:
            plans += (f"I {c.done}, but none came back",)
        return _pick(rng, plans)
    noun = c.noun(n)
    of_total = ""
    if total is not None and total > n:
        of_total = _pick(rng, (f" of {total}", f" out of {total}", f" ({total} in all)", f" (of {total} in total)"))
    elif total is not None and total == n and n > 1:
        of_total = _pick(rng, ("", " (that is all of them)", ", all there are"))
    names = _names(items, c.key, rng)
    named = ""
    if names:
        lead = (
            (": ", ", namely ", " — ")
            if len(names) == n
            else (", including ", "; the first are " if len(names) > 1 else "; the first is ", ", among them ")
        )
        named = _pick(rng, lead) + _listing(names)
    plans = [
        f"I found {n} {noun}{of_total}{named}",
        f"{n} {noun} came back{of_total}{named}",
        f"the result has {n} {noun}{of_total}{named}",
        f"here {'is' if n == 1 else 'are'} {n} {noun}{of_total}{named}",
    ]
    if c.kind == "search":
        plans.append(f"the search returned {n} {noun}{of_total}{named}")
    if c.done:
        plans += [f"I {c.done} and found {n} {noun}{of_total}{named}", f"I {c.done}: {n} {noun}{of_total}{named}"]
    return _pick(rng, plans)


def _count_sentence(c: _Call, rng: random.Random) -> str:
    out = c.out if isinstance(c.out, Mapping) else {}
    n = out.get("count")
    if not isinstance(n, int) or isinstance(n, bool):
        return _pick(rng, (f"I counted the {c.things}", f"the count of {c.things} is done"))
    noun = c.noun(n)
    plans = [
        f"there {'is' if n == 1 else 'are'} {n} {noun}",
        f"I counted {n} {noun}",
        f"the count comes to {n} {noun}",
        f"{n} {noun} in all",
    ]
    if c.done:
        plans.append(f"I {c.done}: {n} {noun}")
    return _pick(rng, plans)


def _get_sentence(c: _Call, rng: random.Random) -> str:
    facts = _facts(c, rng)
    detail = ", ".join(facts)
    plans = [
        f"here is {c.who}" + (f": {detail}" if detail else ""),
        f"I looked up {c.who}" + (f"; it has {detail}" if detail else ""),
        f"{c.who} shows " + (detail if detail else "no further details"),
        f"I pulled up {c.who}" + (f" ({detail})" if detail else ""),
    ]
    if c.done:
        plans.append(f"I {c.done}" + (f": {detail}" if detail else f", {c.who}"))
    return _pick(rng, plans)


def _create_sentence(c: _Call, rng: random.Random) -> str:
    new = _quoted(c.label) if c.label else (str(c.ident) if c.ident is not None else f"the {c.thing}")
    with_id = f" ({c.ident})" if c.label and c.ident is not None and rng.random() < 0.5 else ""
    plans = [
        f"I created {c.who}{with_id}",
        f"{c.who}{with_id} has been added",
        f"the new {c.thing} is {new}{with_id}",
        f"done, {c.who}{with_id} now exists",
        f"I added {c.who}{with_id}",
    ]
    if c.done and c.tool.get("kind") == "create":
        plans.append(f"I {c.done}: {new}{with_id}")
    return _pick(rng, plans)


def _update_sentence(c: _Call, rng: random.Random) -> str:
    out = c.out if isinstance(c.out, Mapping) else {}
    changed = [
        f"{words(_snake(k)).lower()} is now {spoken_value(out[k], rng=rng)}"
        for k in c.args
        if k != c.key
        and k in out
        and (isinstance(out[k], (int, float, str)) or isinstance(out[k], bool))
        and len(str(out[k])) <= 60
    ][:2]
    detail = " and ".join(changed)
    plans = [
        f"I updated {c.who}" + (f": {detail}" if detail else ""),
        f"{c.who} is updated" + (f"; {detail}" if detail else ""),
        f"I changed {c.who}" + (f", so {detail}" if detail else ""),
        f"done, {c.who} " + (f"now has {detail.replace(' is now ', ' ')}" if detail else "is updated"),
    ]
    return _pick(rng, plans)


def _delete_sentence(c: _Call, rng: random.Random) -> str:
    out = c.out if isinstance(c.out, Mapping) else {}
    ident = out.get(c.key)
    gone = f"{c.thing} {ident}" if isinstance(ident, (str, int)) and not isinstance(ident, bool) else f"the {c.thing}"
    plans = [f"I deleted {gone}", f"{gone} has been removed", f"{gone} is deleted", f"I removed {gone}"]
    return _pick(rng, plans)


def _action_sentence(c: _Call, rng: random.Random) -> str:
    action = c.tool.get("action") or {}
    state, verb = action.get("state"), action.get("verb")
    if not state:
        return _pick(rng, (f"I ran that on {c.who}", f"done for {c.who}", f"{c.who} is handled"))
    plans = [f"{c.who} is now {state}", f"done, {c.who} is {state}", f"{c.who} has been marked {state}"]
    if verb:
        plans.append(f"as asked, {c.who} is now {state}")
    return _pick(rng, plans)


def _refusal_sentence(c: _Call, rng: random.Random) -> str:
    reason = c.refusal or ""
    plans = [
        f"{reason}, so nothing changed",
        f"nothing changed: {reason}",
        f"I could not do that for {c.who}: {reason}",
        f"that was refused ({reason}), so {c.who} is unchanged",
        f"the request was turned down because {reason[:1].lower() + reason[1:]}; nothing was changed",
    ]
    return _pick(rng, plans)


_SENTENCE: dict[str, Callable[[_Call, random.Random], str]] = {
    "list": _read_sentence,
    "search": _read_sentence,
    "count": _count_sentence,
    "get": _get_sentence,
    "create": _create_sentence,
    "update": _update_sentence,
    "delete": _delete_sentence,
    "action": _action_sentence,
}
#: How the sentences of one reply follow each other: (between sentences, before the last one).
_JOINTS = (
    ("; ", "; "),
    (". ", ". "),
    (". Then ", ". Finally, "),
    (". Also, ", ". Last, "),
    ("; after that ", "; and "),
    (". Next, ", ". Lastly, "),
)
_OPENERS = ("", "", "", "Done. ", "All set. ", "Okay. ")
#: Openers of a reply whose calls only read.
_READ_OPENERS = ("", "", "", "Here's what I found. ", "Okay. ", "Here you go. ")
_CLOSERS = ("", "", "", " Anything else?", " Let me know if you need more.", " Tell me if you want to go further.")


def call_sentence(call: Mapping[str, Any], tool: Mapping[str, Any], key: str, rng: random.Random) -> str:
    """One sentence (no capital, no closing stop) reporting ``call``'s result; ``tool`` is its ToolSpec (with
    ``spoken_table`` where known), ``key`` its table's key field."""
    c = _Call(call, tool, key)
    if c.refusal is not None:
        return _refusal_sentence(c, rng)
    if isinstance(c.out, Mapping) and "error" in c.out:
        return _pick(rng, (f"the call failed: {c.out.get('message') or c.out['error']}",))
    return _SENTENCE.get(c.kind, _get_sentence)(c, rng)


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def write_reply(
    calls: Sequence[Mapping[str, Any]],
    tools: Mapping[str, Mapping[str, Any]],
    key_of: Callable[[Mapping[str, Any]], str],
    seed: str,
) -> str:
    """The closing reply of a turn that made ``calls`` (each with ``name``, ``arguments``, ``output``).

    Args:
        calls: the turn's calls in order; a refused call's ``output`` is ``{"error", "message"}``.
        tools: ToolSpecs by name (every call's tool).
        key_of: the key field of a tool's table.
        seed: the plan's seed (derive it from the trajectory and turn, e.g. ``f"{trajectory_id}/{turn}/reply"``).

    Returns the reply (sentences capitalised and ended), or ``""`` when there are no calls.

    Raises:
        KeyError: a call names a tool ``tools`` lacks.
    """
    if not calls:
        return ""
    rng = random.Random(seed)
    sentences = [call_sentence(c, tools[c["name"]], key_of(tools[c["name"]]), rng) for c in calls]
    refused = any(isinstance(c.get("output"), Mapping) and "error" in c["output"] for c in calls)
    between, last = _pick(rng, _JOINTS)
    text = sentences[0]
    for i, s in enumerate(sentences[1:], start=1):
        joint = last if i == len(sentences) - 1 else between
        text += joint + (_capital(s) if joint.endswith(". ") else s)
    reads_only = all(tools[c["name"]].get("kind") in ("list", "search", "count", "get") for c in calls)
    opener = "" if refused else _pick(rng, _READ_OPENERS if reads_only else _OPENERS)
    if opener.lower().startswith("done") and text.lower().startswith("done"):
        opener = ""
    text = (opener + _capital(text)).rstrip(".") + "."
    return text + _pick(rng, _CLOSERS)


def join_replies(first: str, second: str) -> str:
    """Two replies as one (a merged turn's, or a reply with one more call's report): the first without its
    closing question, the second without its opening word, so the joined reply opens and closes once."""
    for closer in sorted((c for c in _CLOSERS if c), key=len, reverse=True):
        if first.endswith(closer):
            first = first[: -len(closer)]
            break
    for opener in sorted({o for o in (*_OPENERS, *_READ_OPENERS) if o}, key=len, reverse=True):
        if second.startswith(opener):
            second = second[len(opener) :]
            break
    return " ".join(x for x in (first.strip(), second.strip()) if x)
