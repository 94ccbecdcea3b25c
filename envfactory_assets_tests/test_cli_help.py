"""The command line's help states each default's value, read from (or checked against) the one place it lives."""

from __future__ import annotations

import pytest


def test_the_help_shows_each_default_from_the_settings(capsys):
    """``serve-env --help`` prints the values the settings module holds, not where to look them up."""
    from envfactory_assets.cli import build_parser
    from envfactory_assets.serving.serve_env_settings import DEFAULT_MAX_ARGUMENT_BYTES, HttpSettings

    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve-env", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    defaults = HttpSettings()
    assert f"(default: {DEFAULT_MAX_ARGUMENT_BYTES})" in text
    assert f"(default: {defaults.max_sessions})" in text and f"(default: {defaults.idle_timeout_s:g})" in text
    assert "HttpSettings" not in text and ".py" not in text


def test_the_report_help_states_the_reports_own_seed(capsys):
    from envfactory_assets.cli import build_parser
    from envfactory_assets.reporting.report import REPORT_SEED

    with pytest.raises(SystemExit):
        build_parser().parse_args(["report", "--help"])
    assert f"(default: {REPORT_SEED})" in " ".join(capsys.readouterr().out.split())


def test_serve_openenv_help_shows_each_default_from_the_session_settings(capsys):
    from envfactory_assets.cli import build_parser
    from envfactory_assets.serving.serve_env_settings import SessionSettings

    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve-openenv", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    defaults = SessionSettings()
    for value in (defaults.max_sessions, defaults.max_steps, defaults.max_argument_bytes, defaults.workers):
        assert f"(default: {value})" in text
    assert f"(default: {defaults.idle_timeout_s:g})" in text and "SessionSettings" not in text
