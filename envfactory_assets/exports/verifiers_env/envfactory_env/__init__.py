"""EnvFactory's RL tasks as a ``verifiers`` (0.4.0) environment package.

The dataset is the RL rows (``tasks.jsonl``: each task's id, prompt and tools, never its gold calls or gold
state); each rollout is one episode of ``envfactory serve-openenv`` (its tools run in the project's sandbox, the
reward is the project's, computed by the server); see ``taskset.py`` and ``harness.py``.
"""

from envfactory_env.harness import EnvFactoryHarness
from envfactory_env.taskset import EnvFactoryEnv, EnvFactoryTaskset, load_environment

__all__ = ["EnvFactoryTaskset", "EnvFactoryHarness", "EnvFactoryEnv", "load_environment"]
