"""Transfers of an amount between rows of one table (``POST /accounts/{account_id}/transfers``).

A transfer operation is a literal after an item path that names moving an amount: ``transfer(s)`` from the
row to another row of the same table, ``withdraw``/``withdrawal(s)``/``debit`` out of the row and
``deposit(s)``/``top_up``/``topup`` into it. It is kept when

- the operation is a POST whose body (or query) holds an amount (``amount``, ``quantity``, ``qty``,
  ``units``, ``credits``, ``points``, ``value``);
- the path has no GET and no item path below it: ``/goals/{goal_id}/deposits`` with
  ``/goals/{goal_id}/deposits/{deposit_id}`` or a GET list keeps rows of its own (a nested resource);
- a transfer names its destination in the body (``to``, ``destination``, ``target``, ``recipient``... or a
  name starting ``to_``/``destination_``, unless its last word says a date, name or address:
  :data:`NOT_DESTINATION_WORDS`); a transfer without one moves the amount out of the row (a withdrawal).

The amount moves through one numeric field of the row, its *balance*: the first integer or number field
named like one (``balance``, ``quantity``, ``stock``, ``amount_available``...), else a new ``balance`` field
(:func:`balance_field`). The field may not go below its ``minimum`` (0 where the schema states none) nor above
its ``maximum``: a transfer that would is refused and changes nothing. Everything here is a function of the
document alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envfactory_assets.sources.names import snake_case

#: path words that name a transfer, by the way the amount moves
TRANSFER_SEGMENTS = {
    "transfer": "transfer",
    "transfers": "transfer",
    "withdraw": "withdraw",
    "withdrawal": "withdraw",
    "withdrawals": "withdraw",
    "debit": "withdraw",
    "deposit": "deposit",
    "deposits": "deposit",
    "top_up": "deposit",
    "topup": "deposit",
}
#: body or query names of the amount moved, first preferred
AMOUNT_NAMES = ("amount", "quantity", "qty", "units", "credits", "points", "value")
#: body names (or their first word) of a transfer's destination
DESTINATION_WORDS = ("to", "destination", "target", "recipient", "receiver", "beneficiary", "payee", "dest")
#: last words of a body name that say when, how or to whom by a value that is no row's identifier
#: (``target_date``, ``recipient_email``, ``payee_name``): such a name is no destination
NOT_DESTINATION_WORDS = frozenset(
    {"date", "time", "at", "on", "name", "email", "phone", "address", "type", "currency", "note", "memo", "message"}
)
#: field names of a row's balance, first preferred; a name holding ``balance`` counts too
BALANCE_NAMES = (
    "balance",
    "available_balance",
    "current_balance",
    "amount_available",
    "available_amount",
    "quantity_available",
    "available_quantity",
    "quantity",
    "stock",
    "stock_level",
    "in_stock",
    "on_hand",
    "inventory",
    "available",
    "credits",
    "points",
    "funds",
    "qty",
)


@dataclass(frozen=True)
class TransferShape:
    """What a transfer operation's request names: ``verb`` (``transfer``, ``withdraw`` or ``deposit``), the
    ``amount`` parameter's name as the API writes it (snake_case) and, for a transfer, its ``destination``
    parameter's (snake_case; None for a withdrawal or deposit)."""

    verb: str
    amount: str
    destination: str | None


def transfer_verb(segment: str) -> str | None:
    """The way a path literal moves an amount (``"transfers"`` -> ``"transfer"``, ``"withdraw"``), or None."""
    return TRANSFER_SEGMENTS.get(snake_case(segment))


def transfer_shape(segment: str, names: list[str]) -> TransferShape | None:
    """The :class:`TransferShape` of a POST on a path ending in ``segment`` whose request holds the parameters
    ``names`` (snake_case body properties and query parameters), or None when it names no amount (module
    docstring)."""
    verb = transfer_verb(segment)
    if verb is None:
        return None
    amount = next((a for a in AMOUNT_NAMES if a in names), None)
    if amount is None:
        return None
    if verb != "transfer":
        return TransferShape(verb, amount, None)
    destination = next(
        (
            n
            for n in names
            if n != amount
            and (n in DESTINATION_WORDS or n.split("_")[0] in DESTINATION_WORDS)
            and n.split("_")[-1] not in NOT_DESTINATION_WORDS
        ),
        None,
    )
    return TransferShape("transfer", amount, destination) if destination else TransferShape("withdraw", amount, None)


def balance_field(fields: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any], bool]:
    """``(name, schema, synthesized)`` of the field a transfer moves an amount through, on a row with ``fields``
    (``{name: JSON schema}``): the first integer or number field named in :data:`BALANCE_NAMES` (or holding
    ``balance``), else a new number field ``balance``. The schema gets ``minimum`` 0 where it states none, so a
    balance never goes negative unless the API says it may."""
    numeric = {n: s for n, s in fields.items() if s.get("type") in ("integer", "number") and "enum" not in s}
    name = next((n for n in BALANCE_NAMES if n in numeric), None)
    name = name or next((n for n in numeric if "balance" in snake_case(n)), None)
    if name is None:
        taken = set(fields)
        new = next(n for n in ("balance", "transfer_balance", "amount_balance") if n not in taken)
        return new, {"type": "number", "minimum": 0}, True
    schema = dict(numeric[name])
    schema.setdefault("minimum", 0)
    return name, schema, False
