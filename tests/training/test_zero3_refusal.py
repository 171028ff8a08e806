"""ZeRO-3 with bitsandbytes 4-bit weights is refused by the engine, whichever route asked for ZeRO-3.

The routes: ``TrainConfig.deepspeed`` naming a stage-3 JSON (e.g. the params override
``emma.dialogue_train.deepspeed: deploy/deepspeed/zero3.json``), and the environment ``accelerate launch``
exports for ``--config_file deploy/accelerate/deepspeed_zero3.yaml`` or ``--use_deepspeed --zero_stage 3``
(computed here by accelerate's own launch code). DeepSpeed never starts: the refusal comes before the
Accelerator is built, before any checkpoint, model or tracker output.
"""

from __future__ import annotations

import pytest
import torch

from pipelines.errors import ConfigError
from pipelines.training import engine
from pipelines.training.config import ZERO3_WITH_QUANTIZED, TrainConfig
from pipelines.training.launch import DEPLOY_DIR

bnb = pytest.importorskip("bitsandbytes")

ZERO2_JSON, ZERO3_JSON = DEPLOY_DIR / "deepspeed" / "zero2.json", DEPLOY_DIR / "deepspeed" / "zero3.json"


class QuantizedTask:
    """QLoRA in miniature: a frozen bitsandbytes NF4 layer (quantised on the CPU) plus a trainable adapter."""

    paper = "engine test: a 4-bit base with an adapter"

    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(16, 16, generator=g)
        self.y = torch.randn(16, 8, generator=g)

    def build_model(self):
        model = torch.nn.Module()
        model.base = bnb.nn.Linear4bit(16, 8, bias=False, quant_type="nf4").to("cpu")   # Params4bit, uint8
        model.base.weight.requires_grad_(False)
        model.adapter = torch.nn.Linear(16, 8)
        return model

    def train_dataset(self):
        return list(zip(self.x, self.y))

    def valid_dataset(self):
        return None

    def collate(self, items):
        return {"x": torch.stack([i[0] for i in items]), "y": torch.stack([i[1] for i in items])}  # (B, 16), (B, 8)

    def compute_loss(self, model, batch):
        inner = getattr(model, "module", model)
        pred = inner.base(batch["x"]) + inner.adapter(batch["x"])                          # (B, 8)
        return torch.nn.functional.mse_loss(pred, batch["y"]), batch["y"].shape[0]

    def save_final(self, model, out_dir):
        torch.save(model.adapter.state_dict(), out_dir / "adapter.pt")


def launch_env(*launch_args: str) -> dict[str, str]:
    """The ACCELERATE_* variables ``accelerate launch <launch_args> train.py`` gives a DeepSpeed run
    (accelerate's own argument handling and ``prepare_deepspeed_cmd_env``; nothing is started)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    args = launch_command_parser().parse_args([*launch_args, "train.py"])
    args, defaults, mp_from_config = _validate_launch_command(args)
    assert args.use_deepspeed
    fields = list(defaults.deepspeed_config) if defaults else []   # as accelerate's launch_command does
    args.deepspeed_fields_from_accelerate_config = ",".join(fields + (["mixed_precision"] if mp_from_config else []))
    _, env = prepare_deepspeed_cmd_env(args)
    return {k: v for k, v in env.items() if k.startswith("ACCELERATE_")}


ZERO3_YAML = ("--config_file", str(DEPLOY_DIR / "accelerate" / "deepspeed_zero3.yaml"))
ZERO3_FLAGS = ("--use_deepspeed", "--zero_stage", "3", "--num_processes", "2")


@pytest.fixture
def no_accelerator(monkeypatch):
    """The refusal must come before the Accelerator (and so before DeepSpeed starts)."""
    def refuse(config):
        raise AssertionError("the Accelerator was built: the ZeRO-3 refusal came too late")

    monkeypatch.setattr(engine, "build_accelerator", refuse)


def _refused(tmp_path, tracker, config: TrainConfig) -> None:
    with pytest.raises(ConfigError) as err:
        engine.train(QuantizedTask(), config, tracker=tracker, progress=False)
    assert str(err.value) == ZERO3_WITH_QUANTIZED
    assert "ZeRO-3 cannot train this model" in str(err.value) and "use DDP or ZeRO-2" in str(err.value)
    assert not (tmp_path / "run").exists()                     # no run folder, no checkpoint, no final model
    assert tracker.metrics == [] and tracker.cards == [] and tracker.registered == []
    assert not torch.distributed.is_initialized()


def test_the_launch_environment_is_read_as_accelerate_reads_it():
    yaml_env = launch_env(*ZERO3_YAML)
    assert yaml_env["ACCELERATE_USE_DEEPSPEED"] == "true"
    assert yaml_env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == "deploy/deepspeed/zero3.json"
    assert "ACCELERATE_DEEPSPEED_ZERO_STAGE" not in yaml_env                 # the stage is the JSON's
    assert launch_env(*ZERO3_FLAGS)["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"


@pytest.mark.parametrize("env_args, deepspeed, expected", [
    (None, None, None),                       # one process / DDP
    (None, ZERO2_JSON, 2),
    (None, ZERO3_JSON, 3),
    (ZERO3_YAML, None, 3),                    # accelerate launch --config_file deploy/accelerate/deepspeed_zero3.yaml
    (ZERO3_FLAGS, None, 3),                   # accelerate launch --use_deepspeed --zero_stage 3
    (("--use_deepspeed", "--num_processes", "2"), None, 2),   # accelerate's default stage
    (ZERO3_FLAGS, ZERO2_JSON, 2),             # TrainConfig.deepspeed's JSON wins over the launcher
])
def test_zero_stage_of_each_route(tmp_path, no_launcher_env, env_args, deepspeed, expected):
    from pipelines.config import CODE_ROOT

    no_launcher_env.chdir(CODE_ROOT)          # accelerate configs name deploy/... relative to the project
    for key, value in (launch_env(*env_args) if env_args else {}).items():
        no_launcher_env.setenv(key, value)
    config = TrainConfig(output_dir=str(tmp_path), deepspeed=None if deepspeed is None else str(deepspeed))
    assert engine.zero_stage(config) == expected


def test_zero3_json_in_the_train_config_is_refused(tmp_path, tracker, no_launcher_env, no_accelerator):
    _refused(tmp_path, tracker, TrainConfig(output_dir=str(tmp_path / "run"), deepspeed=str(ZERO3_JSON),
                                            max_steps=2, batch_size=4))


@pytest.mark.parametrize("launch", [ZERO3_YAML, ZERO3_FLAGS], ids=["accelerate-config", "cli-flags"])
def test_zero3_from_the_launcher_is_refused(tmp_path, tracker, no_launcher_env, no_accelerator, launch):
    from pipelines.config import CODE_ROOT

    no_launcher_env.chdir(CODE_ROOT)
    for key, value in launch_env(*launch).items():
        no_launcher_env.setenv(key, value)
    _refused(tmp_path, tracker, TrainConfig(output_dir=str(tmp_path / "run"), max_steps=2, batch_size=4))


def test_the_refusal_is_about_quantised_weights_under_zero3_only(tmp_path, tracker, no_launcher_env, one_thread):
    engine.refuse_zero3_with_quantized(False, 3)         # full-precision weights: ZeRO-3 shards them
    engine.refuse_zero3_with_quantized(True, 2)          # QLoRA under ZeRO-2
    engine.refuse_zero3_with_quantized(True, None)       # QLoRA, one process or DDP
    with pytest.raises(ConfigError, match="ZeRO-3 cannot train this model"):
        engine.refuse_zero3_with_quantized(True, 3)
    summary = engine.train(QuantizedTask(), TrainConfig(output_dir=str(tmp_path / "run"), max_steps=2, batch_size=4,
                                                        lr=1e-2), tracker=tracker, progress=False)
    assert summary.final_step == 2 and (tmp_path / "run" / "final" / "adapter.pt").is_file()
