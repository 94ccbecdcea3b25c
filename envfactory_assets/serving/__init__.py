"""The RL tasks (``rl_dataset`` rows) served to RL trainers over the network, many episodes per process.

- :mod:`.tasks`: the rows and environments a server serves, read once from the store (read-only).
- :mod:`.sessions`: :class:`~.sessions.SessionPool`, the episodes one server process holds at once over its
  sandbox workers (a cap, idle expiry, a dead worker ending only its own episodes), each scored at its end by
  :mod:`.outcome` with the reward GRPO trains on.
- :mod:`.bounded_asgi`: every request body and WebSocket message checked by the bounded JSON reader first.
- :mod:`.openenv_app` and :mod:`.openenv_client`: the OpenEnv interface (``openenv-core``): its
  ``Environment`` contract served by its own ``create_app``, and its ``EnvClient`` for these models.

Nothing here imports Dagster; only :mod:`.openenv_app` and :mod:`.openenv_client` import ``openenv``.
"""
