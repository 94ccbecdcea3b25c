"""`envfactory export-verifiers`: the package it writes is installed in a virtualenv of verifiers 0.4.0 (pinned;
its own, since verifiers pins ``mcp==2.0.0`` and ``openai<3``) and run by verifiers' ``vf-eval`` for a few rollouts
against a scripted OpenAI-compatible model, its tools executed by ``envfactory serve-openenv`` on the fixture
environments: each rollout's reward is the one the project's own session pool gives the same calls.

The virtualenv is made once under ``~/.cache/envfactory-test/`` (about 1.5 minutes on a 2-core machine; pip
installs from the package registry) and reused; a machine where it cannot be installed fails this test, with
pip's reason.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from envfactory_assets.serving.sessions import SessionPool
from envfactory_assets.serving.tasks import task_set
from envfactory_assets_tests.rl_tasks import store_with_rl_rows

REPO_ROOT = Path(__file__).resolve().parents[1]
VERIFIERS = "verifiers==0.4.0"
#: Named by the pin (a changed pin gets a virtualenv of its own); made once per machine, outside the work tree.
VENV = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    / "envfactory-test"
    / VERIFIERS.replace("verifiers==", "vf-venv-")
)

#: what the scripted model does on each task: the calls it makes (one per turn), then its final answer
PLANS = {
    "rl_helpdesk_close": "gold",  # the gold calls: the maximum
    "rl_three_environments": "gold",
    "rl_bookshop_look_up": "nothing",  # no call and an empty answer: 0
    "rl_bookshop_reprice_and_delete": "last gold call only",  # half the work: what the project's reward says
}


def _plan_calls(row: dict[str, Any]) -> list[dict[str, Any]]:
    plan = PLANS[row["id"]]
    return {"gold": row["gold_calls"], "nothing": [], "last gold call only": row["gold_calls"][-1:]}[plan]


def _answer(row: dict[str, Any]) -> str:
    return "" if PLANS[row["id"]] == "nothing" else "Done."


def verifiers_venv() -> Path:
    """The virtualenv with verifiers installed (made when missing, or when its marker names another pin or its
    python is gone); its python.

    Fails the test (never skips it) when verifiers cannot be installed, with pip's reason."""
    python = VENV / "bin" / "python"
    marker = VENV / ".installed"
    if not (marker.is_file() and marker.read_text().strip() == VERIFIERS and python.exists()):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True, timeout=300)
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", VERIFIERS], capture_output=True, text=True, timeout=1200
        )
        if done.returncode != 0:
            pytest.fail(f"cannot install {VERIFIERS} into {VENV}: {(done.stderr or done.stdout)[-3000:]}")
        marker.write_text(VERIFIERS + "\n")
    return python


class ScriptedModel:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 that plays :data:`PLANS`: it recognises the task by the
    user's request, makes the plan's next call (one per turn, counted by the tool results so far), then answers.

    At each request (a rollout's program is running then) it records the files under ``runtimes`` (verifiers'
    folder of the rollouts' runtimes) that hold an ``api_key``, in ``files_seen``."""

    def __init__(self, rows: list[dict[str, Any]], runtimes: Path | None = None) -> None:
        by_request = {r["prompt"][-1]["content"]: r for r in rows}
        self.requests = 0
        self.first_requests: dict[str, dict[str, Any]] = {}
        self.files_seen: set[str] = set()
        self.runtime_dirs_seen = 0

        def look_into_runtimes() -> None:
            if runtimes is None:
                return
            self.runtime_dirs_seen = max(self.runtime_dirs_seen, sum(1 for p in runtimes.glob("*/*") if p.is_dir()))
            for path in runtimes.rglob("*"):
                try:
                    text = path.read_bytes() if path.is_file() else b""
                except OSError:
                    continue
                if b"api_key" in text:
                    self.files_seen.add(str(path.relative_to(runtimes)))

        def reply(body: dict[str, Any]) -> dict[str, Any]:
            messages = body["messages"]
            last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
            row = by_request[messages[last_user]["content"]]
            done = sum(1 for m in messages[last_user:] if m["role"] == "tool")
            if done == 0:
                self.first_requests[row["id"]] = body
            calls = _plan_calls(row)
            if done < len(calls):
                call = calls[done]
                message = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{done}",
                            "type": "function",
                            "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
                        }
                    ],
                }
                finish = "tool_calls"
            else:
                message, finish = {"role": "assistant", "content": _answer(row)}, "stop"
            return {
                "id": f"chatcmpl-{self.requests}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "scripted"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }

        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                look_into_runtimes()
                outer.requests += 1
                data = json.dumps(reply(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def project_reward(envs: dict, rows: list[dict], row: dict[str, Any]) -> float:
    """The reward the project's session pool gives ``row``'s planned calls and answer."""
    pool = SessionPool(task_set(rows, envs))
    try:
        episode = pool.open(task_id=row["id"]).episode_id
        for call in _plan_calls(row):
            assert pool.call(episode, call["name"], call["arguments"]).error is None
        return pool.finish(episode, _answer(row)).reward
    finally:
        pool.close()


def _with_an_earlier_turn(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` as a second turn's row: its prompt holds a first exchange with a tool call and its result."""
    system, request = row["prompt"]
    earlier = [
        {"role": "user", "content": "Which tickets do I have?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "list_tickets", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": '[{"ticket_id": "tic_00001"}]'},
        {"role": "assistant", "content": "You have ticket tic_00001."},
    ]
    return {**row, "prompt": [system, *earlier, request]}


def _shape(messages: list[dict[str, Any]]) -> list[tuple]:
    """What a model is shown of ``messages``: roles, texts, calls (name and decoded arguments), call ids."""
    return [
        (
            m["role"],
            m.get("content") or None,
            [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m.get("tool_calls") or []],
            m.get("tool_call_id"),
        )
        for m in messages
    ]


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Iterator[tuple[Path, dict, list[dict]]]:
    home = tmp_path_factory.mktemp("verifiers_home")
    envs, rows = store_with_rl_rows(home, lambda r: _with_an_earlier_turn(r) if r["id"] == "rl_helpdesk_close" else r)
    yield home, envs, rows


def test_verifiers_runs_the_exported_package_and_its_rewards_are_the_projects(home, tmp_path):
    home, envs, rows = home
    python = verifiers_venv()
    env = {**os.environ, "ENVFACTORY_HOME": str(home), "PYTHONPATH": str(REPO_ROOT), "NO_PROXY": "127.0.0.1"}
    cli = [sys.executable, "-m", "envfactory_assets.cli"]
    out = tmp_path / "export"
    export = subprocess.run([*cli, "export-verifiers", "--output", str(out)], env=env, capture_output=True, text=True)
    assert export.returncode == 0, export.stderr
    package = out / "envfactory_env"
    assert "export-verifiers: 4 RL tasks" in export.stdout and str(package) in export.stdout
    exported = [json.loads(line) for line in (package / "envfactory_env" / "tasks.jsonl").read_text().splitlines()]
    assert sorted(t["id"] for t in exported) == sorted(PLANS)
    assert all(set(t) == {"id", "split", "prompt", "tools"} for t in exported)  # no gold call, no gold state
    wrong = subprocess.run(
        [*cli, "export-verifiers", "--dataset-version", "v_0"], env=env, capture_output=True, text=True
    )
    assert wrong.returncode == 2 and "--dataset-version v_0" in wrong.stderr

    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(package)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]

    # the package's load_environment() builds verifiers' environment of the exported rows
    loaded = subprocess.run(
        [
            str(python),
            "-c",
            "from envfactory_env import load_environment; env = load_environment(split='held_out'); "
            "print(type(env).__name__, env.config.agent.runtime.type, [t.data.id for t in env.taskset])",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert loaded.stdout.split() == ["EnvFactoryEnv", "subprocess", "['rl_bookshop_look_up']"], loaded.stderr[-3000:]

    port = _free_port()
    server = subprocess.Popen(
        [*cli, "serve-openenv", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    vf_home = tmp_path / "vf-home"  # verifiers keeps each rollout's runtime folder under ~/.cache/verifiers
    vf_home.mkdir()
    model = ScriptedModel(rows, runtimes=vf_home / ".cache" / "verifiers" / "runtimes")
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and server.poll() is None:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert server.poll() is None, server.stderr.read()
        vf_env = {
            **os.environ,
            "ENVFACTORY_OPENENV_URL": url,
            "SCRIPTED_API_KEY": "unused",
            "NO_PROXY": "127.0.0.1",
            "HOME": str(vf_home),
        }
        run = subprocess.run(
            [
                str(VENV / "bin" / "vf-eval"),
                "envfactory-env",
                "--model",
                "scripted",
                "--client.base-url",
                model.url,
                "--client.api-key-var",
                "SCRIPTED_API_KEY",
                "-r",
                "2",
                "--no-push",
                "--no-rich",
                "-o",
                str(tmp_path / "outputs"),
                "--run.dir",
                "run",
            ],
            env=vf_env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    finally:
        model.close()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    # while each rollout ran, no file of its runtime held a key
    assert model.runtime_dirs_seen > 0 and model.files_seen == set(), model.files_seen
    episodes = [json.loads(line) for line in (tmp_path / "outputs" / "run" / "traces.jsonl").read_text().splitlines()]
    rewards: dict[str, list[float]] = {}
    for episode in episodes:
        assert episode["ok"] and not episode["errors"], episode["errors"]
        (trace,) = episode["traces"]
        task_id = trace["task"]["data"]["id"]
        rewards.setdefault(task_id, []).append(trace["rewards"]["envfactory_reward"]["score"])
        # verifiers recorded the loop: each planned call's result came back as a tool message (after the prompt's)
        row = next(r for r in rows if r["id"] == task_id)
        n_tool_messages = sum(n["message"]["role"] == "tool" for n in trace["nodes"])
        assert n_tool_messages - sum(m["role"] == "tool" for m in row["prompt"]) == len(_plan_calls(row))
    # the model was shown each row's prompt as it is (an earlier turn's call and result included), and its tools
    for row in rows:
        first = model.first_requests[row["id"]]
        assert _shape(first["messages"]) == _shape(row["prompt"]) and first["tools"] == row["tools"]
    expected = {row["id"]: project_reward(envs, rows, row) for row in rows}
    assert rewards == {task_id: [reward, reward] for task_id, reward in expected.items()}
    assert expected["rl_helpdesk_close"] == expected["rl_three_environments"] == 1.0
    assert expected["rl_bookshop_look_up"] == 0.0 and 0.0 < expected["rl_bookshop_reprice_and_delete"] < 1.0
