"""TrainConfig: every bad setting is refused with a sentence that says what to change."""

from __future__ import annotations

import json

import pytest

from pipelines.errors import ConfigError
from pipelines.training.config import TrainConfig, TrainSummary
from pipelines.training.launch import DEPLOY_DIR


@pytest.mark.parametrize("kwargs, message", [
    ({"lr": 0.0}, "learning rate must be a positive"),
    ({"batch_size": 0}, "batch_size is 0"),
    ({"grad_accum": 0}, "grad_accum is 0"),
    ({"warmup_steps": -1}, "cannot be negative"),
    ({"max_steps": 0}, "at least 1 step"),
    ({"max_steps": 5, "warmup_steps": 10}, "would never reach its peak"),
    ({"early_stopping_patience": 0}, "use at least 1, or None"),
    ({"precision": "fp8"}, "choose one of auto, fp32, bf16, fp16"),
    ({"schedule": "cosine"}, "choose one of linear, constant"),
    ({"compile": "sometimes"}, "use auto, true or false"),
    ({"compile_mode": "fast"}, "compile_mode is 'fast': choose one of default, reduce-overhead"),
    ({"compile_mode": "reduce-overhead", "compile_backend": "aot_eager"}, "mode of the inductor backend"),
    ({"fused_optimizer": "yes"}, "fused_optimizer is 'yes': use auto, true or false"),
    ({"length_buckets": [64, 32]}, "length_buckets is \\[64, 32\\]: give increasing positive lengths"),
    ({"length_buckets": [0, 8]}, "give increasing positive lengths"),
    ({"length_buckets": []}, "give increasing positive lengths"),
    ({"pack": True}, "pack is set but pack_length is not"),
    ({"pack_length": 0}, "pack_length is 0"),
    ({"pack": True, "pack_length": 128, "length_buckets": [64, 128]}, "drop length_buckets"),
    ({"adam_betas": (0.9, 1.0)}, r"must lie in \[0, 1\)"),
    ({"weight_decay": -0.1}, "cannot be negative"),
    ({"deepspeed": "deploy/deepspeed/missing.json"}, "does not exist"),
    ({"output_dir": ""}, "output_dir is empty"),
])
def test_bad_settings(tmp_path, kwargs, message):
    base = {"output_dir": str(tmp_path)}
    base.update(kwargs)
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**base)


def test_deepspeed_file_conflicts(tmp_path):
    with_opt = tmp_path / "opt.json"
    with_opt.write_text(json.dumps({"optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 2}}))
    with pytest.raises(ConfigError, match="defines an optimizer or scheduler"):
        TrainConfig(output_dir=str(tmp_path), deepspeed=str(with_opt))
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps({"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}}))
    with pytest.raises(ConfigError, match="gradient_accumulation_steps=4 but TrainConfig.grad_accum is 1"):
        TrainConfig(output_dir=str(tmp_path), deepspeed=str(fixed))
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        TrainConfig(output_dir=str(tmp_path), deepspeed=str(broken))


@pytest.mark.parametrize("name, stage, offload", [("zero2", 2, None), ("zero3", 3, None), ("zero2_offload", 2, "cpu")])
def test_shipped_deepspeed_configs(tmp_path, name, stage, offload):
    path = DEPLOY_DIR / "deepspeed" / f"{name}.json"
    cfg = TrainConfig(output_dir=str(tmp_path), deepspeed=str(path), batch_size=16, grad_accum=4)
    assert cfg.deepspeed_stage == stage
    ds = json.loads(path.read_text())
    assert ds["zero_optimization"].get("offload_optimizer", {}).get("device") == offload
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                "gradient_clipping"):
        assert ds[key] == "auto"


def test_from_dict_refuses_unknown_keys_and_round_trips(tmp_path):
    with pytest.raises(ConfigError, match="unknown training setting"):
        TrainConfig.from_dict({"output_dir": str(tmp_path), "learning_rate": 1e-4})
    cfg = TrainConfig.from_dict({"output_dir": str(tmp_path), "adam_betas": [0.9, 0.95]}, lr=3e-4)
    assert cfg.adam_betas == (0.9, 0.95) and cfg.lr == 3e-4
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    buckets = TrainConfig.from_dict({"output_dir": str(tmp_path), "length_buckets": [32, 64, 128]})
    assert buckets.length_buckets == (32, 64, 128) and buckets.to_dict()["length_buckets"] == [32, 64, 128]
    assert TrainConfig.from_dict(buckets.to_dict()) == buckets


def test_paper_defaults():
    cfg = TrainConfig(output_dir="x")
    assert (cfg.lr, cfg.seed, cfg.precision) == (1e-4, 2022, "auto")  # MDR: peak lr 1e-4, seed 2022


def test_the_speed_levers_default_to_todays_choices():
    """Issue #30's levers are settings that keep the engine as it was until a GPU measurement says otherwise."""
    cfg = TrainConfig(output_dir="x")
    assert (cfg.compile, cfg.compile_mode, cfg.length_buckets, cfg.pack, cfg.fused_optimizer) == (
        "auto", "default", None, False, "auto")


def test_summary_metrics():
    s = TrainSummary(final_step=10, epochs_done=2.5, train_losses=[(10, 1.25)], valid_losses=[(10, 1.5)],
                     best_valid_loss=1.5, stopped_early=True, tokens_per_s=100.0, peak_memory_bytes=2048,
                     resumed_from_step=4)
    assert s.to_metrics() == {"final_step": 10.0, "epochs_done": 2.5, "tokens_per_s": 100.0,
                              "peak_memory_bytes": 2048.0, "stopped_early": 1.0, "final_train_loss": 1.25,
                              "best_valid_loss": 1.5}
