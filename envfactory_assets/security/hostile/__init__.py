"""A corpus of hostile environment modules (as data) and a runner that checks the sandbox contains
every one of them: each module is an attack the sandbox claims to stop, so a weakened limit shows up
as a sample that escapes.

- :mod:`.samples`: :class:`HostileSample`, :data:`SAMPLES` (each expected to be a
  ``static_reject`` or a ``runtime_stop``), :data:`KNOWN_ESCAPES` (currently get through).
- :mod:`.runner`: :func:`run_corpus` runs the samples in a real :class:`..sandbox.SandboxWorker`
  and returns one result row per sample; :func:`format_table` renders them.

``python -m envfactory_assets.security.hostile`` prints the table for :data:`runner.DEFAULT_LIMITS`.
Nothing here is imported by the pipeline: the samples are never executed outside a worker.
"""

from envfactory_assets.security.hostile.runner import (
    BENIGN_ENV,
    DEFAULT_LIMITS,
    check_recovery,
    format_table,
    parent_wait_bound,
    run_corpus,
    run_sample,
)
from envfactory_assets.security.hostile.samples import (
    CANARY,
    ESCAPED,
    KNOWN_ESCAPES,
    RUNTIME_STOP,
    SAMPLES,
    STATIC_REJECT,
    HostileSample,
    environment,
)

__all__ = [
    "BENIGN_ENV",
    "CANARY",
    "DEFAULT_LIMITS",
    "ESCAPED",
    "KNOWN_ESCAPES",
    "RUNTIME_STOP",
    "SAMPLES",
    "STATIC_REJECT",
    "HostileSample",
    "check_recovery",
    "environment",
    "format_table",
    "parent_wait_bound",
    "run_corpus",
    "run_sample",
]
