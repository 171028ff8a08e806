"""Issue #29, point 5: the cross-encoder's scoring: length-sorted batches of least padded work, the ONNX Runtime
export the ``rerank`` strategy runs on the CPU, its backend and device settings."""

from __future__ import annotations

import shutil
import sys

import numpy as np
import pytest
import torch

from pipelines.errors import ConfigError
from pipelines.memory import build_strategy
from pipelines.memory.rerank import RerankConfig
from pipelines.rerank import cross_encoder as X
from tests.rerank._tiny_reranker import save_tiny_cross_encoder

QUESTION = "Where is Leo moving?"
TEXTS = ["Mia: Hi Leo, I adopted a puppy last week.", "Leo: Congratulations! I am moving to Lisbon in May.",
         "Mia: Lisbon sounds lovely, I will miss you.", "Ana: How is the new puppy doing?",
         "Mia: Biscuit is great, and my brother is moving to Lisbon soon, right after he finishes his exams "
         "at the conservatory and sells the old piano.", "Leo: ok", "Ana: Yes."]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny_cross_encoder(tmp_path_factory.mktemp("reranker"))


@pytest.mark.parametrize("lengths, batch_size, overhead, batches", [
    ([10, 10, 10, 10], 64, 0, [(0, 4)]),                   # equal lengths: one batch, no padding
    ([100, 10, 10, 10], 64, 0, [(0, 1), (1, 4)]),          # the long one alone saves 270 padded tokens
    ([100, 10, 10, 10], 64, 500, [(0, 4)]),                # ... unless a pass costs more than that
    ([12, 11, 10, 9, 8], 2, 5, [(0, 2), (2, 4), (4, 5)]),  # at most batch_size (ties: any cut of least cost)
    ([], 8, 0, []),
])
def test_length_batches_minimise_the_padded_work(lengths, batch_size, overhead, batches):
    got = X.length_batches(lengths, batch_size, overhead)
    assert got == batches or sum((j - i) * lengths[i] + overhead for i, j in got) == \
        sum((j - i) * lengths[i] + overhead for i, j in batches)
    assert all(j - i <= batch_size for i, j in got)
    assert [k for i, j in got for k in range(i, j)] == list(range(len(lengths)))   # a cover, in order


def test_sorted_batches_score_as_one_padded_batch_in_the_callers_order(tiny):
    model = X.CrossEncoder.load(tiny).eval()
    with torch.no_grad():                                     # the scoring before issue #29
        padded = model(**model.tokenize([QUESTION] * len(TEXTS), TEXTS)).numpy()
    assert np.abs(model.score(QUESTION, TEXTS, batch_size=2) - padded).max() < 1e-5
    order = [3, 0, 6, 2, 5, 1, 4]
    assert np.abs(model.score(QUESTION, [TEXTS[i] for i in order]) - padded[order]).max() < 1e-5
    assert model.score(QUESTION, []).shape == (0,)


def test_the_onnx_export_scores_as_the_torch_model(tiny, tmp_path):
    model = X.CrossEncoder.load(tiny).eval()
    reference = model.score(QUESTION, TEXTS)
    fp32 = X.RuntimeCrossEncoder(X.export_cross_encoder(tiny, "none", tmp_path))
    int8 = X.RuntimeCrossEncoder(X.export_cross_encoder(tiny, "int8", tmp_path))
    assert np.abs(fp32.score(QUESTION, TEXTS, batch_size=3) - reference).max() < 1e-4
    spread = reference.max() - reference.min()
    assert np.abs(int8.score(QUESTION, TEXTS) - reference).max() < 0.1 * spread      # int8 arithmetic
    assert int8.meta["check"]["pairs"] > 0 and not list(tiny.rglob("*.onnx"))      # nothing in the model's folder
    again = X.export_cross_encoder(tiny, "int8", tmp_path)
    assert again == int8.folder                                                     # made once, reused


@pytest.fixture
def cpu_bf16(monkeypatch):
    """Whether this CPU computes bf16 natively, as the test sets it (torch's oneDNN check)."""
    def native(value: bool) -> None:
        monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: value)
    return native


def test_load_scorer_picks_onnx_on_the_cpu_and_torch_on_request(tiny, tmp_path, monkeypatch, cpu_bf16):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu_bf16(False)
    default = X.load_scorer(tiny, export_dir=tmp_path)
    assert isinstance(default, X.RuntimeCrossEncoder) and (default.backend, default.precision) == ("onnx", "fp32")
    torch_model = X.load_scorer(tiny, backend="torch", export_dir=tmp_path)
    assert isinstance(torch_model, X.CrossEncoder) and torch_model.inference_precision == "fp32"
    emulated = X.load_scorer(tiny, precision="bf16", export_dir=tmp_path)      # bf16 asked of such a CPU: torch's
    assert isinstance(emulated, X.CrossEncoder) and emulated.inference_precision == "bf16"
    openvino = X.load_scorer(tiny, backend="openvino", export_dir=tmp_path)
    assert (openvino.backend, openvino.precision) == ("openvino", "fp32")
    assert np.abs(openvino.score(QUESTION, TEXTS) - default.score(QUESTION, TEXTS)).max() < 1e-4
    with pytest.raises(ConfigError, match="this CPU does not compute bf16 natively"):
        X.load_scorer(tiny, backend="openvino", precision="bf16", export_dir=tmp_path)
    with pytest.raises(ConfigError, match="device 'cuda' was asked but no CUDA GPU is visible"):
        X.load_scorer(tiny, device="cuda", export_dir=tmp_path)


def test_on_a_cpu_with_native_bf16_the_scorer_is_openvino_in_bf16_unless_fp32_or_int8_is_asked(tiny, tmp_path,
                                                                                              monkeypatch, cpu_bf16):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu_bf16(True)
    model = X.load_scorer(tiny, export_dir=tmp_path)           # compiled for bf16 (fp32 where the CPU lacks it)
    assert isinstance(model, X.RuntimeCrossEncoder) and (model.backend, model.precision) == ("openvino", "bf16")
    exact = X.load_scorer(tiny, export_dir=tmp_path, precision="fp32")
    assert (exact.backend, exact.precision) == ("onnx", "fp32")        # fp32 asked: the ONNX Runtime export
    int8 = X.load_scorer(tiny, quantization="int8", export_dir=tmp_path)
    assert int8.backend == "onnx" and int8.meta["quantization"].startswith("int8_")    # int8: ONNX Runtime's
    autocast = X.load_scorer(tiny, backend="torch", export_dir=tmp_path, precision="bf16")
    assert isinstance(autocast, X.CrossEncoder) and autocast.inference_precision == "bf16"
    reference = exact.score(QUESTION, TEXTS)
    for bf16 in (model, autocast):
        assert np.abs(bf16.score(QUESTION, TEXTS) - reference).max() < 0.05 * (reference.max() - reference.min())


def test_a_scorer_is_loaded_once_per_process_and_again_when_its_weights_change(tiny, tmp_path, monkeypatch):
    """A strategy is built anew for each episode (a LongMemEval question): its scorer must not be loaded, hashed or
    compiled again each time."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for backend in ("onnx", "torch"):
        first = X.load_scorer(tiny, backend=backend, export_dir=tmp_path)
        assert X.load_scorer(tiny, backend=backend, export_dir=tmp_path) is first
    saved = tmp_path / "saved"
    shutil.copytree(tiny, saved)
    torch_model = X.load_scorer(saved, backend="torch", export_dir=tmp_path)
    assert X.load_scorer(saved, backend="torch", export_dir=tmp_path) is torch_model
    retrained = X.CrossEncoder.load(saved)
    with torch.no_grad():
        retrained.head.bias += 1.0
    retrained.save(saved)                                                    # the reranker stage ran again
    again = X.load_scorer(saved, backend="torch", export_dir=tmp_path)
    assert again is not torch_model and float(again.head.bias) == pytest.approx(float(torch_model.head.bias) + 1)


@pytest.mark.parametrize("settings, match", [
    ({"rerank_backend": "tensorrt"}, "rerank.rerank_backend must be one of"),
    ({"rerank_quantization": "int4"}, "rerank.rerank_quantization must be one of"),
    ({"rerank_backend": "torch", "rerank_quantization": "int8"}, "needs rerank_backend onnx"),
    ({"rerank_backend": "onnx", "device": "cuda"}, "runs on the CPU here"),
    ({"rerank_backend": "openvino", "device": "cuda"}, "runs on the CPU here"),
    ({"rerank_backend": "openvino", "rerank_quantization": "int8"}, "needs rerank_backend onnx"),
    ({"rerank_backend": "onnx", "precision": "bf16"}, "does not apply to rerank_backend onnx"),
    ({"rerank_backend": "openvino", "precision": "fp16"}, "does not apply to rerank_backend openvino"),
])
def test_rerank_backend_settings_are_checked(settings, match):
    with pytest.raises(ConfigError, match=match):
        RerankConfig(reranker_path="models/reranker", **settings)


def test_a_missing_onnxruntime_is_one_clear_error_for_the_reranker(tiny, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ConfigError, match=r"onnxruntime==1\.32\.0.*pip install"):
        X.export_cross_encoder(tiny, "int8", tmp_path)


def test_the_strategy_scores_through_the_onnx_export_on_the_cpu(tiny, tmp_path, monkeypatch, cpu_bf16):
    from tests.emma.conftest import mia_episode
    from tests.memory.test_rerank import QUESTION as ASKED, _observed, _saved

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu_bf16(False)                                                   # a CPU without native bf16
    path = _saved(tmp_path, tiny)
    strategy = build_strategy("rerank", reranker_path=str(path), depth=3, export_dir=str(tmp_path / "encoders"),
                              cache_dir=str(tmp_path / "cache"), backend="torch")   # the dense ranker in torch
    _observed(strategy, mia_episode())
    assert len(strategy.retrieve(ASKED, 5)) == 5
    assert isinstance(strategy._loaded[path], X.RuntimeCrossEncoder) and len(strategy._memo) == 3
