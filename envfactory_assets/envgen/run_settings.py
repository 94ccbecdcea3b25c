"""The settings of ``environments`` (how many resources of a document become tables) and of
``verified_environments`` (the sandbox limits each verification worker runs under and how many run at once; the
pass-rate floor is the ``verification_gate`` resource's).

Each default and help text is stated once, in a field's metadata; the Dagster run config and
docs/configuration.md are generated from :class:`EnvironmentRunSpec` and :class:`VerificationRunSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass

from envfactory_assets.config_checks import SettingError, finite_number, setting, whole_number
from envfactory_assets.envgen.builder import MAX_RESOURCES
from envfactory_assets.envgen.stage import DEFAULT_VERIFY_WORKERS
from envfactory_assets.runtime.sandbox import SandboxLimits

OWNER = "verified_environments"
ENVIRONMENTS_OWNER = "environments"


@dataclass(frozen=True)
class EnvironmentRunSpec:
    """How much of each selected document becomes its environment.

    Raises:
        SettingError: (a ValueError) a negative ``max_resources``, named in the message.
    """

    max_resources: int = setting(
        MAX_RESOURCES,
        "stateful resources (tables) kept per environment, best-covered first; 0 keeps every resource of the "
        "document (the corpus-scale coverage run); the default keeps environments at the paper's size.",
    )

    def __post_init__(self) -> None:
        whole_number(ENVIRONMENTS_OWNER, "max_resources", self.max_resources, low=0)

    @property
    def resource_cap(self) -> int | None:
        """The cap the builder applies: ``max_resources``, or None (no cap) for 0."""
        return self.max_resources or None


#: Smallest ``memory_mb`` a verification worker starts with: the sandbox caps the worker's address space,
#: and the Python interpreter alone maps about 30-60 MiB before it loads an environment, so a lower cap makes
#: every environment "fail" verification for a reason that has nothing to do with the environment.
MIN_WORKER_MEMORY_MB = 128


@dataclass(frozen=True)
class VerificationRunSpec:
    """Sandbox limits of the verification workers and how many run at once.

    Raises:
        SettingError: (a ValueError) a limit no worker can run under, named in the message.
    """

    memory_mb: int = setting(
        SandboxLimits.memory_mb,
        f"address-space cap of each verification worker, in MiB (at least {MIN_WORKER_MEMORY_MB}: the "
        "interpreter alone needs 30-60 MiB of it).",
    )
    # verification's own cap, deliberately above the sandbox's general default (SandboxLimits.cpu_seconds)
    cpu_seconds: int = setting(
        120, "CPU seconds any single request to a verification worker may use before it is stopped; at least 1."
    )
    call_timeout_s: float = setting(
        SandboxLimits.call_timeout_s,
        "wall-clock seconds one tool call (and each environment's part of loading or saving a state) may take; "
        "above 0.",
    )
    max_workers: int = setting(
        DEFAULT_VERIFY_WORKERS, "environments verified at once, each in its own sandbox worker; at least 1."
    )

    def __post_init__(self) -> None:
        if (
            isinstance(self.memory_mb, int)
            and not isinstance(self.memory_mb, bool)
            and self.memory_mb < MIN_WORKER_MEMORY_MB
        ):
            raise SettingError(
                f"{OWNER} setting memory_mb={self.memory_mb}: expected a whole number >= {MIN_WORKER_MEMORY_MB} "
                f"(a sandbox worker's interpreter alone needs about 30-60 MiB of address space, so below "
                f"{MIN_WORKER_MEMORY_MB} MiB every environment would fail verification for lack of memory)"
            )
        whole_number(OWNER, "memory_mb", self.memory_mb, low=MIN_WORKER_MEMORY_MB)
        whole_number(OWNER, "cpu_seconds", self.cpu_seconds, low=1)
        finite_number(OWNER, "call_timeout_s", self.call_timeout_s, low=0.0, low_open=True)
        whole_number(OWNER, "max_workers", self.max_workers, low=1)

    def limits(self) -> SandboxLimits:
        """The :class:`SandboxLimits` of one verification worker (every other limit the sandbox's default)."""
        return SandboxLimits(memory_mb=self.memory_mb, cpu_seconds=self.cpu_seconds, call_timeout_s=self.call_timeout_s)
