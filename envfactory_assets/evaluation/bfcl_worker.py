"""The BFCL executor's worker process: the API instances of one task, and the calls run on them.

Run as ``python -m envfactory_assets.evaluation.bfcl_worker [--memory-mb N] [--cpu-seconds N]`` by
:class:`.bfcl_sandbox.BFCLWorkerProcess` (normally inside bubblewrap). Requests and responses are the
frames of :mod:`envfactory_assets.runtime.protocol` on stdin and the original stdout (fd 1 and
``sys.stdout`` go to stderr, so a stray print cannot corrupt the protocol). After ``{"ready": true,
...}`` every request ``{"id", "op", ...}`` gets one response:

- ``init`` ``{"task": {id, involved_classes, excluded_functions}, "initial_config_json"}``: builds
  fresh model-side and ground-truth-side :class:`.bfcl.SafeExecutor` instances;
- ``call`` ``{"name", "arguments_json"}``: one model call on the model side ->
  ``{"text_json"}`` (the result text) or ``{"refused"}`` (:class:`.bfcl.UnsafeCall`, nothing ran);
- ``gold`` ``{"calls": [Python-call text]}``: a turn's ground truth on the ground-truth side ->
  ``{"texts_json"}``; a ground-truth string that is not a literal call answers ``unsafe_call``;
- ``check``: the official state check (:func:`.bfcl._states_equal`, ``!=`` on the real objects) ->
  ``{"same", "diffs"}``;
- ``state`` ``{"side"}``: a JSON view of the public attributes (diagnostics and tests only);
- ``probe_read`` ``{"path"}`` and ``probe_context``: only with ``--test-probe`` (tests): what opening a
  host path from here gives, and the decimal / mpmath precision a request starts with.

Texts travel as stdlib-JSON strings (``*_json``) so that any Python string (a lone surrogate, NaN in
arguments) crosses the pipe unchanged.

Limits: ``RLIMIT_AS`` (memory), ``RLIMIT_CPU`` re-armed before every request (the backstop; the parent's
wall clock kills first), no core dumps, capped open files / processes / file size, and the seccomp
filter (no new processes, programs, sockets, namespaces), installed after every import. Before every
request the decimal context and mpmath's precision are reset, so no call sees a change an earlier one
made (``square_root`` sets ``decimal.getcontext().prec``, ``logarithm`` sets ``mpmath.mp.dps``). There is
no in-process alarm: a call that overruns is stopped by the parent killing this process, because an
exception raised inside a BFCL method could be swallowed by its own ``except`` and leave half-updated
state behind as if the call had succeeded.
"""

from __future__ import annotations

import argparse
import decimal
import importlib
import json
import sys
from typing import Any

from envfactory_assets.runtime.worker import (
    claim_protocol_streams,
    rearm_cpu_limit,
    serve_requests,
    set_memory_limit,
    set_process_limits,
)

#: Classes of BFCL's multi-turn categories, imported before the seccomp filter goes on.
PRELOADED_CLASSES = (
    "GorillaFileSystem",
    "MathAPI",
    "MessageAPI",
    "TwitterAPI",
    "TicketAPI",
    "TradingBot",
    "TravelAPI",
    "VehicleControlAPI",
)
_MAX_VIEW_DEPTH = 60


def _plain(value: Any, stack: tuple[int, ...] = ()) -> Any:
    """A JSON view of a value: objects become ``{"__type__": name, public attributes...}``; an object
    that contains itself (``Directory.parent``) shows as ``{"$ref": name}``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if id(value) in stack or len(stack) > _MAX_VIEW_DEPTH:
        return {"$ref": type(value).__name__}
    inner = (*stack, id(value))
    if isinstance(value, dict):
        return {str(k): _plain(v, inner) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, inner) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v, inner) for v in value), key=repr)
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        return {
            "__type__": type(value).__name__,
            **{k: _plain(v, inner) for k, v in attributes.items() if not k.startswith("_")},
        }
    return repr(value)


class Session:
    """The instances of one task. The parent starts one worker per task."""

    def __init__(self, test_probe: bool) -> None:
        self.model: Any = None
        self.gold: Any = None
        self.test_probe = test_probe

    def dispatch(self, request: dict[str, Any]) -> Any:
        from envfactory_assets.evaluation import bfcl

        op = request.get("op")
        if op == "init":
            if self.model is not None:
                raise _Refusal("protocol", "init: this worker already holds a task")
            t = request["task"]
            task = bfcl.BFCLTask(
                str(t["id"]),
                [],
                json.loads(request["initial_config_json"]),
                list(t["involved_classes"]),
                list(t["excluded_functions"]),
                [],
            )
            self.model, self.gold = bfcl.SafeExecutor(task), bfcl.SafeExecutor(task)
            return {"classes": list(self.model.instances)}
        if op == "probe_read" and self.test_probe:
            try:
                with open(str(request["path"]), encoding="utf-8", errors="replace") as handle:
                    return {"read": handle.read(1000)}
            except OSError as exc:
                return {"error": f"{type(exc).__name__}: {exc}"}
        if op == "probe_context" and self.test_probe:
            mpmath = sys.modules.get("mpmath")
            return {
                "decimal_prec": decimal.getcontext().prec,
                "one_third": str(decimal.Decimal(1) / 3),
                "mpmath_dps": mpmath.mp.dps if mpmath is not None else None,
            }
        if self.model is None:
            raise _Refusal("protocol", f"{op}: no task loaded (send init first)")
        if op == "call":
            kwargs = json.loads(request["arguments_json"])
            try:
                text = self.model.execute(request["name"], kwargs=kwargs)
            except bfcl.UnsafeCall as exc:
                return {"refused": str(exc)}
            return {"text_json": json.dumps(text)}
        if op == "gold":
            texts = []
            try:
                for call in request["calls"]:
                    name, args, kwargs = bfcl.parse_python_call(call)
                    texts.append(self.gold.execute(name, args, kwargs))
            except bfcl.UnsafeCall as exc:
                raise _Refusal("unsafe_call", str(exc)) from None
            return {"texts_json": json.dumps(texts)}
        if op == "check":
            same, diffs = bfcl._states_equal(self.model, self.gold)
            return {"same": same, "diffs": diffs}
        if op == "state":
            side = self.model if request.get("side") == "model" else self.gold
            return {"state_json": json.dumps(_plain(side.state()), default=repr)}
        raise _Refusal("protocol", f"unknown op {op!r}")


class _Refusal(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def reset_process_context(mpmath_prec: int | None) -> None:
    """A fresh decimal context and mpmath's starting precision, before every request."""
    decimal.setcontext(decimal.Context())
    mpmath = sys.modules.get("mpmath")
    if mpmath is not None and mpmath_prec is not None:
        mpmath.mp.prec = mpmath_prec


def serve(session: Session, request: dict[str, Any]) -> dict[str, Any]:
    """One request's response (never raises)."""
    request_id = request.get("id")
    try:
        return {"id": request_id, "ok": True, "result": session.dispatch(request)}
    except _Refusal as exc:
        return {"id": request_id, "ok": False, "error": {"type": exc.kind, "message": str(exc)}}
    except MemoryError:
        return {"id": request_id, "ok": False, "error": {"type": "memory", "message": "out of memory"}}
    except Exception as exc:  # noqa: BLE001 - a bug or a bad request: report it, keep serving
        return {
            "id": request_id,
            "ok": False,
            "error": {"type": "internal", "message": f"{type(exc).__name__}: {exc}"[:2000]},
        }


def main(argv: list[str] | None = None) -> int:
    """Serve requests until stdin closes. Returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m envfactory_assets.evaluation.bfcl_worker")
    parser.add_argument("--memory-mb", type=int, default=512, help="RLIMIT_AS in MiB (0 = unlimited)")
    parser.add_argument("--cpu-seconds", type=int, default=5, help="CPU seconds per request (0 = unlimited)")
    parser.add_argument("--test-probe", action="store_true", help="accept probe_read requests (tests only)")
    parser.add_argument("--seccomp", choices=("on", "off"), default="on", help="install the seccomp filter")
    args = parser.parse_args(argv)

    protocol_in, protocol_out = claim_protocol_streams()
    set_process_limits()
    set_memory_limit(args.memory_mb)
    rearm_cpu_limit(args.cpu_seconds)
    # Every import a request may need happens now, before the filter goes on.
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    from envfactory_assets.evaluation import bfcl

    for name in PRELOADED_CLASSES:
        importlib.import_module(CLASS_FILE_PATH_MAPPING[name])
    bfcl._doc_files()
    mpmath = sys.modules.get("mpmath")
    mpmath_prec = mpmath.mp.prec if mpmath is not None else None
    session = Session(args.test_probe)

    def before_each() -> None:
        rearm_cpu_limit(args.cpu_seconds)
        reset_process_context(mpmath_prec)

    return serve_requests(
        protocol_in, protocol_out, lambda request: serve(session, request), before_each, seccomp=args.seccomp == "on"
    )


if __name__ == "__main__":
    sys.exit(main())
