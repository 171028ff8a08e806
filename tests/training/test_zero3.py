"""DeepSpeed ZeRO-3 beyond one GPU (issue #30), on the CPU with two gloo processes.

ZeRO-3 (Rajbhandari et al. 2020) partitions every parameter over the ranks. The engine builds the model
under zero.Init (``engine.build_partitioned``: transformers' ``from_pretrained`` loads a local folder
straight into the partitions), so each rank holds about half of the tiny GPT-2 right after the build and
nothing whole; it trains to the plain single-process engine's losses (no dropout, the same 8 examples a
step); each checkpoint holds every rank's shards only, and a run killed with SIGKILL resumes from them;
the final folder, consolidated from the shards by deepspeed's zero_to_fp32, loads with plain transformers
and equals the weights gathered from the trained ranks. A 4-bit model is still refused under ZeRO-3
when it is loaded as G-Long's extractor loads it (a ``from_pretrained`` with a ``device_map``).

The launches: ``accelerate launch --config_file deploy/accelerate/deepspeed_zero3.yaml --num_processes 2``
(the launcher's route) and torchrun with ``TrainConfig.deepspeed = deploy/deepspeed/zero3.json``.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path

import pytest
import torch

from pipelines.errors import ConfigError
from pipelines.training import engine
from pipelines.training.config import ZERO3_WITH_QUANTIZED, TrainConfig
from pipelines.training.launch import DEPLOY_DIR, launch_command
from tests.training._launch import free_port, launch_env, run_launch
from tests.training.tiny_task import TinyLMTask, params_hash

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("tiny_task.py")
ZERO3_JSON = DEPLOY_DIR / "deepspeed" / "zero3.json"
STEPS = 6


def _task_args(out: Path, pretrained: Path, *extra: str) -> list[str]:
    return [str(SCRIPT), "--out", str(out), "--max-steps", str(STEPS), "--eval-every", "3",
            "--pretrained", str(pretrained), *extra]


def _accelerate_zero3(out: Path, pretrained: Path) -> list[str]:
    return launch_command("tiny", "accelerate", "deepspeed_zero3", num_processes=2,
                          extra_args=["--main_process_port", free_port()], entry=_task_args(out, pretrained))


def _torchrun_zero3(out: Path, pretrained: Path, *extra: str) -> list[str]:
    return launch_command("tiny", "torchrun", num_processes=2, extra_args=["--master_port", free_port()],
                          entry=_task_args(out, pretrained, "--deepspeed", str(ZERO3_JSON), *extra))


def _kill_tree(pid: int) -> None:
    """SIGKILL a launcher and every process it started, at once (torchrun starts each rank in a session of its
    own, so killing the launcher's process group would leave the ranks running)."""
    import psutil

    launcher = psutil.Process(pid)
    for proc in [*launcher.children(recursive=True), launcher]:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def _pretrained_model(folder: Path):
    from transformers import GPT2LMHeadModel

    return GPT2LMHeadModel.from_pretrained(str(folder))


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    """A saved tiny GPT-2 of TinyLMTask's size without dropout: the ZeRO-3 runs and the plain one start from it."""
    from pipelines.models.gpt2 import GPT2Spec, build_gpt2

    task = TinyLMTask()
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("pretrained") / "gpt2"
    build_gpt2(GPT2Spec(n_layer=1, n_head=2, n_embd=task.n_embd, n_positions=task.seq_len, dropout=0.0),
               task.vocab).save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def zero3_run(tmp_path_factory, pretrained) -> Path:
    """One uninterrupted 2-process ZeRO-3 run through deploy/accelerate/deepspeed_zero3.yaml (about 20 s)."""
    out = tmp_path_factory.mktemp("zero3") / "run"
    run_launch(_accelerate_zero3(out, pretrained))
    return out


@pytest.mark.slow  # two DeepSpeed processes: about 20 s (plus DeepSpeed's one-off op build on a fresh machine)
def test_each_rank_builds_only_its_partition_of_the_pretrained_weights(zero3_run, pretrained):
    full_model = _pretrained_model(pretrained)
    sizes = [p.numel() for p in full_model.parameters()]
    reports = [json.loads((zero3_run / f"partition-rank{r}.json").read_text()) for r in (0, 1)]
    for report in reports:
        assert report["full"] == sum(sizes)                          # every parameter is known by its full size
        assert report["partition"] == sum(math.ceil(n / 2) for n in sizes)   # ... and held as a half (padded)
        assert report["materialised"] == 0                           # nothing whole, at any time after the build
        assert report["hash"] == params_hash(full_model)             # gathered: the saved folder's very weights
    assert sum(r["partition"] for r in reports) < sum(sizes) + len(sizes)


@pytest.mark.slow
def test_zero3_trains_as_the_plain_engine_and_consolidates_one_plain_folder(zero3_run, pretrained, tmp_path,
                                                                         one_thread):
    from safetensors.torch import load_file

    ds = json.loads((zero3_run / "summary.json").read_text())
    assert ds["num_processes"] == 2 and ds["distributed_type"] == "DEEPSPEED" and ds["final_step"] == STEPS
    # the plain engine in one process, 8 examples a step: what the 2 ranks x 4 of the ZeRO-3 run see together
    plain_task = TinyLMTask(pretrained=str(pretrained))
    plain = engine.train(plain_task, TrainConfig(output_dir=str(tmp_path / "plain"), lr=3e-3, warmup_steps=3,
                                                 max_steps=STEPS, batch_size=8, save_every=2, eval_every=3,
                                                 early_stopping_patience=None), progress=False)
    assert [s for s, _ in ds["train_losses"]] == [s for s, _ in plain.train_losses]
    assert [v for _, v in ds["train_losses"]] == pytest.approx([v for _, v in plain.train_losses], abs=1e-5)
    assert [v for _, v in ds["valid_losses"]] == pytest.approx([v for _, v in plain.valid_losses], abs=1e-5)
    assert ds["train_losses"][-1][1] < ds["train_losses"][0][1]

    step_dir = zero3_run / "checkpoints" / f"step-{STEPS}"
    assert not (step_dir / "model.safetensors").exists()             # shards only: nothing gathered to save
    assert sorted(p.name for p in (step_dir / "pytorch_model").glob("*_optim_states.pt")) == [
        "zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"]

    final = zero3_run / "final"
    weights = load_file(str(final / "model.safetensors"))            # plain safetensors, no DeepSpeed
    assert set(weights) >= {"transformer.wte.weight", "transformer.h.0.attn.c_attn.weight"}
    model = _pretrained_model(final)
    gathered = {(zero3_run / f"params-rank{r}.sha256").read_text() for r in (0, 1)}
    assert gathered == {params_hash(model)}                          # = the weights gathered from both ranks
    reference = plain_task.model.state_dict()
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, reference[name], atol=1e-5, rtol=0)


@pytest.mark.slow  # a killed run, a refused 1-process resume and the real resume: about 40 s
def test_a_zero3_run_killed_by_sigkill_resumes_from_its_shards(zero3_run, pretrained, tmp_path):
    out = tmp_path / "killed"
    log = open(tmp_path / "killed.log", "w")
    launch = subprocess.Popen(_torchrun_zero3(out, pretrained, "--sleep", "0.5"), cwd=ROOT, env=launch_env(),
                              stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 240
    try:
        while not (out / "checkpoints" / "step-2" / "trainer_state.json").is_file():
            assert launch.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            assert time.time() < deadline, "the run never wrote its checkpoint of step 2"
            time.sleep(0.1)
    finally:
        _kill_tree(launch.pid)                                       # the launcher and both ranks
        launch.wait()
        log.close()
    assert not (out / "final").exists()

    # its shards are 2 processes' partitions: one process may not load them
    single = subprocess.run(launch_command("tiny", "python", entry=_task_args(out, pretrained, "--deepspeed",
                                                                              str(ZERO3_JSON))),
                            cwd=ROOT, env=launch_env(), capture_output=True, text=True, timeout=300)
    assert single.returncode != 0 and "ZeRO-3 partitions of 2 processes but this run has 1" in single.stderr

    run_launch(_torchrun_zero3(out, pretrained))
    resumed = json.loads((out / "summary.json").read_text())
    uninterrupted = json.loads((zero3_run / "summary.json").read_text())
    assert 2 <= resumed["resumed_from_step"] < STEPS
    assert [s for s, _ in resumed["train_losses"]] == [s for s, _ in uninterrupted["train_losses"]]
    assert [v for _, v in resumed["train_losses"]] == pytest.approx([v for _, v in uninterrupted["train_losses"]],
                                                                    abs=1e-6)
    assert params_hash(_pretrained_model(out / "final")) == params_hash(_pretrained_model(zero3_run / "final"))


class FourBitBaseTask:
    """A 4-bit base loaded as G-Long's extractor loads it: ``from_pretrained`` with a bitsandbytes config and a
    ``device_map``, which transformers refuses under ZeRO-3 before it quantises anything."""

    paper = "engine test: a 4-bit from_pretrained"

    def __init__(self, folder: Path):
        self.folder = folder

    def build_model(self):
        from pipelines.glong.tasks import load_base

        return load_base(self.folder, "causal", quantize_4bit=True)

    def train_dataset(self):
        raise AssertionError("the refusal comes before the data")

    valid_dataset = collate = compute_loss = save_final = train_dataset


def test_a_4bit_from_pretrained_with_a_device_map_is_refused_under_zero3(tmp_path, tracker, no_launcher_env,
                                                                         tiny_llama):
    pytest.importorskip("bitsandbytes")
    from transformers.integrations import is_deepspeed_zero3_enabled

    def refuse(config):
        raise AssertionError("the Accelerator was built: the ZeRO-3 refusal came too late")

    no_launcher_env.setattr(engine, "build_accelerator", refuse)
    config = TrainConfig(output_dir=str(tmp_path / "run"), deepspeed=str(ZERO3_JSON), max_steps=2, batch_size=4)
    with pytest.raises(ConfigError) as err:
        engine.train(FourBitBaseTask(tiny_llama), config, tracker=tracker, progress=False)
    assert str(err.value) == ZERO3_WITH_QUANTIZED and "device_map" in str(err.value.__cause__ or err.value.__context__)
    assert not (tmp_path / "run").exists() and tracker.metrics == []
    assert not torch.distributed.is_initialized() and not is_deepspeed_zero3_enabled()   # nothing left switched on
