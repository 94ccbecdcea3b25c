"""Inputs that broke earlier versions (found in review): hostile specs, sandbox escapes, CLI misuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envfactory_assets.cli import UsageError, run_lock
from envfactory_assets.cli import main as cli_main
from envfactory_assets.envgen.stage import as_environment, environment_row
from envfactory_assets.envgen.verify import verify_environment
from envfactory_assets.runtime.static_check import static_check
from envfactory_assets.sources.stage import scan_rows

MATCH_ESCAPE = """
import json

class M(type):
    def __instancecheck__(cls, obj):
        return True
    @property
    def __match_args__(cls):
        return ("__globals__",)

class C(metaclass=M):
    pass

def steal(state):
    match json.dumps:
        case C(g):
            return g
"""


def test_static_check_refuses_the_match_class_pattern_escape():
    problems = " ".join(static_check(MATCH_ESCAPE))
    assert "'match' statements are not allowed" in problems
    assert "metaclass" in problems and "__instancecheck__" in problems


def _spec(
    title: str = "Orders", license_name: str = "MIT", summary: str = "Create an order", field: dict | None = None
) -> dict:
    props = {"name": {"type": "string"}, **({"extra": field} if field else {})}
    return {
        "openapi": "3.0.0",
        "info": {
            "title": title,
            "version": "1",
            "license": {"name": license_name},
            "x-apisguru-categories": ["ecommerce"],
        },
        "paths": {
            "/orders": {
                "get": {"responses": {"200": {"description": "ok"}}},
                "post": {
                    "summary": summary,
                    "requestBody": {
                        "content": {
                            "application/json": {
                                "schema": {"type": "object", "required": ["name"], "properties": props}
                            }
                        }
                    },
                    "responses": {"201": {"description": "ok"}},
                },
            }
        },
    }


def _build_and_verify(tmp_path: Path, spec: dict) -> tuple[dict, str]:
    corpus = tmp_path / "corpus"
    corpus.mkdir(exist_ok=True)
    (corpus / "api.json").write_text(json.dumps(spec))
    accepted, rejected = scan_rows(corpus)
    assert len(accepted) == 1, rejected
    row = environment_row(accepted[0])
    assert row["status"] == "built", row["reasons"]
    return row, verify_environment(as_environment(row)).status


def test_spec_text_cannot_inject_code_into_the_generated_module(tmp_path):
    marker = tmp_path / "pwned"
    payload = f'MIT"""\nopen({str(marker)!r}, "w").write("x")\n"""'
    row, status = _build_and_verify(
        tmp_path, _spec(title='C:\\Users\\x """', license_name=payload, summary='Create an "order"\\')
    )
    assert status == "passed"
    assert not marker.exists()
    assert static_check(row["source"]) == []


@pytest.mark.parametrize(
    "field",
    [
        {"type": "integer", "maximum": -10},
        {"type": "integer", "minimum": 0.5, "maximum": 3.5},
        {"type": "number", "maximum": 0.5},
        {"type": "integer", "minimum": 123456789012345678901234567890},
        {"type": "string", "enum": ["short", "much-too-long-for-the-limit"], "maxLength": 6},
        {"type": "string", "format": "email", "maxLength": 5},
        {"type": ["string", "null"], "maxLength": 0},
    ],
)
def test_schema_edge_cases_build_environments_that_pass_verification(tmp_path, field):
    _, status = _build_and_verify(tmp_path, _spec(field=field))
    assert status == "passed"


def test_a_document_the_builder_cannot_handle_becomes_a_build_failed_row(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "api.json").write_text(json.dumps(_spec()))
    (accepted,), _ = scan_rows(corpus)
    (corpus / "api.json").write_text(json.dumps(_spec(title="changed")))  # bytes differ from the scan
    row = environment_row(accepted)
    assert row["status"] == "build_failed" and "api.json" in row["reasons"][0]


def test_cli_names_the_bad_input(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path / "home"))
    cases = {
        "ops: 5": "must be a mapping",
        "ops: {environmnets: {config: {per_domain: 1}}}": "unknown assets ['environmnets']",
        "- just\n- a list": "expected a YAML mapping",
        "ops: {unclosed": "not valid YAML",
    }
    for text, expected in cases.items():
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text(text)
        assert cli_main(["run", "--config", str(cfg)]) == 2
        assert expected in capsys.readouterr().err
    assert cli_main(["run", "--select", "no_such_asset"]) == 2
    assert "not a valid asset selection" in capsys.readouterr().err
    assert cli_main(["status"]) == 2
    assert "does not exist yet" in capsys.readouterr().err


def test_a_second_run_on_the_same_home_stops_with_a_clear_message(tmp_path):
    with run_lock(tmp_path):
        with pytest.raises(UsageError, match="another envfactory run holds"):
            with run_lock(tmp_path):
                pass
    with run_lock(tmp_path):  # released after the first run ends
        pass
