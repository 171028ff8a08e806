"""The MLflow UI (`make mlflow`) in headless Chromium, over the store the UI-launched run filled:
one experiment per method, runs named ``<stage>-<profile>``, a training run's params, metric
charts and model card, and the registered models with their versions.

What the pages must show is read from ``pipelines.stages.STAGES`` and, through the started
server's REST API, from the store itself.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from pipelines.config import resolve
from pipelines.stages import STAGES
from tests.browser import harness as h

pytestmark = pytest.mark.browser

TRAINING = [s for s in STAGES.values() if s.launcher == "accelerate"]  # each registers its model


def first_training_stage():
    assert TRAINING, "the registry has no training stage (launcher='accelerate')"
    return TRAINING[0]


@pytest.fixture(scope="module")
def client(mlflow_ui, materialized):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=mlflow_ui.mlflow_url)  # the started server's REST API


@pytest.fixture(scope="module")
def profile(mlflow_ui) -> str:
    return resolve(params_file=mlflow_ui.root / "params.yaml")["profile"]


def stage_run(client, stage, profile):
    exp = client.get_experiment_by_name(stage.mlflow_experiment)
    runs = client.search_runs([exp.experiment_id], filter_string=f"attributes.run_name = '{stage.run_name}-{profile}'")
    assert len(runs) == 1, f"{stage.run_name}-{profile}: {len(runs)} runs in {stage.mlflow_experiment}"
    return exp, runs[0]


def test_one_experiment_per_method(mlflow_ui, driver, client):
    expected = sorted({s.mlflow_experiment for s in STAGES.values()})
    stored = sorted(e.name for e in client.search_experiments() if e.name != "Default")
    assert stored == expected
    driver.get(f"{mlflow_ui.mlflow_url}/#/experiments")
    h.wait_for_texts(driver, ["Experiments", *expected], "MLflow experiments list")
    h.screenshot(driver, "mlflow-experiments")


def test_runs_are_named_by_stage_and_profile(mlflow_ui, driver, client, profile):
    # A partitioned stage (benchmark_shard) runs once per partition, each run named ``<name>@<key>``.
    by_experiment = defaultdict(list)
    for stage in STAGES.values():
        for key in stage.partitions or (None,):
            by_experiment[stage.mlflow_experiment].append(stage.for_partition(key))
    for name, stages in sorted(by_experiment.items(), key=lambda kv: len(kv[1])):  # the largest one last
        exp = client.get_experiment_by_name(name)
        for stage in stages:
            _, run = stage_run(client, stage, profile)
            assert run.info.status == "FINISHED", f"{stage.run_name}: {run.info.status}"
            assert run.data.tags["mnemos.stage"] == stage.run_name
        driver.get(f"{mlflow_ui.mlflow_url}/#/experiments/{exp.experiment_id}/runs")
        h.wait_for_texts(driver, ["Runs", name, f"{len(stages)} matching run{'s' if len(stages) > 1 else ''}",
                                  *[f"{s.run_name}-{profile}" for s in stages]], f"runs of {name}")
    h.screenshot(driver, "mlflow-runs")


def test_training_run_page_shows_params_metrics_and_loss_chart(mlflow_ui, driver, client, profile):
    stage = first_training_stage()
    exp, run = stage_run(client, stage, profile)
    params, metrics = run.data.params, run.data.metrics
    assert params["profile"] == profile and "train/loss" in metrics, (sorted(params), sorted(metrics))
    section = next(k for k in sorted(params) if k.startswith(f"{stage.params[0]}."))
    base = f"{mlflow_ui.mlflow_url}/#/experiments/{exp.experiment_id}/runs/{run.info.run_id}"

    driver.get(base)
    h.wait_for_texts(driver, [f"{stage.name}-{profile}", f"Parameters ({len(params)})", f"Metrics ({len(metrics)})",
                              f"profile {profile}", f"{section} {params[section]}", "train/loss", "Finished",
                              f"mnemos.stage : {stage.name}"], f"overview of {stage.name}-{profile}")
    h.screenshot(driver, "mlflow-run-overview")

    driver.get(f"{base}/model-metrics")
    h.wait_for_texts(driver, ["Model metrics", f"{stage.name}-{profile} (train/loss)"], "metric charts")
    h.screenshot(driver, "mlflow-run")


def test_training_run_artifacts_hold_the_model_card_naming_the_paper(mlflow_ui, driver, client, profile):
    stage = first_training_stage()
    exp, run = stage_run(client, stage, profile)
    cards = [mlflow_ui.root / out / "MODEL_CARD.md" for out in stage.outputs
             if (mlflow_ui.root / out / "MODEL_CARD.md").exists()]
    assert cards, f"no MODEL_CARD.md in the outputs {stage.outputs} of {stage.name}"
    card = cards[0].read_text()
    title = card.splitlines()[0].lstrip("# ").strip()
    paper = next(line for line in card.splitlines() if line.startswith("Implements:"))
    driver.get(f"{mlflow_ui.mlflow_url}/#/experiments/{exp.experiment_id}/runs/{run.info.run_id}/artifacts")
    h.click(driver, "//*[normalize-space(text())='model']", "model artifact folder")
    h.click(driver, "//*[normalize-space(text())='MODEL_CARD.md']", "MODEL_CARD.md artifact")
    h.wait_for_texts(driver, [title, paper.replace("**", "")], "model card preview")
    h.screenshot(driver, "mlflow-model-card")


def test_registered_models_list_every_trained_model_with_its_version(mlflow_ui, driver, client, profile):
    versions = {}
    first_training_stage()
    for stage in TRAINING:
        _, run = stage_run(client, stage, profile)
        found = client.search_model_versions(f"run_id = '{run.info.run_id}'")
        assert len(found) == 1, f"{stage.name}: {len(found)} model versions registered by its run"
        versions[found[0].name] = found[0].version
    driver.get(f"{mlflow_ui.mlflow_url}/#/models")
    h.wait_for_texts(driver, ["Registered Models", *versions], "registered models")
    # On a first visit MLflow advertises its new registry UI in a modal over the list: close it.
    promo = "//*[@role='dialog'][contains(normalize-space(),'Model Registry UI')]"
    h.click(driver, f"{promo}//button[@aria-label='Close']", "registry UI promotion's Close button", timeout=15)
    modal = f"{promo} | //*[contains(@class,'modal-mask')]"  # the dialog and its fading backdrop
    h.wait_until(driver, lambda: not any(e.is_displayed() for e in driver.find_elements("xpath", modal)),
                 "the promotion did not close", shot="models-promo")
    h.wait_for_texts(driver, [f"{name} Version {v}" for name, v in versions.items()], "registered model versions")
    h.screenshot(driver, "mlflow-models")
