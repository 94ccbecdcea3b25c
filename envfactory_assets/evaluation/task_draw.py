"""Disjoint, content-independent samples of benchmark tasks.

Every benchmark orders its tasks by sha256 of their id, a fixed order that does not favour short or easy
tasks and does not follow a file's order. Draw ``k`` of size ``n`` is the ``k``-th block of ``n`` tasks in that
order, so two draws never share a task: a recipe tuned on draw 1 and reported once on draw 0 is reported on
tasks it was never chosen on (the split between a development and a test set).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def hash_order_key(task_id: str) -> str:
    """The sort key of a task id: its sha256 hex digest."""
    return hashlib.sha256(task_id.encode()).hexdigest()


def draw_block(items: Sequence[T], task_id: Callable[[T], str], n: int | None, draw: int, what: str) -> list[T]:
    """The ``draw``-th block of ``n`` items in order of sha256 of their id.

    Args:
        items: the candidate tasks, in any order.
        task_id: an item's id (the hash order's input).
        n: block size; None takes every item (only draw 0 exists then).
        draw: which block, 0 for the first; the last block may hold fewer than ``n`` items.
        what: the benchmark's name, for error messages.

    Returns:
        At most ``n`` items, sorted by the hash of their id.

    Raises:
        ValueError: ``draw`` negative or not an int; ``draw`` > 0 with ``n`` None (all tasks are one block); a
            draw past the last task (the block would be empty while ``n`` > 0).
    """
    if isinstance(draw, bool) or not isinstance(draw, int) or draw < 0:
        raise ValueError(f"{what}: task_draw={draw!r}: expected a whole number >= 0")
    ordered = sorted(items, key=lambda item: hash_order_key(task_id(item)))
    if n is None:
        if draw:
            raise ValueError(f"{what}: task_draw={draw} needs a task count (every task is one draw, draw 0)")
        return ordered
    block = ordered[draw * n : (draw + 1) * n]
    if n and not block:
        raise ValueError(
            f"{what}: task_draw={draw} of {n} tasks starts at task {draw * n}, past the {len(ordered)} tasks "
            f"there are (draws 0 to {max(0, (len(ordered) - 1) // n)} exist)"
        )
    return block
