"""The environment catalogue: which environments the store can serve and train on.

The one place that decides "passed" (a current ``verified_environments`` row of status ``passed`` whose
``environments`` row is still ``built``) and applies the user's curation file. The graph, synthesis,
training and evaluation assets, ``serve-env`` and the benchmark scripts all read environments through it.
"""

from envfactory_assets.catalog.environments import (
    PassedEnvironments,
    passed_environments,
    servable_env_ids,
    unserved_nodes,
)

__all__ = ["PassedEnvironments", "passed_environments", "servable_env_ids", "unserved_nodes"]
