"""Checks of what the user says in a conversation, independent of the code that writes it.

Two detectors, plain Python over stored refined trajectories (no writer, solver or simulated user is
imported, so a fault shared by the writer and the reader cannot hide here):

- :func:`clarification_findings`: every clarification exchange (assistant question, user answer) of a turn,
  with the fields it asks for and, of those, the ones the conversation had already given. A field is asked
  for when the user's answer states the value the turn's calls use for it or, when the answer states none,
  the question names it (its name's words); it was given when the turn's request, an earlier answer of the
  turn or an earlier turn's user text states that value in any form the writer uses (quoted, bare, a date
  written out, a flag or a number right after the field's words, an amount after the verb that moves it). A
  question is malformed when it names one thing twice ("Which query and query ..."), or a question or an
  answer reads "the is ..." / "is is".
- :func:`spec_identifiers`: spec identifiers in a user message outside quoted values: a snake_case or
  camelCase word, a path fragment (``/v1/x``, ``{id}``), or a parameter of the spec written as its raw words
  when those hold a short form the spec does not write out ("qr no", "b id").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from typing import Any

_MONTHS = "january february march april may june july august september october november december".split()
_QUOTED = re.compile(r"'[^']*'(?=[\s,.:;)!?]|$)")
_WORD = re.compile(r"[a-z0-9]+")


def _tokens(name: str) -> list[str]:
    """Lowercase words of a field name, snake_case or camelCase (``orgUnit_id`` -> ``["org", "unit", "id"]``)."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return [t for t in re.split(r"[^a-zA-Z0-9]+", spaced.lower()) if t]


def _field_words(name: str) -> list[str]:
    """The words of a field name that say what it is (no ``is``/``has`` prefix, no ``id``)."""
    toks = _tokens(name)
    core = [t for t in toks if t not in ("is", "has", "id", "ids")]
    return core or toks


def _dates_in(text: str) -> set[str]:
    """ISO dates (``YYYY-MM-DD``) written in ``text``: ISO, "26 May 2026" or "May 26, 2026"."""
    found = {m.group(0) for m in re.finditer(r"\b\d{4}-\d{2}-\d{2}", text)}
    low = text.lower()
    month = "|".join(_MONTHS)
    for m in re.finditer(rf"\b(\d{{1,2}}) ({month}) (\d{{4}})\b", low):
        found.add(_iso(int(m.group(3)), _MONTHS.index(m.group(2)) + 1, int(m.group(1))))
    for m in re.finditer(rf"\b({month}) (\d{{1,2}}), (\d{{4}})\b", low):
        found.add(_iso(int(m.group(3)), _MONTHS.index(m.group(1)) + 1, int(m.group(2))))
    return found - {""}


def _iso(year: int, month: int, day: int) -> str:
    try:
        return date(year, month, day).isoformat()
    except ValueError:
        return ""


def _near_field(text: str, name: str, value_re: str) -> bool:
    """True when ``value_re`` follows one of the field's words within three words in ``text``."""
    low = text.lower()
    for word in _field_words(name):
        if re.search(rf"\b{re.escape(word)}\w*(?:\W+\w+){{0,3}}?\W+{value_re}", low):
            return True
    return False


def _moved_amount(number: str) -> re.Pattern[str]:
    """A pattern of ``number`` (regex-escaped) as the amount a request moves: "move 33 from", "deposit 20 into"."""
    return re.compile(rf"\b(?:move|transfer|withdraw|deposit)\s+{number}\s+(?:from|into|to|out of)\b")


def value_given(name: str, value: Any, texts: Sequence[str]) -> bool:
    """True when one of ``texts`` states ``value`` of field ``name``: a string quoted or as a whole phrase
    (any case; a date also written out), a number, a flag or a string under 3 characters right after the
    field's words, a number also as the amount a request moves ("move 33 from ...", "deposit 20 into ...");
    a list or an object when each item is; an empty value never needs giving."""
    if isinstance(value, dict):
        return bool(value) and all(value_given(name, v, texts) for v in value.values())
    if isinstance(value, list):
        return bool(value) and all(value_given(name, v, texts) for v in value)
    if value is None or value == "":
        return False
    if isinstance(value, bool):
        said = r"(?:yes|no|true|false|on|off)\b"
        return any(_near_field(t, name, said) for t in texts)
    if isinstance(value, (int, float)):
        number = re.escape(json.dumps(value))
        return any(
            _near_field(t, name, rf"(?:set to |of |is |to )?{number}\b") or _moved_amount(number).search(t.lower())
            for t in texts
        )
    text_value = str(value)
    if len(text_value) < 3:
        # a letter or two quoted in one place ('a') is as likely another field's value: only next to this
        # field's words does it state this one
        short = rf"'?{re.escape(text_value.lower())}'?(?![\w'])"
        return any(_near_field(t, name, rf"(?:is |of |to )?{short}") for t in texts)
    iso = re.match(r"^(\d{4}-\d{2}-\d{2})(?:T|$)", text_value)
    for t in texts:
        if f"'{text_value}'" in t or (
            len(text_value) >= 3 and re.search(rf"(?<![\w']){re.escape(text_value.lower())}(?![\w'])", t.lower())
        ):
            return True
        if iso and iso.group(1) in _dates_in(t):
            return True
    return False


def _named_in(question: str, name: str) -> bool:
    words = set(_WORD.findall(question.lower()))
    core = _field_words(name)
    return bool(core) and all(w in words for w in core)


_REPEATED = re.compile(r"\b(\w+(?: \w+){0,2}) and \1\b", re.IGNORECASE)
_BROKEN = re.compile(r"\b(?:the (?:is|has) |is is\b|has has\b)", re.IGNORECASE)


def malformed(question: str, answer: str) -> str | None:
    """Why a clarification exchange does not read as a person would write it, or None: a question naming one
    thing twice ("Which query and query should I use?"), or "the is ..." / "is is" in either message."""
    if _REPEATED.search(question):
        return f"names a thing twice: {_REPEATED.search(question).group(0)!r}"
    for text in (question, answer):
        m = _BROKEN.search(text)
        if m:
            return f"broken phrase {m.group(0).strip()!r}"
    return None


def _user_texts(turn: Mapping[str, Any]) -> list[str]:
    return [turn.get("query") or ""] + [
        m.get("content") or "" for m in turn.get("clarification") or [] if m.get("role") == "user"
    ]


def clarification_findings(turns: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One finding per clarification question of a refined trajectory's ``turns`` (each turn's
    ``clarification``: alternating assistant question and user answer; its ``calls`` with ``arguments``).

    Returns ``[{"turn", "question", "answer", "asked", "given", "malformed"}]``: ``asked`` the argument names of
    the turn's calls the question asks for, ``given`` those of them whose value the conversation stated before
    the question (:func:`value_given` over the turn's query, its earlier answers and earlier turns' user
    text), ``malformed`` the reason of :func:`malformed` or None."""
    out = []
    earlier: list[str] = []
    for index, turn in enumerate(turns):
        dialogue = list(turn.get("clarification") or [])
        before = earlier + [turn.get("query") or ""]
        arguments: dict[str, list[Any]] = {}
        for call in turn.get("calls") or []:
            for name, value in (call.get("arguments") or {}).items():
                arguments.setdefault(name, []).append(value)
        for q, a in zip(dialogue[::2], dialogue[1::2], strict=False):
            question, answer = q.get("content") or "", a.get("content") or ""
            answered = {n: [v for v in vs if value_given(n, v, [answer])] for n, vs in arguments.items()}
            # The answer's values say what was asked; a question's words count only when the answer gives none,
            # since one field's name is often a word of another's label ("name" in "given name").
            asked = [n for n in arguments if answered[n]] or [n for n in arguments if _named_in(question, n)]
            # the value the answer gives was stated before; with no value in the answer, every call's was
            given = [
                n
                for n in asked
                if (
                    any(value_given(n, v, before) for v in answered[n])
                    if answered[n]
                    else all(value_given(n, v, before) for v in arguments[n])
                )
            ]
            out.append(
                {
                    "turn": index,
                    "question": question,
                    "answer": answer,
                    "asked": asked,
                    "given": given,
                    "malformed": malformed(question, answer),
                }
            )
            before = before + [answer]
        earlier += _user_texts(turn)
    return out


def kept_omissions(turn: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The ``user_clarification`` operators of a refined ``turn`` that were kept: values its request leaves out
    on purpose, for the user to give when asked."""
    return [
        o for o in turn.get("operators") or [] if o.get("operator") == "user_clarification" and not o.get("reverted")
    ]


def omissions_not_asked(turn: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The :func:`kept_omissions` of ``turn`` whose value no user answer of its ``clarification`` states."""
    answers = [m.get("content") or "" for m in turn.get("clarification") or [] if m.get("role") == "user"]
    return [o for o in kept_omissions(turn) if not value_given(o["argument"], o["value"], answers)]


def clarification_figures(rows: Iterable[Mapping[str, Any]], examples: int = 10) -> dict[str, Any]:
    """Clarification questions of passed refined trajectory ``rows`` (:func:`clarification_findings`):
    ``{"turns", "turns_with_clarification", "questions", "asking_for_given", "asking_for_given_share",
    "malformed", "omissions", "omissions_asked", "omissions_asked_share", "examples"}``.

    ``omissions`` counts kept turns whose request left out a user-providable value on purpose (a kept
    ``user_clarification`` operator), ``omissions_asked`` those whose clarification asks for that value (its
    answer states it); ``examples`` are up to ``examples`` questions that ask for a given value or are
    malformed, as ``{"trajectory", "turn", "request", "question", "answer", "given", "malformed"}``."""
    n_turns = with_clar = questions = given = broken = omitted = omitted_asked = 0
    shown: list[dict[str, Any]] = []
    for row in rows:
        if row.get("status", "passed") != "passed":
            continue
        turns = row["turns"]
        n_turns += len(turns)
        with_clar += sum(1 for t in turns if t.get("clarification"))
        for t in turns:
            n_omitted = len(kept_omissions(t))
            omitted += n_omitted
            omitted_asked += n_omitted - len(omissions_not_asked(t))
        for f in clarification_findings(turns):
            questions += 1
            given += bool(f["given"])
            broken += f["malformed"] is not None
            if (f["given"] or f["malformed"]) and len(shown) < examples:
                shown.append(
                    {
                        "trajectory": row.get("id"),
                        "turn": f["turn"],
                        "request": turns[f["turn"]].get("query"),
                        "question": f["question"],
                        "answer": f["answer"],
                        "given": f["given"],
                        "malformed": f["malformed"],
                    }
                )
    return {
        "turns": n_turns,
        "turns_with_clarification": with_clar,
        "turns_with_clarification_share": round(with_clar / n_turns, 4) if n_turns else 0.0,
        "questions": questions,
        "asking_for_given": given,
        "asking_for_given_share": round(given / questions, 4) if questions else 0.0,
        "malformed": broken,
        "omissions": omitted,
        "omissions_asked": omitted_asked,
        "omissions_asked_share": round(omitted_asked / omitted, 4) if omitted else 1.0,
        "examples": shown,
    }


# ----------------------------------------------------------------------------- spec identifiers in user text
_SNAKE = re.compile(r"\b[a-zA-Z][a-zA-Z0-9]*(?:_[a-zA-Z0-9]+)+\b")
_CAMEL = re.compile(r"\b[a-z]+(?:[A-Z][a-z0-9]+)+\b")
_PATH = re.compile(r"(?<![\w.])/(?:v\d+|[a-z][\w-]*)/[\w{}/-]*|\{[a-zA-Z_][\w]*\}")
#: short forms a field name may hold that a person writes out ("no" is "number" in ``qr_no``)
_SHORT_FORMS = frozenset(
    "no num nr qty amt desc addr tel msg ref cnt pct img acct dob src dst dest tz dt ts lang cat doc pwd usr "
    "lng lon temp cfg conf env info attr val str int obj arr idx seq".split()
)


def _unexplained(token: str) -> bool:
    """A word of a field name a person would not write as it is: a short form, a lone letter, or 2-3
    letters without a vowel that are not an initialism people say ("qr", "b")."""
    if token in _SHORT_FORMS:
        return True
    if token.isdigit() or token == "id":
        return False
    return len(token) == 1 or (len(token) <= 3 and not re.search(r"[aeiouy]", token))


def spoken_names(parameters: Iterable[str]) -> list[tuple[str, str]]:
    """``(parameter, its words)`` for the parameters whose words hold a short form (:func:`_unexplained`):
    ``qr_no`` -> ``("qr_no", "qr no")``; such words in a user message are the spec's, not a person's."""
    out = []
    for name in parameters:
        toks = _tokens(name)
        if len(toks) > 1 and any(_unexplained(t) for t in toks):
            out.append((name, " ".join(toks)))
    return out


def spec_identifiers(text: str, named: Sequence[tuple[str, str]] = ()) -> list[str]:
    """Spec identifiers in one user message, outside quoted values: snake_case or camelCase words, path
    fragments (``/v1/x``, ``{id}``), and ``named`` parameters' words (:func:`spoken_names`), each once."""
    bare = _QUOTED.sub(" ", text)
    found = [m.group(0) for pat in (_SNAKE, _CAMEL, _PATH) for m in pat.finditer(bare)]
    # as the spec writes them, in lowercase ("color rgb"); "color RGB" is how a person writes the field
    found += [said for _, said in named if re.search(rf"\b{re.escape(said)}\b", bare)]
    return list(dict.fromkeys(found))


def user_text_figures(
    rows: Iterable[Mapping[str, Any]], parameters: Mapping[str, Iterable[str]], examples: int = 10
) -> dict[str, Any]:
    """User messages (each turn's query and clarification answers) of passed refined trajectory ``rows`` that
    contain a spec identifier (:func:`spec_identifiers`); ``parameters``: ``{env_id: parameter names}`` of the
    environments (the rows' ``env_ids`` pick theirs). Returns ``{"user_turns", "with_identifier", "share",
    "by_kind", "examples"}``, ``examples`` up to ``examples`` ``{"text", "identifiers"}``."""
    named_of: dict[str, list[tuple[str, str]]] = {e: spoken_names(ps) for e, ps in parameters.items()}
    n = hits = 0
    kinds: dict[str, int] = {}
    shown = []
    for row in rows:
        if row.get("status", "passed") != "passed":
            continue
        named = [p for e in row.get("env_ids") or [] for p in named_of.get(e, [])]
        for turn in row["turns"]:
            for text in _user_texts(turn):
                n += 1
                found = spec_identifiers(text, named)
                if not found:
                    continue
                hits += 1
                for ident in found:
                    kind = (
                        "path"
                        if _PATH.fullmatch(ident)
                        else "snake_case"
                        if "_" in ident
                        else "camelCase"
                        if _CAMEL.fullmatch(ident)
                        else "parameter words"
                    )
                    kinds[kind] = kinds.get(kind, 0) + 1
                if len(shown) < examples:
                    shown.append({"text": text, "identifiers": found})
    return {
        "user_turns": n,
        "with_identifier": hits,
        "share": round(hits / n, 4) if n else 0.0,
        "by_kind": kinds,
        "examples": shown,
    }
