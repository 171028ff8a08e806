"""Package fixtures of the browser tests: one project copy, one whole-graph run, two servers, one browser.

The whole graph is materialised once, by clicking "Materialize all" in the Dagster UI (the issue's
"launching the whole graph on the tiny profile from the UI"); every other test reads that run's
results through the Dagster UI, the MLflow UI, the validation report and DVC.
Deselect them with ``pytest -m 'not browser'``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from tests.browser import harness as h

RUNS_QUERY = "{ runsOrError { __typename ... on Runs { results { runId status } } } }"
TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}


@pytest.fixture(scope="package")
def project(tmp_path_factory, smollm2_models) -> h.Project:
    """The project copy; its benchmark's reader model is the session's converted SmolLM2 (MNEMOS_LLM_MODELS)."""
    project = h.build_project(tmp_path_factory.mktemp("browser-project"))
    project.env["MNEMOS_LLM_MODELS"] = str(smollm2_models)
    return project


@pytest.fixture(scope="package")
def servers(project):
    """``dagster dev`` and the MLflow server on free loopback ports; stopped (and checked) at the end."""
    started = [h.mlflow_server(project), h.dagster_server(project)]
    try:
        for server in started:
            server.start()
        started[0].wait_ready(lambda: h.mlflow_ready(project))
        started[1].wait_ready(lambda: h.dagster_ready(project))
    except BaseException:
        for server in started:
            server.stop()
        raise
    yield {s.name: s for s in started}
    graceful = {s.name: s.stop() for s in started}
    left = {s.name: h.group_members(s.proc.pid) for s in started}
    assert not any(left.values()), f"processes left after stopping the servers: {left}"
    assert not any(h.listening(s.port) for s in started), "a server port still accepts connections"
    assert all(graceful.values()), f"SIGTERM did not stop every server group within {h.STOP_TIMEOUT_S} s: {graceful}"


@pytest.fixture(scope="package")
def driver():
    h.ensure_browser()
    h.ARTIFACTS.mkdir(parents=True, exist_ok=True)
    drv = h.make_driver()
    try:
        yield drv
    finally:
        drv.quit()


@pytest.fixture(scope="package")
def dagster_ui(project, servers, driver) -> h.Project:
    """The Dagster UI opened once; its first-visit "Join the Dagster community" dialog skipped."""
    driver.get(f"{project.dagster_url}/asset-groups")
    h.element(driver, "//*[normalize-space()='Join the Dagster community']", "community dialog")
    h.click(driver, h.button_with_text("Skip"), "community dialog's Skip button")
    h.wait_until(driver, lambda: not driver.find_elements("xpath", h.button_with_text("Skip")),
                 "the community dialog did not close", shot="community-dialog")
    # Dagster records the dismissal in the instance (a GraphQL mutation): later visits skip the dialog.
    seen = project.dagster_home / ".nux" / "nux.yaml"
    h.wait_until(driver, seen.exists, f"Dagster never recorded the dismissed dialog in {seen}", timeout=15,
                 shot="community-dialog")
    return project


@dataclass
class UiRun:
    """The Dagster run launched by clicking "Materialize all"."""

    run_id: str     # Dagster's run id
    status: str     # its final status: SUCCESS, FAILURE or CANCELED
    seconds: float  # from the click to the final status


@pytest.fixture(scope="package")
def ui_run(dagster_ui, driver) -> UiRun:
    """Click "Materialize all" on the asset lineage page and wait for the run Dagster launches."""
    project = dagster_ui
    driver.get(f"{project.dagster_url}/asset-groups")
    before = {r["runId"] for r in h.graphql(project.dagster_url, RUNS_QUERY)["runsOrError"]["results"]}
    h.click(driver, h.button_with_text("Materialize all"), "Materialize all button")
    started = time.monotonic()

    def launched():
        runs = h.graphql(project.dagster_url, RUNS_QUERY)["runsOrError"]["results"]
        new = [r for r in runs if r["runId"] not in before]
        return new[0]["runId"] if new else None

    run_id = h.wait_until(driver, launched, "clicking Materialize all launched no run", shot="materialize-all")
    h.screenshot(driver, "dagster-materialize-all-launched")
    driver.get("about:blank")  # an idle tab while the run uses the cores

    def finished():
        status = h.graphql(project.dagster_url, "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }",
                           {"id": run_id})["runOrError"]["status"]
        return status if status in TERMINAL else None

    status = h.wait_until(driver, finished, f"run {run_id} did not finish", timeout=h.RUN_TIMEOUT_S, poll=2.0,
                          shot="run-timeout")
    return UiRun(run_id=run_id, status=status, seconds=round(time.monotonic() - started, 1))


@pytest.fixture(scope="package")
def materialized(ui_run, servers) -> UiRun:
    """The UI run, required to have succeeded (tests reading its results use this)."""
    if ui_run.status != "SUCCESS":
        pytest.fail(f"the whole-graph run {ui_run.run_id} ended {ui_run.status}; dagster dev log:\n"
                    f"{servers['dagster-dev'].log_tail()}")
    return ui_run


@pytest.fixture(scope="package")
def mlflow_ui(project, servers, driver) -> h.Project:
    """The MLflow UI opened once, switched to its "Model training" view, assistant panel closed."""
    h.open_mlflow_ui(driver, project)
    return project
