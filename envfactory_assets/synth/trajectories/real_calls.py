"""Tools with a real MCP server's signature in synthesis: planned in the builder's names, executed and recorded in
the server's.

A tool of an environment built from an MCP tool list keeps the server's own parameters (``git_log(repo_path,
max_count, ...)``) and a binding of each to what it does (:mod:`envfactory_assets.envgen.mcp_signatures`). The
sampler, the query writer, the refinement and the data-gap kinds plan calls in the builder's names (a row's
``..._id``, ``limit``, ``query``) of the tool's canonical view
(:func:`~envfactory_assets.envgen.mcp_signatures.canonical_tool`): :func:`planning_environments` gives them
that view. The environment itself only takes the real signature, so :class:`PlanningWorker` translates each call
at execution (:func:`~envfactory_assets.envgen.mcp_signatures.real_arguments`, with the table's rows of the
episode's state at that moment) and reads the answer back in the canonical shape
(:func:`~envfactory_assets.envgen.mcp_signatures.canonical_output`).

What a model sees and is scored on is the real server's: :func:`real_trajectory` replays every turn that calls
such a tool on its starting state, in the real names, and records each call's real arguments and real answer
(the canonical arguments kept as ``canonical_arguments``), so SFT messages, RL gold calls and their replay are
those of the real server.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from envfactory_assets.envgen.mcp_signatures import canonical_output, canonical_tool, real_arguments, row_arguments
from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.runtime.sandbox import SandboxWorker, StateRejected, WorkerCrashed

#: binding roles whose value only windows a read (the RL reward does not compare them)
WINDOW_ROLES = ("limit", "offset", "page")


def has_real_signatures(environments: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether any tool of ``environments`` (``{env_id: environment}``) has a real MCP signature."""
    return any(t.get("mcp_binding") for env in environments.values() for t in env["tools"])


def planning_environments(environments: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``environments`` (``{env_id: environment}``) with every tool in the view synthesis plans in: a tool with
    a real MCP signature as its :func:`~envfactory_assets.envgen.mcp_signatures.canonical_tool`, any other as
    it is. An environment without such a tool is the same object; the input is not changed."""
    out = {}
    for env_id, env in environments.items():
        if any(t.get("mcp_binding") for t in env["tools"]):
            env = {**env, "tools": [canonical_tool(t) for t in env["tools"]]}
        out[env_id] = env
    return out


class PlanningWorker:
    """A sandbox worker that takes calls of tools with a real MCP signature in their canonical names.

    ``call(episode, name, arguments)`` of such a tool turns the canonical ``arguments`` into the real ones
    (:func:`~envfactory_assets.envgen.mcp_signatures.real_arguments`, with the rows the episode's state holds
    in the tool's table now), executes those, and returns the answer in the canonical shape (a batch answer of
    one row as that row); errors come back as the environment gives them. Any other tool's call, and every
    other method, is the wrapped worker's. Wrapping a :class:`PlanningWorker` again returns it unchanged
    (:func:`planning_worker`).

    ``environments`` (``{env_id: environment}``, the tools as stored, with their real signatures) are the
    environments the episodes may hold; a tool is looked up among the environments of the episode it is
    called in.
    """

    def __init__(self, worker: SandboxWorker, environments: Mapping[str, Mapping[str, Any]]) -> None:
        self.inner = worker
        self.bound = {
            (env_id, t["name"]): t for env_id, env in environments.items() for t in env["tools"] if t.get("mcp_binding")
        }
        self._names = {name for _, name in self.bound}
        self._envs_of: dict[str, tuple[str, ...]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def open_episode(self, states: Mapping[str, Any], **kwargs: Any) -> str:
        """The wrapped worker's ``open_episode``; remembers which environments the episode holds."""
        episode = self.inner.open_episode(states, **kwargs)
        self._envs_of[episode] = tuple(states)
        return episode

    def fork(self, episode_id: str) -> str:
        """The wrapped worker's ``fork``; the fork holds the environments of ``episode_id``."""
        new = self.inner.fork(episode_id)
        self._envs_of[new] = self._envs_of.get(episode_id, ())
        return new

    def close_episode(self, episode_id: str) -> None:
        """The wrapped worker's ``close_episode``."""
        self._envs_of.pop(episode_id, None)
        self.inner.close_episode(episode_id)

    def has(self, tool: str) -> bool:
        """Whether a tool called ``tool`` has a real MCP signature in one of the environments."""
        return tool in self._names

    def spec(self, episode_id: str, tool: str) -> tuple[str, dict[str, Any]] | None:
        """``(env_id, real tool spec)`` of ``tool`` when it has a real MCP signature in an environment of
        ``episode_id``, else None."""
        if tool not in self._names:
            return None
        for env_id in self._envs_of.get(episode_id, ()):
            spec = self.bound.get((env_id, tool))
            if spec is not None:
                return env_id, spec
        return None

    def translate(
        self, episode_id: str, tool: str, arguments: Mapping[str, Any] | None
    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """``(real tool spec, real arguments)`` of a call of ``tool`` with canonical ``arguments`` in
        ``episode_id``, the real ones made with the rows the episode's state holds in the tool's table now; for a
        tool without a real MCP signature ``(None, arguments)`` unchanged."""
        found = self.spec(episode_id, tool)
        if found is None:
            return None, dict(arguments or {})
        env_id, spec = found
        rows = self.inner.save(episode_id)[env_id]["tables"].get(spec["table"]) or []
        return spec, real_arguments(spec, dict(arguments or {}), rows)

    def call(self, episode_id: str, tool: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Execute ``tool`` with canonical ``arguments`` (see the class); the result as the wrapped worker's
        ``call`` gives it, with a canonical ``output``."""
        spec, real = self.translate(episode_id, tool, arguments)
        if spec is None:
            return self.inner.call(episode_id, tool, arguments)
        result = self.inner.call(episode_id, tool, real)
        if result.get("ok"):
            result = {**result, "output": canonical_output(spec, result.get("output"))}
        return result


def planning_worker(worker: Any, environments: Mapping[str, Mapping[str, Any]]) -> Any:
    """``worker`` wrapped in a :class:`PlanningWorker` over ``environments`` when one of them has a tool with a
    real MCP signature and ``worker`` is not one already; otherwise ``worker`` itself (None stays None)."""
    if worker is None or isinstance(worker, PlanningWorker) or not has_real_signatures(environments):
        return worker
    return PlanningWorker(worker, environments)


def _row_path(output: Any, row_key: str, row_id: Any, field: str, value: Any) -> str | None:
    """The path (``"owner"``, ``"items[2].owner"``) in a call's ``output`` of the ``field`` of the row whose
    ``row_key`` is ``row_id`` where it holds ``value``, or None when the output shows no such row."""
    if isinstance(output, dict):
        if output.get(row_key) == row_id and field in output and output[field] == value:
            return field
        for name, item in output.items():
            found = _row_path(item, row_key, row_id, field, value)
            if found is not None:
                return f"{name}.{found}" if isinstance(item, dict) else f"{name}{found}"
    elif isinstance(output, list):
        for i, item in enumerate(output):
            found = _row_path(item, row_key, row_id, field, value)
            if found is not None:
                return f"[{i}].{found}"
    return None


def known_row_arguments(
    tool: Mapping[str, Any], arguments: Mapping[str, Any], rows: list[dict[str, Any]], history: list[dict[str, Any]]
) -> dict[str, Any]:
    """The real arguments of a call of a tool with a real MCP signature that are read off the row its canonical
    ``arguments`` name (:func:`~envfactory_assets.envgen.mcp_signatures.row_arguments`: ``get_issue``'s
    ``owner`` and ``repo``, ``read_file``'s ``path``), each with where the agent learns it:
    ``{parameter: {"field", "value", "provenance"}}``. The provenance is ``{"source": "output", "call": i,
    "path": ...}`` for the latest call of ``history`` (the episode's calls so far, the conversation's tool
    results) whose output shows the named row holding that value, else ``{"source": "user"}``: the request has to
    state it (:func:`~envfactory_assets.synth.refinement.phrasing.stated_row_fields`), since the canonical call
    names the row only by its identifier. ``rows``: the table's rows in the state the call runs on."""
    found = row_arguments(dict(tool), dict(arguments), rows)
    binding = tool.get("mcp_binding") or {}
    row_id = arguments.get(binding.get("row_key", ""))
    for item in found.values():
        item["provenance"] = {"source": "user"}
        for i in range(len(history) - 1, -1, -1):
            path = _row_path(history[i].get("output"), binding["row_key"], row_id, item["field"], item["value"])
            if path is not None:
                item["provenance"] = {"source": "output", "call": i, "path": path}
                break
    return found


def window_arguments(tool: Mapping[str, Any]) -> set[str]:
    """The real parameters of a tool with a real MCP signature that only window a read (``max_count``,
    ``per_page``, ``start_index``: roles in :data:`WINDOW_ROLES`); empty for any other tool."""
    binding = tool.get("mcp_binding") or {}
    return {name for name, p in (binding.get("params") or {}).items() if p.get("role") in WINDOW_ROLES}


def _real_provenance(
    spec: dict[str, Any],
    provenance: Mapping[str, Any],
    arguments: Mapping[str, Any],
    row_fields: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The provenance of each real argument from that of the canonical arguments it was made of: the row's
    identifier for a key (with the field it names the row by), the field, window or text for theirs; a
    parameter read off the named row that the call's ``row_fields`` (its ``row_arguments``,
    :func:`known_row_arguments`) hold, theirs; a parameter the canonical call did not give (a row's scope field
    none of those hold, a schema placeholder) is ``state`` or ``schema``."""
    binding = spec["mcp_binding"]
    canonical = binding["canonical_input"]["properties"]
    out = {k: v for k, v in provenance.items() if k not in canonical and k in arguments}
    for name, param in binding["params"].items():
        if name not in arguments:
            continue
        role = param["role"]
        source = None
        known = (row_fields or {}).get(name)
        given = arguments[name] if role == "keys" and isinstance(arguments[name], list) else [arguments[name]]
        if known is not None and known["value"] in given:
            source = known["provenance"]
        elif role in ("key", "keys"):
            source = provenance.get(binding["row_key"])
            if source is not None and param.get("field"):
                source = {**source, "field": param["field"]}
        elif role in ("limit", "offset", "query"):
            source = provenance.get(role)
        elif role == "field":
            source = provenance.get(param["field"])
        elif role == "scope":
            source = {"source": "state"}
        elif role == "rows":
            given = [provenance[f] for f in param["fields"].values() if f in provenance]
            source = given[0] if given and all(g == given[0] for g in given) else {"source": "user"}
        out[name] = copy.deepcopy(source) if source is not None else {"source": "schema"}
    return out


def real_trajectory(
    trajectory: dict[str, Any], environments: Mapping[str, Mapping[str, Any]], worker: SandboxWorker
) -> dict[str, Any]:
    """A copy of ``trajectory`` (raw, refined or augmented; calls in canonical names) whose calls of tools with a
    real MCP signature are in the real server's names: each turn with such a call is replayed on its
    ``state_before`` in ``worker`` (its environments loaded), every call in order, and each such call records
    the ``arguments`` it was executed with (real names), the ``output`` the real tool gave (a refused call keeps
    its error), ``canonical_arguments`` (what synthesis planned) and its provenance by real name. A trajectory
    with no such call is returned as it is (the same object).

    ``environments``: ``{env_id: environment}`` with the tools as stored (real signatures).

    Raises:
        ValueError: a turn does not replay as recorded: a state that does not load, a call that fails where it
            succeeded (or the reverse, or with another error), a crashed worker, or a final state other than
            ``state_after``.
    """
    if isinstance(worker, PlanningWorker):
        worker = worker.inner  # the calls below are already in the real names
    real = PlanningWorker(worker, {e: environments[e] for e in trajectory["env_ids"] if e in environments})
    if not any(real.has(c["name"]) for t in trajectory["turns"] for c in t["calls"]):
        return trajectory
    out = copy.deepcopy(trajectory)
    for turn in out["turns"]:
        if not any(real.has(c["name"]) for c in turn["calls"]):
            continue
        try:
            episode = real.open_episode(copy.deepcopy(turn["state_before"]))
        except (StateRejected, WorkerCrashed) as exc:
            raise ValueError(f"turn {turn.get('turn_index')}: starting state does not load: {exc}") from exc
        try:
            for i, call in enumerate(turn["calls"]):
                spec, arguments = real.translate(episode, call["name"], call["arguments"])
                result = worker.call(episode, call["name"], arguments)
                error = (result.get("error") or {}).get("type")
                if bool(result.get("ok")) == bool(call.get("error")) or (call.get("error") and error != call["error"]):
                    got = "success" if result.get("ok") else result.get("error")
                    raise ValueError(
                        f"turn {turn.get('turn_index')} call {i} ({call['name']}) does not replay in the real "
                        f"names: recorded {call.get('error') or 'success'}, got {got}"
                    )
                if spec is None:
                    continue
                call["canonical_arguments"] = call["arguments"]
                call["provenance"] = _real_provenance(
                    spec, call.get("provenance") or {}, arguments, call.get("row_arguments")
                )
                call["arguments"] = arguments
                if result.get("ok"):
                    call["output"] = result.get("output")
            digest = state_hash(worker.save(episode))
        except WorkerCrashed as exc:
            raise ValueError(f"turn {turn.get('turn_index')}: the worker crashed replaying it: {exc}") from exc
        finally:
            try:
                real.close_episode(episode)
            except Exception:  # the worker may have been restarted; the episode is gone either way
                pass
        if digest != turn["state_after_hash"]:
            raise ValueError(
                f"turn {turn.get('turn_index')}: replaying its calls in the real names does not reach its state_after"
            )
    return out
