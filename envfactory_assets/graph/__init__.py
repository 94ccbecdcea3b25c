"""Tool graph: parameter embeddings, user-providable flags, producer -> consumer edges (no Dagster here).

See ``docs/design.md`` ("Tool graph") and the EnvFactory paper (arXiv 2605.18703).
"""

from .build import (
    PAPER_SIMILARITY_THRESHOLD,
    PROVENANCE_EMBEDDING,
    PROVENANCE_NAME_TYPE,
    PROVENANCE_VALUE_KIND,
    ToolGraph,
    build_tool_graph,
    tools_from_environments,
)
from .embeddings import (
    EmbedderUnavailableError,
    HashingEmbedder,
    MiniLMEmbedder,
    ParameterEmbedder,
    l2_normalize,
    minilm_model_path,
)
from .parameters import (
    SHARED_KINDS,
    VALUE_KINDS,
    Parameter,
    edge_value_kind,
    extract_input_parameters,
    extract_output_parameters,
    extract_parameters,
    is_identifier_name,
    is_user_providable,
    value_family,
    value_kind,
)

__all__ = [
    "PAPER_SIMILARITY_THRESHOLD",
    "PROVENANCE_EMBEDDING",
    "PROVENANCE_VALUE_KIND",
    "PROVENANCE_NAME_TYPE",
    "ToolGraph",
    "build_tool_graph",
    "tools_from_environments",
    "EmbedderUnavailableError",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "ParameterEmbedder",
    "l2_normalize",
    "minilm_model_path",
    "Parameter",
    "extract_input_parameters",
    "extract_output_parameters",
    "extract_parameters",
    "is_identifier_name",
    "is_user_providable",
    "SHARED_KINDS",
    "VALUE_KINDS",
    "edge_value_kind",
    "value_family",
    "value_kind",
]
