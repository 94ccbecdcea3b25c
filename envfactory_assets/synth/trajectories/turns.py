"""Turn segmentation of a sampled tool chain (EnvFactory paper, QueryGen).

After each tool the current turn ends with probability ``len(turn) / max_turn_len`` and always at
``max_turn_len`` (paper: 5), so turns hold 1-5 tool calls.
"""

from __future__ import annotations

import random

MAX_TURN_LEN = 5


def split_turns(
    n_tools: int, rng: random.Random, max_turn_len: int = MAX_TURN_LEN, min_turns: int = 1
) -> list[list[int]]:
    """Split tool positions ``0..n_tools-1`` into consecutive turns.

    ``min_turns`` forces extra splits (at random boundaries) when the draw gives fewer turns and there
    are enough tools. Raises ValueError for ``n_tools < 0`` or ``max_turn_len < 1``.
    """
    if n_tools < 0 or max_turn_len < 1:
        raise ValueError(f"n_tools must be >= 0 and max_turn_len >= 1, got {n_tools}, {max_turn_len}")
    turns: list[list[int]] = []
    current: list[int] = []
    for i in range(n_tools):
        current.append(i)
        if len(current) >= max_turn_len or rng.random() < len(current) / max_turn_len:
            turns.append(current)
            current = []
    if current:
        turns.append(current)
    while len(turns) < min(min_turns, n_tools):
        splittable = [t for t in range(len(turns)) if len(turns[t]) > 1]
        if not splittable:
            break
        t = rng.choice(splittable)
        cut = rng.randint(1, len(turns[t]) - 1)
        turns[t : t + 1] = [turns[t][:cut], turns[t][cut:]]
    return turns
