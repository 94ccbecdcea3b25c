"""Type checks for the plain settings dataclasses (``SFTConfigSpec``, ``GRPOConfigSpec``, ``SamplingSpec``).

Dagster config types its fields, but the specs are also built directly (scripts, tests, notebooks), where
``max_steps=2.5`` or ``prefix_cache_tokens=0.5`` used to pass every range check and fail (or silently
truncate) only after a model had loaded.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def check_number_types(spec: Any, prefix: str = "") -> None:
    """Raise ValueError naming the field when an ``int`` field is not a whole number or a ``float`` field is
    not a number (``bool`` is neither). Fields are recognized by their annotation (``"int"``, ``"float"``)."""
    for field in dataclasses.fields(spec):
        value = getattr(spec, field.name)
        if field.type in ("int", int):
            ok = isinstance(value, int) and not isinstance(value, bool)
            expected = "a whole number"
        elif field.type in ("float", float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            expected = "a number"
        else:
            continue
        if not ok:
            raise ValueError(f"{prefix}{field.name}={value!r}: expected {expected}")
