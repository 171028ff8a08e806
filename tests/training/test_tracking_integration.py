"""The engine against the real MLflow tracker (pipelines/tracking.py) on a throw-away store."""

from __future__ import annotations

from pipelines.training.engine import TrainConfig, train
from tests.training.tiny_task import TinyLMTask


def test_metrics_card_and_registered_model_land_in_mlflow(tmp_path, mlflow_store, one_thread):
    import mlflow

    from pipelines import tracking

    cfg = TrainConfig(output_dir=str(tmp_path / "lm"), lr=3e-3, max_steps=4, batch_size=4, eval_every=2,
                      save_every=2, early_stopping_patience=None, model_name="mnemos-test-lm")
    with tracking.stage_run("engine_test", "mnemos-test", {"profile": "tiny"}) as tracker:
        summary = train(TinyLMTask(n_train=16, n_valid=8), cfg, tracker=tracker, progress=False)
        run_id = tracker.run_id
    client = mlflow.MlflowClient()
    history = client.get_metric_history(run_id, "train/loss")
    assert [m.step for m in history] == [1, 2, 3, 4]
    assert [m.value for m in history] == [loss for _, loss in summary.train_losses]
    assert [m.step for m in client.get_metric_history(run_id, "valid/loss")] == [2, 4]
    for key in ("train/lr", "train/tokens_per_s", "train/peak_memory_bytes"):
        assert len(client.get_metric_history(run_id, key)) == 4
    versions = client.search_model_versions("name='mnemos-test-lm'")
    assert [str(v.version) for v in versions] == ["1"] and versions[0].run_id == run_id
    card = mlflow.artifacts.load_text(f"runs:/{run_id}/model/MODEL_CARD.md")
    assert "Implements: **engine test task (tiny GPT-2" in card
    listed = {a.path for a in client.list_artifacts(run_id, "model")}
    assert "model/model.safetensors" in listed
