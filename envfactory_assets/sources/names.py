"""Normalization of identifiers taken from untrusted specs into tool and field names.

Tool names must match ``^[a-zA-Z_][a-zA-Z0-9_]{0,63}$``: valid for OpenAI function calling and as
Python identifiers (docs/design.md, "Paper settings and measured facts").
"""

from __future__ import annotations

import functools
import keyword
import re
import unicodedata
from typing import Any

TOOL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,63}$")
MAX_NAME_LEN = 64

_CAMEL_1 = re.compile(r"([A-Z]+)([A-Z][a-z])")
_CAMEL_2 = re.compile(r"([a-z0-9])([A-Z])")
_NON_WORD = re.compile(r"[^a-zA-Z0-9]+")


def snake_case(text: str) -> str:
    """Return ``text`` as lower snake_case ASCII, or ``""`` when nothing usable is left.

    Accents are folded (``"Café"`` -> ``"cafe"``); other non-ASCII characters, dots, dashes and
    spaces become separators; camelCase is split (``"listPets.v2"`` -> ``"list_pets_v2"``).
    """
    folded = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode("ascii")
    folded = _CAMEL_1.sub(r"\1_\2", folded)
    folded = _CAMEL_2.sub(r"\1_\2", folded)
    return _NON_WORD.sub("_", folded).strip("_").lower()


def to_identifier(text: str, *, fallback: str, max_len: int = MAX_NAME_LEN) -> str:
    """Normalize ``text`` into a name matching :data:`TOOL_NAME_RE` that is not a Python keyword.

    Falls back to ``fallback`` (which must itself normalize to something non-empty) when ``text``
    has no ASCII letters or digits. Over-long names are cut to ``max_len`` characters.

    Raises:
        ValueError: if neither ``text`` nor ``fallback`` yields a usable identifier.
    """
    name = snake_case(text) or snake_case(fallback)
    if not name:
        raise ValueError(f"cannot derive an identifier from {text!r} or fallback {fallback!r}")
    if name[0].isdigit():
        name = f"n_{name}"
    name = name[:max_len].rstrip("_") or name[:max_len]
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        name = f"{name}_"
    assert TOOL_NAME_RE.match(name), name
    return name


#: Longest readable tool name: longer ones are cut or wrapped by some chat templates and read as sentences.
MAX_TOOL_NAME_CHARS = 40
#: A counter or an empty word in a name: ``payments_2_id``, ``get_user_1``, ``case__id``.
_NAME_ARTEFACT = re.compile(r"__|_\d+(?=_|$)")


def name_artefact(name: str) -> bool:
    """True when ``name`` carries a counter (a word of digits only, ``get_user_2``, ``payments_2_id``) or an empty
    word (``case__id``, or a leading or trailing ``_``): what a de-duplication or a cut leaves, no word a person
    reads."""
    return bool(_NAME_ARTEFACT.search(name)) or name.startswith("_") or name.endswith("_")


def tool_name_problems(names: list[str]) -> dict[str, list[str]]:
    """The tool names of one environment that are not readable, by problem: ``long`` (over
    :data:`MAX_TOOL_NAME_CHARS` characters), ``artefact`` (:func:`name_artefact`) and ``duplicate`` (given
    more than once). A name may be in several lists; each list keeps the order of ``names``."""
    seen: set[str] = set()
    duplicate = []
    for n in names:
        if n in seen:
            duplicate.append(n)
        seen.add(n)
    return {
        "long": [n for n in names if len(n) > MAX_TOOL_NAME_CHARS],
        "artefact": [n for n in names if name_artefact(n)],
        "duplicate": duplicate,
    }


def unique_name(name: str, taken: set[str], max_len: int = MAX_NAME_LEN) -> str:
    """Return ``name`` or ``name_2``, ``name_3``... (cut to ``max_len``) so that it is not in ``taken``.

    Adds the returned name to ``taken``.
    """
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        suffix = f"_{n}"
        candidate = name[: max_len - len(suffix)] + suffix
    taken.add(candidate)
    return candidate


#: Last words ending in ``-ches`` whose singular keeps the ``e`` (``caches`` -> ``cache``, not ``cach``).
_CHE_NOUNS = frozenset({"caches", "niches", "cliches", "avalanches", "headaches", "moustaches", "mustaches"})


def singular(word: str) -> str:
    """Crude English singular of a snake_case resource name (``"companies"`` -> ``"company"``); a last word of
    one or two letters is kept (``send_as`` is not ``send_a``)."""
    last = word.rsplit("_", 1)[-1]
    if len(last) <= 2:
        return word
    if last in _CHE_NOUNS:
        return word[:-1]
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "ches", "shes", "iases")) or re.search(r"[^aeiou]uses$", word):
        return word[:-2]  # "statuses" -> "status", "aliases" -> "alias" (but "houses", "causes" keep their e)
    if word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) > 3:
        return word[:-1]
    return word


def plural(word: str) -> str:
    """Crude English plural of a snake_case noun, the inverse of :func:`singular` on the names it makes
    (``"bucket"`` -> ``"buckets"``, ``"address"`` -> ``"addresses"``, ``"policy"`` -> ``"policies"``)."""
    if singular(word) != word:
        return word  # already plural ("buckets"): a plural is not made twice
    if re.search(r"[^aeiou]y$", word):
        return word[:-1] + "ies"
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    return word + "s"


def _vowel(tok: str) -> bool:
    return bool(re.search(r"[aeiouy]", tok))


def _sayable(tok: str) -> bool:
    # a lone letter ("b", "o" of /b/{bucket}/o) or a vowel-less cut ("sdd", "v4") is no word a person says
    return not tok.isdigit() and len(tok) > 1 and (len(tok) > 3 or _vowel(tok))


#: A word with an API version glued to its end (``datasetsv2`` of the path ``/datasetsv2``): the word is said
#: without it. Three letters at least before the ``v``, so ``ipv4`` and ``dev1`` stay as they are.
_GLUED_VERSION = re.compile(r"([a-z]{3,})v\d+")


def spoken_words(name: str) -> list[str]:
    """A table or field name as the words a person says (queries, replies and generated values use it): digits,
    single letters, vowel-less abbreviations and a version glued to a word dropped (``"webhooks_2"`` ->
    ``["webhooks"]``, ``"whitelist_sdd"`` -> ``["whitelist"]``, ``"datasetsv2"`` -> ``["datasets"]``); the
    name's own words when nothing would be left."""
    toks = [_GLUED_VERSION.sub(r"\1", t) for t in re.split(r"[_\s]+", name.strip().lower()) if t]
    kept = [t for t in toks if _sayable(t)]
    return kept or toks


def speakable(name: str) -> bool:
    """True when :func:`spoken_words` keeps a word of ``name``; False for names a person cannot say as they
    are (``"b"``, ``"v4_7"``): such a table is named by its operations' words instead."""
    return any(_sayable(t) for t in re.split(r"[_\s]+", name.strip().lower()) if t)


#: Words of an operation's name or summary that say what is done or how, not which rows it is about.
_NOT_NOUNS = frozenset(
    "list get show create add post put patch insert update delete remove find search count retrieve fetch read "
    "set edit modify make register replace upsert query browse view describe return all new one by of for the "
    "an and or at in on to with from into id ids specified given single detail information info its this that "
    "which are is be can will your permanently paginated optionally filtered matching criteria".split()
)


def name_nouns(text: str, keep: frozenset[str] = frozenset()) -> list[str]:
    """The words of an operation's name or summary that may name its rows, in order: sayable words (and those
    of ``keep``, such as the table's own abbreviation ``"sms"``) that are not verbs, articles or the like
    (``"storage.buckets.list"`` -> ``["storage", "buckets"]``, ``"Gets a shipment details"`` ->
    ``["shipment"]``)."""
    return [t for t in snake_case(text).split("_") if (_sayable(t) or t in keep) and singular(t) not in _NOT_NOUNS]


def split_glued(word: str, bigrams: set[tuple[str, str]]) -> list[str]:
    """``word`` as the two words the spec's own text writes apart (``bigrams``: adjacent words of its
    operation names and summaries): ``"rateplans"`` -> ``["rate", "plans"]`` when the spec says "rate plans"
    somewhere; ``[word]`` when it never does (``"webhooks"`` stays one word unless the spec writes "web
    hooks"). Each part has at least three letters."""
    for a, b in sorted(bigrams):
        rest = word[len(a) :]
        if len(a) >= 3 and len(rest) >= 3 and word.startswith(a) and (rest == b or singular(rest) == singular(b)):
            return [a, rest]
    return [word]


#: Plurals of two-letter abbreviations, which the length guard of :func:`singular` keeps whole.
_SHORT_PLURALS = frozenset({"ids", "ips", "vms", "dbs"})


def spoken_thing(table: str) -> str:
    """One row of ``table`` as a person names it: ``"webhooks_2"`` -> ``"webhook"``."""
    toks = spoken_words(table)
    if toks and toks[-1].lower() in _SHORT_PLURALS:
        # "ids" is "id"s, not a word of its own ("Create a ids.", "the idses"); :func:`singular` keeps it whole
        # because tool and table names are made from it
        return " ".join(toks[:-1] + [toks[-1][:-1]])
    return " ".join(toks[:-1] + [singular(toks[-1])]) if toks else singular(table).replace("_", " ").strip()


def spoken_things(table: str) -> str:
    """Rows of ``table`` as a person names them: ``"webhooks_2"`` -> ``"webhooks"``."""
    thing = spoken_thing(table)
    if thing.endswith(("s", "x", "ch", "sh")):
        return thing + "es"
    if thing.endswith("y") and thing[-2:-1] not in ("a", "e", "i", "o", "u"):
        return thing[:-1] + "ies"
    return thing + "s"


@functools.lru_cache(maxsize=1)
def _inflect_engine() -> Any:
    # imported on first use: inflect 7 wraps its API in typeguard checks at import time (~1-3 s), which
    # every command importing this module (serve-env, the CLI) paid although only the writer uses it
    import inflect

    return inflect.engine()


@functools.lru_cache(maxsize=4096)
def indefinite_article(word: str) -> str:
    """``"a"`` or ``"an"`` for ``word`` by its sound, not its first letter (``"user"`` -> ``"a"``,
    ``"hour"`` -> ``"an"``, ``"MCP"`` -> ``"an"``), as the ``inflect`` library decides it.

    Raises:
        ValueError: ``word`` is empty or blank.
    """
    if not word or not word.strip():
        raise ValueError("indefinite_article: word is empty")
    return _inflect_engine().a(word.strip()).split(" ", 1)[0].lower()


@functools.lru_cache(maxsize=4096)
def inflected_plural(word: str) -> str:
    """The plural of the singular noun ``word`` as the ``inflect`` library makes it (``"product"`` ->
    ``"products"``, ``"API-Key"`` -> ``"API-Keys"``, ``"person"`` -> ``"people"``); spelled the same, the
    ``-s`` form of a verb (``"apply"`` -> ``"applies"``).

    Raises:
        ValueError: ``word`` is empty or blank.
    """
    if not word or not word.strip():
        raise ValueError("inflected_plural: word is empty")
    return _inflect_engine().plural_noun(word.strip())


@functools.lru_cache(maxsize=4096)
def reads_plural(word: str) -> bool:
    """True when ``word`` is a plural noun by both :func:`singular` and the ``inflect`` library (``"records"``,
    ``"votes"``); False for a singular one (``"product"``, ``"status"``) and for words either reads otherwise
    (``"data"``, ``"news"``, ``"analysis"``), so a caller that changes a phrase only on True changes none of
    those.

    Raises:
        ValueError: ``word`` is empty or blank.
    """
    if not word or not word.strip():
        raise ValueError("reads_plural: word is empty")
    low = word.strip().lower()
    if singular(low) == low:
        return False
    single = _inflect_engine().singular_noun(low)
    return bool(single) and single != low


@functools.lru_cache(maxsize=4096)
def reads_singular(word: str) -> bool:
    """True when ``word`` is a singular countable noun by both :func:`singular` and the ``inflect`` library
    (``"product"``, ``"account"``, ``"API-Key"``); False for plurals and for words inflect reads as plural or
    uncountable (``"data"``, ``"information"``, ``"sms"``).

    Raises:
        ValueError: ``word`` is empty or blank.
    """
    if not word or not word.strip():
        raise ValueError("reads_singular: word is empty")
    low = word.strip().lower()
    return singular(low) == low and _inflect_engine().singular_noun(low) is False and inflected_plural(low) != low


#: A description with at least this many words counts as a sentence even without a closing period.
MIN_SENTENCE_WORDS = 3


def plain_name(text: str) -> str:
    """``text`` as lowercase letters and digits only, so a name compares equal however it is written
    (``"get_site"``, ``"getSite"`` and ``"Get site"`` -> ``"getsite"``)."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def is_sentence(text: str | None, names: tuple[str | None, ...] = ()) -> bool:
    """True when ``text`` reads as a description of at least a sentence: it has :data:`MIN_SENTENCE_WORDS` words
    or more, or two or more ending with a period, and is not one of ``names`` (an operation id, a tool's or a
    field's name) written another way (:func:`plain_name`). False for None, empty or blank text: a one- or
    two-word label ("Status", "Delete project") or an operation id used as a summary (``getSiteRfdiagRecording``)
    is no sentence."""
    t = (text or "").strip()
    if not t or any(n and plain_name(n) == plain_name(t) for n in names):
        return False
    # one word is no sentence even with its period ("Optional.", "Deprecated."): it says nothing of the value
    n_words = len(t.split())
    return n_words >= MIN_SENTENCE_WORDS or (t.endswith(".") and n_words > 1)
