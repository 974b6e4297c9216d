"""A real JupyterLab and a headless Chromium for the browser tests.

`lab` starts JupyterLab from this Python environment on 127.0.0.1 (a free port, no token), with
every Jupyter / IPython / matplotlib / Chromium state folder inside a temporary folder, serving
copies of the notebooks (so nothing a test runs is saved back into the course). It is shut down
at the end of the session, kernels included, also when a test fails.

`page` is a fresh browser tab per test. When a test fails, a full-page screenshot, the browser's
console log and the server's log are saved under `test-artifacts/browser/<test>/` and their
paths are added to pytest's failure report. Every test also leaves `final.png` (the page as the
test left it) and `console.log` there.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Flags that keep Chromium quiet on a machine without a network (no update or sync traffic).
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
# Written into JupyterLab's (temporary) settings folder before it starts.
LAB_SETTINGS = {
    # The "get notified about Jupyter news?" pop-up would cover part of the page.
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    # Every cell stays in the page (no virtual scrolling), so a test sees the whole notebook.
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    # The copies are scratch files: never write them back.
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
}
SERVER_START_TIMEOUT_S = 90
# Page checks wait this long for the kernel to redraw after a slider moves (a loaded 2-core
# machine can take a few seconds to draw 16 maps).
expect.set_options(timeout=15_000)

# This test process draws figures too (to compute what the page should show): its matplotlib
# cache goes to a temporary folder as well, not to ~/.config/matplotlib.
_PROCESS_STATE = tempfile.mkdtemp(prefix="gptlib-browser-tests-")
os.environ["MPLCONFIGDIR"] = _PROCESS_STATE


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_PROCESS_STATE, ignore_errors=True)


@dataclass
class Lab:
    url: str  # e.g. http://127.0.0.1:8891
    root: Path  # the folder JupyterLab serves: copies of notebooks/
    log: Path  # the server's stdout + stderr
    yours: Path  # the reader's package its kernels keep passing functions in (empty at first)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _isolated_env(state: Path) -> dict[str, str]:
    """The environment for the server (and so its kernels): state folders under `state`,
    one thread per kernel, and matplotlib's inline backend (a forced Agg would draw no images)."""
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)
    folders = {
        "JUPYTER_CONFIG_DIR": "jupyter-config",
        "JUPYTER_DATA_DIR": "jupyter-data",
        "JUPYTER_RUNTIME_DIR": "jupyter-runtime",
        "JUPYTERLAB_SETTINGS_DIR": "lab-settings",
        "JUPYTERLAB_WORKSPACES_DIR": "lab-workspaces",
        "IPYTHONDIR": "ipython",
        "MPLCONFIGDIR": "matplotlib",
        "XDG_CONFIG_HOME": "xdg-config",
        "XDG_CACHE_HOME": "xdg-cache",
        "npm_config_cache": "npm",  # JupyterLab asks npm for its prefix; npm writes a log there
        "GPTLIB_YOURS": "yourgpt",  # the reader's package: empty, never the course's own
    }
    for name, sub in folders.items():
        (state / sub).mkdir(parents=True, exist_ok=True)
        env[name] = str(state / sub)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
    return env


def _write_settings(settings_dir: Path) -> None:
    for plugin, values in LAB_SETTINGS.items():
        path = settings_dir / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def _wait_until_up(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"JupyterLab exited with code {process.returncode} while starting; "
                f"its log ({log}) ends with:\n{_tail(log)}"
            )
        try:
            with urllib.request.urlopen(f"{url}/api/status", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(
        f"JupyterLab did not answer {url}/api/status within {SERVER_START_TIMEOUT_S} s; "
        f"its log ({log}) ends with:\n{_tail(log)}"
    )


def _stop(url: str, process: subprocess.Popen) -> None:
    """Ask the server to shut down (it stops its kernels), then make sure its whole process
    group, kernels included, is gone."""
    try:
        request = urllib.request.Request(f"{url}/api/shutdown", method="POST")
        urllib.request.urlopen(request, timeout=5).close()
        process.wait(timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)  # the server and every kernel it started
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@pytest.fixture(scope="session")
def lab(tmp_path_factory) -> Lab:
    base = tmp_path_factory.mktemp("jupyterlab")
    state, root = base / "state", base / "notebooks"
    env = _isolated_env(state)
    _write_settings(Path(env["JUPYTERLAB_SETTINGS_DIR"]))
    shutil.copytree(NOTEBOOKS, root, ignore=shutil.ignore_patterns("yourgpt"))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = base / "jupyterlab.log"
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--IdentityProvider.token=",
        "--ServerApp.disable_check_xsrf=True",  # lets the fixture stop kernels over plain HTTP
        f"--ServerApp.root_dir={root}",
    ]
    if os.geteuid() == 0:
        command.append("--allow-root")  # JupyterLab refuses to run as root otherwise
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command, env=env, cwd=root, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_until_up(url, process, log)
        yield Lab(url=url, root=root, log=log, yours=Path(env["GPTLIB_YOURS"]))
    finally:
        _stop(url, process)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the tests report failures themselves
        pass


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The course's website (`make site`), built once per test process into a temporary folder
    and served on 127.0.0.1: {"url", "out", "chapters", and what website.build.build returns}."""
    from website.build import build, chapters

    out = tmp_path_factory.mktemp("site") / "_site"
    done = build(out)
    done["chapters"] = {c["stem"]: c for c in chapters()}  # as built: notebooks may change later
    handler = functools.partial(_Quiet, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"url": f"http://127.0.0.1:{server.server_address[1]}", "out": out, **done}
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"no Chromium at {CHROMIUM}: the browser tests drive the system Chromium. Install "
            "it (Debian/Ubuntu: apt-get install chromium) or set CHROMIUM=/path/to/chromium."
        )
    home = tmp_path_factory.mktemp("chromium")
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
    }
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS, env=env
        )
        try:
            yield browser
        finally:
            browser.close()


def _artifact_dir(nodeid: str) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid.split("::", 1)[-1])
    folder = ARTIFACTS / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _shut_down_kernels(url: str) -> None:
    """Stop every kernel the server runs, so one test's notebook does not run on in the next."""
    with urllib.request.urlopen(f"{url}/api/kernels", timeout=5) as response:
        kernels = json.load(response)
    for kernel in kernels:
        request = urllib.request.Request(f"{url}/api/kernels/{kernel['id']}", method="DELETE")
        urllib.request.urlopen(request, timeout=30).close()


@pytest.fixture
def artifacts(request) -> Path:
    """This test's folder under test-artifacts/browser/, for screenshots taken along the way."""
    return _artifact_dir(request.node.nodeid)


@pytest.fixture
def page(browser, lab, request):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(30_000)
    console: list[str] = []
    page.on("console", lambda m: console.append(f"[{m.type}] {m.text}"))
    page.on("pageerror", lambda e: console.append(f"[pageerror] {e}"))
    page.console_log = console
    yield page
    try:
        folder = _artifact_dir(request.node.nodeid)
        page.screenshot(path=str(folder / "final.png"), full_page=True)
        (folder / "console.log").write_text("\n".join(console) + "\n")
    finally:
        context.close()
        _shut_down_kernels(lab.url)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed and "page" in item.funcargs:
        page = item.funcargs["page"]
        folder = _artifact_dir(item.nodeid)
        lines = []
        try:
            page.screenshot(path=str(folder / "failure.png"), full_page=True)
            lines.append(f"screenshot: {folder / 'failure.png'}")
        except Exception as e:  # a crashed page cannot be photographed; say so
            lines.append(f"screenshot failed: {e}")
        (folder / "console.log").write_text("\n".join(page.console_log) + "\n")
        lines.append(f"browser console: {folder / 'console.log'}")
        lab = item.funcargs.get("lab")
        if lab is not None:
            shutil.copyfile(lab.log, folder / "jupyterlab.log")
            lines.append(f"server log: {folder / 'jupyterlab.log'}")
        report.sections.append(("browser artefacts", "\n".join(lines)))
    return report


# The website's two test files share one build (the `site` fixture, ~1 minute): under
# `make browser` (`-n 2 --dist loadgroup`) they run on one worker; every other file keeps to one
# worker of its own, as `--dist loadfile` would have it (one JupyterLab per file at most).
SITE_FILES = ("test_site.py", "test_live_model.py")


def pytest_collection_modifyitems(items):
    for item in items:
        name = item.path.name
        item.add_marker(pytest.mark.xdist_group("site" if name in SITE_FILES else name))
