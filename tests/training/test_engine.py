"""The training engine in one process: the update rule, accumulation, early stopping, logging, checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from pipelines.errors import ConfigError
from pipelines.training.engine import TrainConfig, resolve_compile, resolve_precision, step_seed, train
from pipelines.training.schedule import lr_multiplier
from tests.training.tiny_task import TinyLMTask

W_TRUE = torch.tensor([[1.5, -2.0, 0.5]])


class LinearTask:
    """Least squares y = x W^T + b on fixed data; validation targets may differ from training ones."""

    paper = "engine test: least squares"

    def __init__(self, n: int = 32, valid_sign: float | None = None):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, generator=g)
        self.y = self.x @ W_TRUE.T + 0.3
        self.valid_sign = valid_sign
        self.model = None

    def build_model(self):
        self.model = torch.nn.Linear(3, 1)
        torch.nn.init.zeros_(self.model.weight)
        torch.nn.init.zeros_(self.model.bias)
        return self.model

    def train_dataset(self):
        return list(zip(self.x, self.y))

    def valid_dataset(self):
        if self.valid_sign is None:
            return None
        return list(zip(self.x[:8], self.valid_sign * self.y[:8]))

    def collate(self, items):
        return {"x": torch.stack([i[0] for i in items]), "y": torch.stack([i[1] for i in items])}  # (B, 3), (B, 1)

    def compute_loss(self, model, batch):
        pred = model(batch["x"])  # (B, 1)
        return torch.nn.functional.mse_loss(pred, batch["y"]), batch["y"].shape[0]

    def save_final(self, model, out_dir):
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(Path(out_dir) / "model.safetensors"))


def reference_adamw(task: LinearTask, cfg: TrainConfig) -> torch.nn.Linear:
    """The update rule of the engine's docstring, written as a plain PyTorch loop."""
    model = task.build_model()
    opt = torch.optim.AdamW([{"params": [model.weight], "weight_decay": cfg.weight_decay},
                             {"params": [model.bias], "weight_decay": 0.0}], lr=cfg.lr, betas=cfg.adam_betas,
                            eps=cfg.adam_eps)
    data = task.train_dataset()
    steps_per_epoch = -(-len(data) // cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    step = 0
    for epoch in range(cfg.epochs):
        order = torch.randperm(len(data), generator=torch.Generator().manual_seed(cfg.seed + epoch)).tolist()
        for start in range(0, len(order), cfg.batch_size):
            batch = task.collate([data[i] for i in order[start:start + cfg.batch_size]])
            for group in opt.param_groups:
                group["lr"] = cfg.lr * lr_multiplier(step, cfg.warmup_steps, total, cfg.schedule)
            loss, _ = task.compute_loss(model, batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            opt.step()
            opt.zero_grad()
            step += 1
    return model


def _config(tmp_path, name, **kw) -> TrainConfig:
    base = dict(output_dir=str(tmp_path / name), lr=0.05, warmup_steps=2, epochs=2, batch_size=8,
                weight_decay=0.1, max_grad_norm=0.5, early_stopping_patience=None, save_every=100, eval_every=100)
    base.update(kw)
    return TrainConfig(**base)


def test_engine_equals_plain_pytorch_adamw_loop(tmp_path, one_thread):
    cfg = _config(tmp_path, "run")
    task = LinearTask()
    summary = train(task, cfg, progress=False)
    ref = reference_adamw(LinearTask(), cfg)
    assert summary.final_step == 8 and summary.epochs_done == 2.0
    torch.testing.assert_close(task.model.weight.detach(), ref.weight.detach(), atol=1e-6, rtol=0)
    torch.testing.assert_close(task.model.bias.detach(), ref.bias.detach(), atol=1e-6, rtol=0)
    assert not torch.equal(ref.weight, torch.zeros_like(ref.weight))  # it did train


def test_grad_accumulation_matches_the_full_batch(tmp_path, one_thread):
    full, accum = LinearTask(), LinearTask()
    s_full = train(full, _config(tmp_path, "full", batch_size=8, grad_accum=1), progress=False)
    s_acc = train(accum, _config(tmp_path, "accum", batch_size=4, grad_accum=2), progress=False)
    assert s_full.final_step == s_acc.final_step == 8
    torch.testing.assert_close(accum.model.weight.detach(), full.model.weight.detach(), atol=1e-6, rtol=0)
    torch.testing.assert_close(accum.model.bias.detach(), full.model.bias.detach(), atol=1e-6, rtol=0)
    for (step_a, loss_a), (step_b, loss_b) in zip(s_full.train_losses, s_acc.train_losses):
        assert step_a == step_b and loss_b == pytest.approx(loss_a, abs=1e-6)


def test_early_stopping_stops_after_patience_and_restores_best(tmp_path, one_thread):
    # Validation targets are the negated training targets: validation loss rises with every step.
    task = LinearTask(valid_sign=-1.0)
    cfg = _config(tmp_path, "es", max_steps=20, eval_every=1, save_every=100, early_stopping_patience=2,
                  warmup_steps=0, weight_decay=0.0)
    summary = train(task, cfg, progress=False)
    assert summary.stopped_early is True
    assert summary.final_step == 3
    assert [s for s, _ in summary.valid_losses] == [1, 2, 3]
    v = [loss for _, loss in summary.valid_losses]
    assert v[0] < v[1] < v[2]
    assert summary.best_step == 1 and summary.best_valid_loss == v[0]
    best = load_file(str(tmp_path / "es" / "checkpoints" / "step-1" / "model.safetensors"))
    final = load_file(str(tmp_path / "es" / "final" / "model.safetensors"))
    assert set(best) == set(final) == {"weight", "bias"}
    for key in best:
        assert torch.equal(best[key], final[key])
    last = load_file(str(tmp_path / "es" / "checkpoints" / "step-3" / "model.safetensors"))
    assert not torch.equal(last["weight"], final["weight"])


def test_no_early_stop_without_patience(tmp_path, one_thread):
    summary = train(LinearTask(valid_sign=-1.0), _config(tmp_path, "noes", max_steps=5, eval_every=1),
                    progress=False)
    assert summary.stopped_early is False and summary.final_step == 5 and len(summary.valid_losses) == 5


def test_tracker_gets_per_step_metrics_card_and_registration(tmp_path, tracker, one_thread):
    task = TinyLMTask(n_train=16, n_valid=8)
    cfg = TrainConfig(output_dir=str(tmp_path / "lm"), lr=3e-3, warmup_steps=3, max_steps=6, batch_size=4,
                      eval_every=3, save_every=3, early_stopping_patience=None, model_name="tiny-lm")
    summary = train(task, cfg, tracker=tracker, progress=False)
    losses = tracker.series("train/loss")
    assert [s for s, _ in losses] == [1, 2, 3, 4, 5, 6]
    assert [loss for _, loss in losses] == [loss for _, loss in summary.train_losses]
    assert tracker.series("train/lr") == [(s, pytest.approx(3e-3 * lr_multiplier(s - 1, 3, 6))) for s in range(1, 7)]
    assert all(v > 0 for _, v in tracker.series("train/tokens_per_s"))
    assert all(v > 0 for _, v in tracker.series("train/peak_memory_bytes"))
    assert [s for s, _ in tracker.series("valid/loss")] == [3, 6]
    assert len(tracker.cards) == 1 and "Implements: **engine test task (tiny GPT-2" in tracker.cards[0]
    assert tracker.registered == [(tmp_path / "lm" / "final", "tiny-lm")]
    assert summary.registered_version == "1"
    assert summary.tokens_per_s > 0 and summary.peak_memory_bytes > 0
    # tokens/s counts predicted tokens: 6 steps x 4 sequences x 11 next-token targets
    assert summary.tokens_per_s * summary.train_seconds == pytest.approx(6 * 4 * 11)
    final = tmp_path / "lm" / "final"
    assert (final / "MODEL_CARD.md").read_text() == tracker.cards[0]
    assert json.loads((final / "train_config.json").read_text())["max_steps"] == 6


def test_checkpoints_are_safetensors_and_rotate(tmp_path, one_thread):
    task = TinyLMTask(n_train=16, n_valid=0)
    cfg = TrainConfig(output_dir=str(tmp_path / "ck"), lr=3e-3, max_steps=8, batch_size=4, save_every=2,
                      keep_checkpoints=2, early_stopping_patience=None)
    train(task, cfg, progress=False)
    root = tmp_path / "ck" / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["step-6", "step-8"]
    for step_dir in root.iterdir():
        weights = load_file(str(step_dir / "model.safetensors"))
        expected = set(task.model.state_dict()) - {"lm_head.weight"}  # tied to transformer.wte.weight
        assert set(weights) == expected
        assert sorted(p.name for p in step_dir.iterdir()) == ["model.safetensors", "optimizer.bin",
                                                              "random_states_0.pkl", "trainer_state.json"]
        state = json.loads((step_dir / "trainer_state.json").read_text())
        step = int(step_dir.name.split("-")[1])
        assert state["step"] == step and state["epoch"] == 1 and state["batches_in_epoch"] == step - 4
    state8 = json.loads((root / "step-8" / "trainer_state.json").read_text())
    assert state8["finished"] is True and state8["epoch"] == 1 and len(state8["train_losses"]) == 8
    assert (tmp_path / "ck" / "final" / "model.safetensors").is_file()
    weights = load_file(str(root / "step-8" / "model.safetensors"))
    torch.testing.assert_close(weights["transformer.wte.weight"], task.model.transformer.wte.weight.detach())


def test_rerunning_a_finished_run_resumes_without_training(tmp_path, one_thread):
    cfg = TrainConfig(output_dir=str(tmp_path / "done"), lr=3e-3, max_steps=4, batch_size=4, save_every=2,
                      early_stopping_patience=None)
    first = train(TinyLMTask(n_train=16, n_valid=0), cfg, progress=False)
    again_task = TinyLMTask(n_train=16, n_valid=0)
    again = train(again_task, cfg, progress=False)
    assert again.resumed_from_step == 4 and again.final_step == 4
    assert again.train_losses == first.train_losses
    saved = load_file(str(tmp_path / "done" / "final" / "model.safetensors"))
    torch.testing.assert_close(saved["transformer.wte.weight"], again_task.model.transformer.wte.weight.detach())


def test_partial_and_stateless_checkpoint_folders_are_ignored(tmp_path, one_thread):
    out = tmp_path / "partial"
    root = out / "checkpoints"
    (root / ".tmp-step-4").mkdir(parents=True)
    (root / ".tmp-step-4" / "model.safetensors").write_bytes(b"half written")
    (root / "step-9").mkdir()  # no trainer_state.json: not a checkpoint
    cfg = TrainConfig(output_dir=str(out), lr=3e-3, max_steps=2, batch_size=4, save_every=1,
                      early_stopping_patience=None)
    summary = train(TinyLMTask(n_train=8, n_valid=0), cfg, progress=False)
    assert summary.resumed_from_step is None and summary.final_step == 2
    assert not (root / ".tmp-step-4").exists()


def test_epochs_bound_the_run_when_max_steps_is_unset(tmp_path, one_thread):
    # 20 examples / batch 8 = 3 micro-batches per epoch (the last one short); accumulation 2 -> 2 steps per epoch
    summary = train(LinearTask(n=20), _config(tmp_path, "ep", epochs=3, grad_accum=2), progress=False)
    assert summary.total_steps == 6 and summary.final_step == 6 and summary.epochs_done == 3.0


class LengthTask(LinearTask):
    """LinearTask whose examples have lengths and remember which ones each micro-batch held."""

    def __init__(self, n: int = 40):
        super().__init__(n)
        self.lengths = torch.randint(1, 100, (n,), generator=torch.Generator().manual_seed(1)).tolist()
        self.seen: list[list[int]] = []

    def train_dataset(self):
        return [(x, y, i) for i, (x, y) in enumerate(zip(self.x, self.y))]

    def train_lengths(self):
        return self.lengths

    def collate(self, items):
        self.seen.append([int(i[2]) for i in items])
        return super().collate(items)


def test_group_by_length_trains_on_the_length_grouped_order(tmp_path, one_thread):
    from transformers.trainer_pt_utils import get_length_grouped_indices

    task = LengthTask()
    summary = train(task, _config(tmp_path, "grouped", group_by_length=True, epochs=2), progress=False)
    assert summary.final_step == 10
    expected = [get_length_grouped_indices(task.lengths, 8, generator=torch.Generator().manual_seed(2022 + e))
                for e in range(2)]
    assert [i for b in task.seen for i in b] == expected[0] + expected[1]
    # 40 examples make mega-batches of one micro-batch (HF's default for small sets): each sorted, longest first
    assert all([task.lengths[i] for i in b] == sorted((task.lengths[i] for i in b), reverse=True) for b in task.seen)


def test_an_interrupted_length_grouped_run_resumes_to_the_same_weights(tmp_path, one_thread):
    class Stop(Exception):
        pass

    def stop_at_6(step, metrics):
        if step == 6:
            raise Stop

    whole = LengthTask()
    train(whole, _config(tmp_path, "whole", group_by_length=True, epochs=2), progress=False)
    cfg = _config(tmp_path, "cut", group_by_length=True, epochs=2, save_every=1)
    with pytest.raises(Stop):
        train(LengthTask(), cfg, progress=False, callback=stop_at_6)
    resumed = LengthTask()
    summary = train(resumed, cfg, progress=False)
    assert summary.resumed_from_step == 5 and summary.final_step == 10
    assert [i for b in resumed.seen for i in b] == [i for b in whole.seen[5:] for i in b]
    torch.testing.assert_close(resumed.model.weight, whole.model.weight)


@pytest.mark.parametrize("setting, cuda, deepspeed, quantized, expected", [
    ("auto", True, False, False, True), ("auto", False, False, False, False), ("auto", True, True, False, False),
    ("auto", True, False, True, False), (True, False, False, False, True), (False, True, False, False, False)])
def test_when_the_step_is_compiled(tmp_path, setting, cuda, deepspeed, quantized, expected):
    cfg = TrainConfig(output_dir=str(tmp_path), compile=setting)
    assert resolve_compile(cfg, cuda, deepspeed, quantized) is expected


@pytest.mark.parametrize("setting, cuda, mode, expected", [
    ("auto", False, "reduce-overhead", False), ("auto", True, "reduce-overhead", True),
    (True, True, "max-autotune", True), (True, False, "max-autotune-no-cudagraphs", True),
    (True, False, "reduce-overhead", "CUDA graphs"), (True, False, "max-autotune", "CUDA graphs")])
def test_a_cuda_graph_mode_needs_cuda_when_the_step_is_compiled(tmp_path, setting, cuda, mode, expected):
    """Off CUDA torch would compile a CUDA-graph mode and silently record no graph: refused, naming the setting.
    compile: auto does not compile on CPU, so the mode is then moot and nothing is refused."""
    cfg = TrainConfig(output_dir=str(tmp_path), compile=setting, compile_mode=mode)
    if isinstance(expected, str):
        with pytest.raises(ConfigError, match=f"compile_mode is '{mode}', which records {expected}"):
            resolve_compile(cfg, cuda, False, False)
    else:
        assert resolve_compile(cfg, cuda, False, False) is expected


@pytest.mark.parametrize("world", [1, 2])
def test_the_compile_mode_reaches_torch_compile(tmp_path, monkeypatch, world):
    from pipelines.training.engine import compiled_step

    calls = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: calls.append(kw) or fn)
    cfg = TrainConfig(output_dir=str(tmp_path), compile=True, compile_mode="max-autotune-no-cudagraphs")
    compiled_step(LinearTask(), torch.nn.Linear(3, 1), cfg, world=world)
    assert calls == [{"backend": "inductor", "mode": "max-autotune-no-cudagraphs"}]


@pytest.mark.parametrize("setting, run_default, expected", [
    ("auto", True, True), ("auto", False, False), (True, False, True), (False, True, False)])
def test_fused_adamw_setting(tmp_path, setting, run_default, expected):
    from pipelines.training.engine import build_optimizer

    cfg = TrainConfig(output_dir=str(tmp_path), fused_optimizer=setting)
    assert bool(build_optimizer(torch.nn.Linear(3, 1), cfg, fused=run_default).defaults["fused"]) is expected


def test_fused_adamw_trains_like_the_multi_tensor_one(tmp_path, one_thread):
    """torch's fused AdamW (on the CPU here) follows the update rule of the default (foreach) one."""
    fused, plain = LinearTask(), LinearTask()
    train(fused, _config(tmp_path, "fused", fused_optimizer=True), progress=False)
    train(plain, _config(tmp_path, "plain", fused_optimizer=False), progress=False)
    torch.testing.assert_close(fused.model.weight, plain.model.weight, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(fused.model.bias, plain.model.bias, atol=1e-6, rtol=1e-5)


def test_a_bucket_padded_run_trains_like_the_plain_one(tmp_path, one_thread):
    """TrainConfig.length_buckets changes the shapes of the training micro-batches, not the training."""
    from tests.training.tiny_task import VarLenLMTask

    kw = dict(lr=3e-3, max_steps=4, batch_size=4, save_every=100, early_stopping_patience=None, log_every=1)
    plain = train(VarLenLMTask(n_train=16, n_valid=0, dropout=0.0),
                  TrainConfig(output_dir=str(tmp_path / "plain"), **kw), progress=False)
    bucketed = train(VarLenLMTask(n_train=16, n_valid=0, dropout=0.0),
                     TrainConfig(output_dir=str(tmp_path / "buckets"), length_buckets=[8, 12], **kw), progress=False)
    for (_, a), (_, b) in zip(plain.train_losses, bucketed.train_losses):
        assert b == pytest.approx(a, rel=1e-5)


def test_a_compiled_step_trains_like_the_eager_one(tmp_path, one_thread):
    """The compiled step (the task's whole compute_loss, captured by dynamo; aot_eager keeps the test fast:
    the same graphs, no code generation) follows the eager run's loss curve."""
    import torch._dynamo

    torch._dynamo.reset()
    kw = dict(lr=3e-3, max_steps=4, batch_size=4, save_every=100, early_stopping_patience=None, log_every=1)
    eager = train(TinyLMTask(n_train=16, n_valid=0, dropout=0.0), TrainConfig(
        output_dir=str(tmp_path / "eager"), compile=False, **kw), progress=False)
    compiled = train(TinyLMTask(n_train=16, n_valid=0, dropout=0.0), TrainConfig(
        output_dir=str(tmp_path / "compiled"), compile=True, compile_backend="aot_eager", **kw), progress=False)
    assert [s for s, _ in compiled.train_losses] == [1, 2, 3, 4]
    for (_, a), (_, b) in zip(eager.train_losses, compiled.train_losses):
        assert a == pytest.approx(b, rel=1e-4)
    assert "torch.compile" in (tmp_path / "compiled" / "final" / "MODEL_CARD.md").read_text()


def test_auto_compile_falls_back_to_eager_when_the_backend_fails(tmp_path, one_thread):
    import torch._dynamo

    from pipelines.training.engine import compiled_step

    def failing_backend(graph_module, example_inputs):
        raise RuntimeError("this backend compiles nothing")

    torch._dynamo.reset()
    torch._dynamo.register_backend(failing_backend, name="mnemos_test_failing")
    task = LinearTask()
    model = task.build_model()
    batch = task.collate(task.train_dataset()[:4])
    expected = task.compute_loss(model, batch)[0]
    _, step = compiled_step(task, model, TrainConfig(output_dir=str(tmp_path), compile="auto",
                                                     compile_backend="mnemos_test_failing"), world=1)
    torch.testing.assert_close(step(model, batch)[0], expected)
    torch._dynamo.reset()
    _, strict = compiled_step(task, model, TrainConfig(output_dir=str(tmp_path), compile=True,
                                                       compile_backend="mnemos_test_failing"), world=1)
    with pytest.raises(Exception, match="compiles nothing"):
        strict(model, batch)
    torch._dynamo.reset()


def test_dropout_rng_depends_on_step_and_rank_only():
    assert step_seed(2022, 5, 0) == step_seed(2022, 5, 0)
    assert len({step_seed(2022, s, r) for s in range(50) for r in range(4)}) == 200
    assert all(0 <= step_seed(2022, s, 3) < 2**32 for s in (0, 10**9))


@pytest.mark.parametrize("precision, cuda, expected", [
    ("auto", False, "no"), ("auto", True, "bf16"), ("fp32", True, "no"), ("bf16", False, "bf16"),
    ("fp16", True, "fp16"),
])
def test_precision(precision, cuda, expected):
    assert resolve_precision(precision, cuda) == expected


def test_fp16_needs_cuda():
    with pytest.raises(ConfigError, match="fp16 but no CUDA"):
        resolve_precision("fp16", False)


def test_an_empty_training_set_is_refused(tmp_path):
    class Empty(LinearTask):
        def train_dataset(self):
            return []

    with pytest.raises(ConfigError, match="training dataset is empty"):
        train(Empty(), _config(tmp_path, "empty"), progress=False)


def test_a_task_missing_methods_is_refused(tmp_path):
    class NoLoss:
        paper = "x"

        def build_model(self):
            return torch.nn.Linear(1, 1)

    with pytest.raises(ConfigError, match="NoLoss is not a TrainTask: it lacks train_dataset, valid_dataset, collate"):
        train(NoLoss(), _config(tmp_path, "bad"), progress=False)


def test_a_model_without_trainable_parameters_is_refused(tmp_path):
    class Frozen(LinearTask):
        def build_model(self):
            model = super().build_model()
            model.requires_grad_(False)
            return model

    with pytest.raises(ConfigError, match="no trainable parameter"):
        train(Frozen(), _config(tmp_path, "frozen"), progress=False)


def test_keep_4bit_trainable_opts_every_4bit_layer_out_and_plain_models_need_no_bitsandbytes():
    import subprocess
    import sys

    import bitsandbytes as bnb

    from pipelines.training.engine import keep_4bit_trainable

    model = torch.nn.Sequential(bnb.nn.Linear4bit(8, 8), torch.nn.ReLU(), bnb.nn.Linear4bit(8, 2), torch.nn.Linear(2, 1))
    assert keep_4bit_trainable(model) == 2
    assert not model[0].support_avx512bf16_for_cpu and not model[2].support_avx512bf16_for_cpu
    # A model without 4-bit layers is left alone without importing bitsandbytes (seconds of every training stage).
    code = ("import sys, torch; from pipelines.training.engine import keep_4bit_trainable; "
            "print(keep_4bit_trainable(torch.nn.Linear(2, 2)), 'bitsandbytes' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "False"]
