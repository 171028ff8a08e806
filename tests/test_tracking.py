import mlflow
from mlflow import MlflowClient

from pipelines import tracking


def test_stage_run_logs_params_tags_metrics_artifacts(mlflow_store, tmp_path):
    data = tmp_path / "in.txt"
    data.write_text("hello")
    report = tmp_path / "report.md"
    report.write_text("# report")
    config = {"profile": "tiny", "seed": 3, "benchmark": {"ks": [1, 5]}}
    with tracking.stage_run("demo", "mnemos-test", config, inputs={"in": data}) as t:
        t.log_metrics({"loss": 1.5, "name": "not a number", "flag": True}, step=0)
        t.log_metrics({"loss": 0.5}, step=1)
        t.log_artifact(report, artifact_path="reports")
        run_id = t.run_id
    client = MlflowClient(mlflow_store)
    run = client.get_run(run_id)
    assert run.info.run_name == "demo-tiny"
    assert run.data.params == {"profile": "tiny", "seed": "3", "benchmark.ks": "[1, 5]"}
    assert run.data.tags["mnemos.stage"] == "demo"
    assert run.data.tags["input_hash.in"] == tracking.content_hash(data)
    assert run.data.tags["mlflow.source.git.commit"]
    assert [m.value for m in client.get_metric_history(run_id, "loss")] == [1.5, 0.5]
    assert "name" not in run.data.metrics and "flag" not in run.data.metrics
    assert [a.path for a in client.list_artifacts(run_id, "reports")] == ["reports/report.md"]
    assert client.get_experiment(run.info.experiment_id).name == "mnemos-test"


def test_failed_stage_marks_run_failed(mlflow_store):
    try:
        with tracking.stage_run("boom", "mnemos-test", {"profile": "tiny"}) as t:
            run_id = t.run_id
            raise RuntimeError("x")
    except RuntimeError:
        pass
    assert MlflowClient(mlflow_store).get_run(run_id).info.status == "FAILED"


def test_register_model_creates_versions(mlflow_store, tmp_path):
    model_dir = tmp_path / "final"
    model_dir.mkdir()
    (model_dir / "model.safetensors").write_bytes(b"\0" * 8)
    for expected in ("1", "2"):
        with tracking.stage_run("train", "mnemos-test", {"profile": "tiny"}) as t:
            t.log_model_card("# card\nPaper: MDR")
            assert t.register_model(model_dir, "mnemos-demo", description="demo") == expected
    client = MlflowClient(mlflow_store)
    versions = client.search_model_versions("name='mnemos-demo'")
    assert sorted(str(v.version) for v in versions) == ["1", "2"]


def test_content_hash_of_folder_changes_with_content(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.txt").write_text("1")
    h1 = tracking.content_hash(tmp_path / "a")
    (tmp_path / "a" / "x.txt").write_text("2")
    assert tracking.content_hash(tmp_path / "a") != h1
    assert tracking.content_hash(tmp_path / "missing") == "missing"


def test_default_store_is_inside_the_project(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking.tracking_uri() == f"sqlite:///{tracking.ROOT / 'mlflow' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://example:5000")
    assert tracking.tracking_uri() == "http://example:5000"


def _killed_session(store: str, experiment: str, steps: range) -> str:
    """A run as a SIGKILLed session leaves it: RUNNING, metrics logged up to its last step."""
    mlflow.set_tracking_uri(store)
    client = MlflowClient(store)
    run = client.create_run(tracking._experiment(mlflow, experiment), tags={"mnemos.stage": "train"})
    for step in steps:
        client.log_metric(run.info.run_id, "train/loss", 10.0 - step, step=step)
    return run.info.run_id


def test_a_resumed_session_continues_its_run_with_each_step_once(mlflow_store):
    killed = _killed_session(mlflow_store, "mnemos-test", range(1, 6))  # killed at step 5, checkpoint at 3
    with tracking.stage_run("train", "mnemos-test", {"profile": "tiny"}, deferred=True) as t:
        assert t.continue_run(killed, at_step=3)
        for step in range(4, 9):  # the resumed session computes steps 4 and 5 again
            t.log_metrics({"train/loss": 10.0 - step, "valid/loss": 1.0}, step=step)
        assert t.run_id == killed
    client = MlflowClient(mlflow_store)
    run = client.get_run(killed)
    assert run.info.status == "FINISHED" and run.data.tags["mnemos.resumed_at_step"] == "3"
    history = client.get_metric_history(killed, "train/loss")
    assert sorted(m.step for m in history) == list(range(1, 9))  # each step once
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == [10.0 - s for s in range(1, 9)]
    assert [m.step for m in client.get_metric_history(killed, "valid/loss")] == [4, 5, 6, 7, 8]
    assert len(client.search_runs([run.info.experiment_id])) == 1


def test_a_run_missing_from_the_store_is_linked_from_a_new_run(mlflow_store):
    with tracking.stage_run("train", "mnemos-test", {"profile": "tiny"}, deferred=True) as t:
        assert not t.continue_run("0" * 32, at_step=7)
        run_id = t.run_id
    tags = MlflowClient(mlflow_store).get_run(run_id).data.tags
    assert tags["mnemos.resumed_from_run"] == "0" * 32 and tags["mnemos.resumed_at_step"] == "7"


def test_interrupted_stage_marks_run_killed(mlflow_store):
    try:
        with tracking.stage_run("stop", "mnemos-test", {"profile": "tiny"}) as t:
            run_id = t.run_id
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert MlflowClient(mlflow_store).get_run(run_id).info.status == "KILLED"
