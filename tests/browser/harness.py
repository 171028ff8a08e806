"""What the browser tests stand on: a project copy, the two servers, headless Chromium, waits.

- :func:`build_project` copies the checkout the way ``tests/test_e2e.py`` does (every file git
  would ship), sets smaller synthetic knobs in its params.yaml, gives it its own Dagster home
  (telemetry off), MLflow store and git history (for ``dvc params diff``).
- :class:`Server` starts ``dagster dev`` or ``mlflow server`` in a process group of its own, waits
  for it by polling HTTP (bounded), and stops the whole group (SIGTERM, then SIGKILL).
- :func:`make_driver` drives Debian's ``/usr/bin/chromium`` through ``/usr/bin/chromedriver``
  with selenium; :func:`wait_for_texts` and :func:`click` are the explicit waits the tests use.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import yaml

from pipelines.config import CODE_ROOT, deep_merge

VENV_BIN = Path(sys.executable).parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL_BROWSER = CODE_ROOT / "deploy" / "install-browser.sh"
ARTIFACTS = CODE_ROOT / "test-artifacts" / "browser"     # every screenshot and server log (git-ignored)
SCREENSHOTS = CODE_ROOT / "docs" / "screenshots"         # the README's pictures
UPDATE_SCREENSHOTS = os.environ.get("MNEMOS_UPDATE_SCREENSHOTS") == "1"
# Headless, offline, no GPU: the flags the issue asks for, plus a fixed window for the screenshots
# and /tmp instead of a possibly tiny /dev/shm in containers.
CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--window-size=1600,1400", "--disable-dev-shm-usage")

# The temp projects' knobs (the browser tests' and tests/test_e2e.py's): small enough that the whole graph runs in
# about 2.5 minutes on 2 cores (4.5 with the tiny profile's passes, 2026-12-07, AVX2 kernels).
# MNEMOS_BROWSER_PARAMS (a JSON mapping, merged over these) overrides them, e.g.
# MNEMOS_BROWSER_PARAMS='{"mdr": {"teacher": {"epochs": 1}}}'.
BROWSER_PARAMS = {
    "profile": "tiny",
    "synthetic": {"episodes": 6, "sessions": 3, "turns": 6, "partners": 2, "queries_per_session": 2},
    # The benchmark's reader answers (and the judge reads) 1 question per reader, not the tiny profile's 2: every
    # reader still answers and is judged (the answers/ figures the DVC metrics show), in ~20 s less of a worker.
    "llm": {"max_questions": 1},
    # Fewer passes than the tiny profile's: the UI shows a run's params, metrics and loss curves whatever they reach
    # (the tiny profile's epochs are chosen for what the models learn; here ~40% of the whole-graph run).
    "mdr": {"teacher": {"epochs": 6}, "student": {"epochs": 2}, "decoder": {"epochs": 6}},
    "glong": {"summariser_train": {"epochs": 1}},
    "rerank": {"model": {"max_train_examples": 32}},
}
READY_TIMEOUT_S = float(os.environ.get("MNEMOS_BROWSER_READY_TIMEOUT", "120"))  # a server's start-up
RUN_TIMEOUT_S = float(os.environ.get("MNEMOS_BROWSER_RUN_TIMEOUT", "1200"))     # the whole-graph run
UI_TIMEOUT_S = float(os.environ.get("MNEMOS_BROWSER_UI_TIMEOUT", "60"))         # one page's content
STOP_TIMEOUT_S = 30.0                                                           # SIGTERM -> SIGKILL


def browser_params() -> dict:
    """BROWSER_PARAMS merged with the JSON mapping in MNEMOS_BROWSER_PARAMS (if set)."""
    raw = os.environ.get("MNEMOS_BROWSER_PARAMS", "").strip()
    if not raw:
        return dict(BROWSER_PARAMS)
    try:
        extra = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ValueError(f"MNEMOS_BROWSER_PARAMS must be a JSON mapping of params.yaml sections: {err}") from err
    if not isinstance(extra, dict):
        raise ValueError("MNEMOS_BROWSER_PARAMS must be a JSON mapping of params.yaml sections, "
                         f"not {type(extra).__name__}")
    return deep_merge(BROWSER_PARAMS, extra)


# --------------------------------------------------------------------------- the project copy

# What a run of the checkout leaves beside the code and git does not ignore: dvc.lock records that run's stages
# (make run writes it), not the code, so a fresh project copy starts without it.
RUN_STATE = frozenset({"dvc.lock"})


def shipped_files() -> list[str]:
    """Every file git would ship from the checkout (tracked, plus untracked and not ignored), but its run state."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=CODE_ROOT,
                         capture_output=True, text=True, check=True).stdout.split("\n")
    return [f for f in out if f and f not in RUN_STATE and (CODE_ROOT / f).is_file()]


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Project:
    """A temp copy of the project and the environment every command in it runs with."""

    root: Path              # the copy: params.yaml, data/, models/, reports/, mlflow/, .dagster_home/
    env: dict[str, str]     # MNEMOS_ROOT, DAGSTER_HOME, MLFLOW_TRACKING_URI, ... pointing into the copy
    dagster_port: int       # loopback port of `dagster dev`
    mlflow_port: int        # loopback port of the MLflow server

    @property
    def dagster_url(self) -> str:
        return f"http://127.0.0.1:{self.dagster_port}"

    @property
    def mlflow_url(self) -> str:
        return f"http://127.0.0.1:{self.mlflow_port}"

    @property
    def dagster_home(self) -> Path:
        return Path(self.env["DAGSTER_HOME"])

    def run(self, *cmd: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(cmd), cwd=self.root, env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc


def project_env(root: Path, mlflow_port: int) -> dict[str, str]:
    """The environment of every command run in the project copy at ``root``."""
    env = {k: v for k, v in os.environ.items() if k not in ("MNEMOS_PROFILE", "MLFLOW_TRACKING_URI")}
    env.update(
        PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(root), MNEMOS_ROOT=str(root),
        DAGSTER_HOME=str(root / ".dagster_home"), MLFLOW_TRACKING_URI=f"sqlite:///{root / 'mlflow' / 'mlflow.db'}",
        MNEMOS_ARTIFACT_ROOT=(root / "mlflow" / "artifacts").as_uri(),
        # The stages' "mlflow_run_url" metadata then links to the server these tests start.
        MNEMOS_MLFLOW_UI=f"http://127.0.0.1:{mlflow_port}",
        DAGSTER_DISABLE_TELEMETRY="1", MLFLOW_DISABLE_TELEMETRY="true", GX_ANALYTICS_ENABLED="false",
        DVC_NO_ANALYTICS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
    )
    return env


def copy_checkout(root: Path, knobs: dict) -> None:
    """Every file git would ship from the checkout copied into ``root``, with ``knobs`` merged over its params.yaml
    (the browser tests' and tests/test_e2e.py's project copies)."""
    for rel in shipped_files():
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(CODE_ROOT / rel, dest)
    params = yaml.safe_load((root / "params.yaml").read_text())
    (root / "params.yaml").write_text(yaml.safe_dump(deep_merge(params, knobs), sort_keys=False))


def build_project(root: Path) -> Project:
    """Copy the checkout into ``root``, shrink its knobs, and commit it (DVC diffs against HEAD)."""
    copy_checkout(root, browser_params())
    home = root / ".dagster_home"
    home.mkdir(exist_ok=True)
    # A fresh instance: SQLite storage in the home, no telemetry, and no record of the community dialog.
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    dagster_port, mlflow_port = free_port(), free_port()
    while mlflow_port == dagster_port:
        mlflow_port = free_port()
    env = project_env(root, mlflow_port)
    project = Project(root=root, env=env, dagster_port=dagster_port, mlflow_port=mlflow_port)
    project.run("git", "init", "-q")
    project.run("git", "add", "-A")
    project.run("git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "browser test project")
    return project


# --------------------------------------------------------------------------- servers

def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, ""
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, ""


def graphql(base_url: str, query: str, variables: dict | None = None, timeout: float = 30.0) -> dict:
    """POST a query to Dagster's GraphQL endpoint; raise on transport or GraphQL errors."""
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(f"{base_url}/graphql", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        answer = json.load(resp)
    if answer.get("errors"):
        raise RuntimeError(f"GraphQL errors: {answer['errors']}")
    return answer["data"]


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


@contextlib.contextmanager
def _sigint_handled():
    """Make SIGINT handled (not ignored) while spawning: a child then starts with it at default.

    ``dagster dev`` copies an ignored SIGINT onto SIGTERM (STACK-NOTES.md), which happens when the
    test run itself was started in the background without job control.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass
class Server:
    """One server process started in a process group of its own, so that signals reach its tree."""

    name: str                                # also names its log, test-artifacts/browser/<name>.log
    cmd: list[str]                           # the command line, run in the project copy
    project: Project                         # cwd and environment
    port: int                                # the loopback port it listens on
    proc: subprocess.Popen | None = None     # the group leader, once started
    log: Path = field(init=False)            # stdout and stderr

    def __post_init__(self):
        self.log = ARTIFACTS / f"{self.name}.log"

    def start(self) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as out, _sigint_handled():
            self.proc = subprocess.Popen(self.cmd, cwd=self.project.root, env=self.project.env, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def wait_ready(self, probe: Callable[[], bool], timeout: float = READY_TIMEOUT_S) -> float:
        """Poll ``probe`` until it holds; fail early if the process died. Returns seconds waited."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} before it was ready:\n"
                                   f"{self.log_tail()}")
            if probe():
                return time.monotonic() - start
            time.sleep(0.5)
        raise TimeoutError(f"{self.name} not ready on port {self.port} after {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM the whole group, SIGKILL what is left after ``timeout``. True if SIGTERM sufficed."""
        if self.proc is None:
            return True
        pgid = self.proc.pid  # start_new_session: the leader's pid is the group id
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        graceful = True
        while time.monotonic() < deadline:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=0.2)
            if self.proc.poll() is not None and not group_members(pgid):
                break
        else:
            graceful = False
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            kill_deadline = time.monotonic() + 10
            while group_members(pgid) and time.monotonic() < kill_deadline:
                time.sleep(0.2)
        return graceful


def dagster_server(project: Project) -> Server:
    """``dagster dev`` (webserver, daemon and code server), as ``make ui`` starts it."""
    return Server("dagster-dev", [str(VENV_BIN / "dagster"), "dev", "-m", "assets.definitions",
                                  "-h", "127.0.0.1", "-p", str(project.dagster_port)],
                  project, project.dagster_port)


def mlflow_server(project: Project) -> Server:
    """The MLflow UI over the project's store, as ``make mlflow`` starts it."""
    return Server("mlflow-server", [sys.executable, "-m", "pipelines.tracking", "serve", "--host", "127.0.0.1",
                                    "--port", str(project.mlflow_port)], project, project.mlflow_port)


WORKSPACE_QUERY = """{ workspaceOrError { __typename ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on PythonError { message } } } } } }"""


def dagster_ready(project: Project) -> bool:
    """The webserver answers and the code location ``assets.definitions`` is loaded."""
    if http_get(f"{project.dagster_url}/server_info")[0] != 200:
        return False
    try:
        entries = graphql(project.dagster_url, WORKSPACE_QUERY)["workspaceOrError"]["locationEntries"]
    except (OSError, RuntimeError, KeyError, urllib.error.URLError):
        return False
    for entry in entries:
        loaded = entry["locationOrLoadError"] or {}
        if loaded.get("__typename") == "PythonError":
            raise RuntimeError(f"code location {entry['name']} failed to load: {loaded['message']}")
    return bool(entries) and all(e["loadStatus"] == "LOADED" and e["locationOrLoadError"] for e in entries)


def mlflow_ready(project: Project) -> bool:
    status, body = http_get(f"{project.mlflow_url}/health")
    return status == 200 and body.strip() == "OK"


# --------------------------------------------------------------------------- the browser

def ensure_browser() -> None:
    """Install Chromium and its driver (deploy/install-browser.sh) if they are missing."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    proc = subprocess.run(["bash", str(INSTALL_BROWSER)], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0 or not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        raise RuntimeError(f"{INSTALL_BROWSER} could not install chromium and chromium-driver "
                           f"(deselect these tests with -m 'not browser'):\n{proc.stdout}\n{proc.stderr}")


def make_driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    service = Service(executable_path=str(CHROMEDRIVER), log_output=str(ARTIFACTS / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.implicitly_wait(0)  # explicit waits only
    driver.set_page_load_timeout(UI_TIMEOUT_S)
    return driver


def squash(text: str) -> str:
    """Whitespace collapsed to single spaces: how a description reads once rendered."""
    return " ".join(text.split())


def page_text(driver) -> str:
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    try:
        return driver.find_element(By.TAG_NAME, "body").text
    except WebDriverException:
        return ""


def screenshot(driver, name: str) -> Path:
    """Save the page to test-artifacts/browser/NAME.png (and to docs/screenshots/ when updating)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    if UPDATE_SCREENSHOTS and name in README_SCREENSHOTS:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, SCREENSHOTS / f"{name}.png")
    return path


README_SCREENSHOTS = {
    "dagster-asset-graph", "dagster-asset-check", "dagster-run", "dagster-benchmark-table",
    "mlflow-experiments", "mlflow-runs", "mlflow-run", "mlflow-model-card", "mlflow-models", "validation-report",
}


def wait_until(driver, condition: Callable[[], object], message: str | Callable[[], str],
               timeout: float = UI_TIMEOUT_S, poll: float = 0.5, shot: str | None = None):
    """WebDriverWait on ``condition``; on timeout save a screenshot and fail with ``message``."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=poll).until(lambda _d: condition())
    except TimeoutException:
        path = screenshot(driver, "timeout-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", shot or "page"))
        text = message() if callable(message) else message
        raise AssertionError(f"{text} (after {timeout:.0f} s; screenshot {path}; page text: "
                             f"{squash(page_text(driver))[:1500]!r})") from None


def wait_for_texts(driver, texts: Iterable[str], what: str, timeout: float = UI_TIMEOUT_S) -> str:
    """Wait until every one of ``texts`` is on the page (whitespace-insensitive); return the text."""
    wanted = [squash(t) for t in texts]
    missing = list(wanted)

    def all_there():
        text = squash(page_text(driver))
        missing[:] = [t for t in wanted if t not in text]
        return text if not missing else None

    return wait_until(driver, all_there, lambda: f"{what}: never showed {missing}", timeout, shot=what)


def shown_as(shown: str, name: str) -> bool:
    """``shown`` is ``name``, or ``name`` cut in the middle with an ellipsis (how long names render)."""
    if shown == name:
        return True
    head, sep, tail = shown.partition("\u2026")
    return bool(sep) and len(head) + len(tail) < len(name) and name.startswith(head) and name.endswith(tail)


def element(driver, xpath: str, what: str, timeout: float = UI_TIMEOUT_S, clickable: bool = False):
    """The first element matching ``xpath`` once it is visible (or clickable)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC

    cond = (EC.element_to_be_clickable if clickable else EC.visibility_of_element_located)((By.XPATH, xpath))
    return wait_until(driver, lambda: cond(driver), f"{what} ({xpath}) did not appear", timeout, shot=what)


def click(driver, xpath: str, what: str, timeout: float = UI_TIMEOUT_S):
    el = element(driver, xpath, what, timeout, clickable=True)
    el.click()
    return el


def button_with_text(text: str) -> str:
    return f"//button[normalize-space()='{text}']"


def open_mlflow_ui(driver, project: Project) -> None:
    """Open the MLflow UI in its "Model training" view, with its assistant side panel closed."""
    driver.get(f"{project.mlflow_url}/#/experiments")
    click(driver, "//*[normalize-space(text())='Model training']", "MLflow's Model training switch")
    element(driver, "//*[normalize-space(text())='Model registry']", "Model training navigation")
    close = driver.find_elements("css selector", "button[data-component-id='mlflow.assistant.chat_panel.close']")
    if close:  # a side panel MLflow opens by default; it would cover a third of every screenshot
        close[0].click()
