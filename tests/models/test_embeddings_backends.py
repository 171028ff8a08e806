"""Issue #29: encoder backends (torch, ONNX Runtime, OpenVINO) and quantization, the cache keyed by them, one
length-sorted pass over the missing texts, the device setting (never a silent fall back from a GPU to the CPU)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import multiprocessing
import sys
import time

import numpy as np
import pytest
import torch

from pipelines.errors import ConfigError
from pipelines.memory import build_strategy
from pipelines.models import embeddings as E
from pipelines.memory.dense import DenseConfig

TEXTS = ["user: I adopted a greyhound named Biscuit last week.",
         "assistant: Greyhounds are gentle; give him a soft bed and short walks at first.",
         "What kind of dog does Ana have?",
         "Melanie: We went camping by the lake with the kids and roasted marshmallows until midnight, then "
         "told ghost stories until the youngest fell asleep in the tent.",
         "ok",
         "user: Can you suggest a budget for a five-day trip to Lisbon in May, flights from Boston included? I would "
         "like to stay somewhere central and eat out most nights, but I do not need luxury hotels." * 3]


class Recorder:
    """Encoder stand-in: (length, count of 'a', 1) L2-normalised; records each call's texts; can fail on call n."""

    def __init__(self, fail_on: int | None = None):
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    def encode(self, sentences, **kwargs):
        self.calls.append(list(sentences))
        if self.fail_on is not None and len(self.calls) == self.fail_on:
            raise KeyboardInterrupt("interrupted")
        v = np.asarray([[len(s), s.count("a"), 1.0] for s in sentences], dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


# --- the cache key ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend, quantization, precision, key", [
    ("torch", "none", "fp32", "m"),                      # unchanged: existing caches stay valid
    ("torch", "none", "bf16", "m@bf16"),
    ("torch", "none", "fp16", "m@fp16"),
    ("onnx", "none", "fp32", "m@onnx"),
    ("onnx", "int8_avx2", "fp32", "m@onnx-int8_avx2"),
    ("onnx", "int8_avx512_vnni", "fp32", "m@onnx-int8_avx512_vnni"),
    ("openvino", "none", "fp32", "m@openvino"),
    ("openvino", "none", "bf16", "m@openvino-bf16"),
    ("openvino", "int8", "fp32", "m@openvino-int8"),
    ("openvino", "int8_weights", "fp32", "m@openvino-int8_weights"),
])
def test_each_variant_has_its_own_cache_key(backend, quantization, precision, key):
    assert E.cache_key("m", backend, quantization, precision) == key


def test_vectors_of_two_variants_never_mix_in_one_cache(tmp_path):
    torch_fp32 = E.Embedder(Recorder(), "m", E.EmbeddingCache(tmp_path))
    onnx_int8 = E.Embedder(Recorder(), "m", E.EmbeddingCache(tmp_path), backend="onnx", quantization="int8_avx2")
    torch_fp32.embed(["ab", "b"])
    onnx_int8.embed(["ab", "b"])
    assert onnx_int8.stats.cache_hits == 0 and onnx_int8.encoder.calls == [["ab", "b"]]
    assert onnx_int8.model_name == "m@onnx-int8_avx2" and torch_fp32.model_name == "m"
    assert onnx_int8.precision == "fp32"                 # precision is the torch backend's; no autocast elsewhere
    assert len(torch_fp32.cache) == 4


# --- one length-sorted pass -------------------------------------------------------------------------------------

def test_missing_texts_are_encoded_longest_first_in_one_pass_and_returned_in_the_callers_order(tmp_path):
    enc = Recorder()
    emb = E.Embedder(enc, "m", E.EmbeddingCache(tmp_path), chunk_size=2)
    emb.embed(["bb"])                                   # cached before: not encoded again
    texts = ["a", "ccccc", "bb", "dddd", "a", "eee"]
    out = emb.embed(texts)
    assert enc.calls[1:] == [["ccccc", "dddd"], ["eee", "a"]]   # every missing text sorted once, across chunks
    expected = Recorder().encode(texts)
    np.testing.assert_allclose(out, expected, rtol=1e-6)       # rows in the caller's order
    assert (emb.stats.encode_calls, emb.stats.encoded_texts, emb.stats.cache_hits) == (3, 5, 1)


def test_an_interrupted_run_keeps_the_chunks_it_finished(tmp_path):
    texts = [f"text number {i} " + "x" * i for i in range(6)]
    broken = E.Embedder(Recorder(fail_on=2), "m", E.EmbeddingCache(tmp_path), chunk_size=2)
    with pytest.raises(KeyboardInterrupt):
        broken.embed(texts)
    resumed = E.Embedder(Recorder(), "m", E.EmbeddingCache(tmp_path), chunk_size=2)
    resumed.embed(texts)
    assert resumed.stats.cache_hits == 2 and resumed.stats.encoded_texts == 4   # the longest two were kept


def test_batch_size_none_is_the_devices_default():
    assert E.Embedder(Recorder(), batch_size=None).batch_size == E.DEFAULT_BATCH_SIZE["cpu"] == 32
    assert E.Embedder(Recorder(), batch_size=None, device="cuda", precision="fp32").batch_size == 256


# --- device, backend, quantization, precision -------------------------------------------------------------------

@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def one_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)


def test_auto_device_is_the_cpu_without_a_gpu_and_cuda_asked_for_is_an_error(no_gpu):
    assert E.resolve_device("auto") == "cpu" and E.resolve_device("cpu") == "cpu"
    for asked in ("cuda", "cuda:0"):
        with pytest.raises(ConfigError, match=rf"device '{asked}' was asked but no CUDA GPU is visible"):
            E.resolve_device(asked)
    with pytest.raises(ConfigError, match="device must be one of"):
        E.resolve_device("gpu")
    assert E.resolve_backend("auto", "cpu") == E.DEFAULT_CPU_BACKEND == "openvino"
    assert E.resolve_backend("auto", "cpu", precision="bf16") == "openvino"    # OpenVINO computes bf16 too
    assert E.resolve_backend("auto", "cpu", precision="fp16") == "torch"       # fp16 only torch does


def test_on_the_cpu_auto_is_openvino_in_bf16_where_the_cpu_computes_it_else_in_fp32(monkeypatch):
    import torch

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)     # AVX2 cores
    assert E.resolve_runtime_precision("auto", "openvino") == "fp32" and E.resolve_precision("auto", "cpu") == "fp32"
    with pytest.raises(ConfigError, match="this CPU does not compute bf16 natively"):
        E.resolve_runtime_precision("bf16", "openvino")
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)      # AVX512-BF16 or AMX
    assert E.resolve_runtime_precision("auto", "openvino") == E.resolve_runtime_precision("bf16", "openvino") == "bf16"
    assert E.resolve_runtime_precision("auto", "openvino", "int8") == "fp32"    # bf16 is for fp32 weights only
    assert E.resolve_runtime_precision("fp32", "openvino") == E.resolve_runtime_precision("auto", "onnx") == "fp32"
    assert E.resolve_precision("auto", "cpu") == "bf16"                         # torch's autocast, when asked
    assert E.cache_key("m", "torch", "none", "bf16") == "m@bf16"      # never mixed with fp32 vectors


def test_on_a_gpu_auto_is_torch_in_half_precision_with_larger_batches(one_gpu):
    assert E.resolve_device("auto") == "cuda" and E.resolve_device("cuda:0") == "cuda:0"
    with pytest.raises(ConfigError, match="only 1 CUDA GPU"):
        E.resolve_device("cuda:1")
    assert E.resolve_backend("auto", "cuda") == "torch"
    assert E.resolve_precision("auto", "cuda") == "fp16"                    # no bf16 on this GPU
    assert E.resolve_quantization("auto", "torch") == "none"
    with pytest.raises(ConfigError, match="runs on the CPU here"):
        E.check_backend("onnx", "int8", device="cuda")


def test_the_dense_strategy_refuses_a_missing_gpu_with_one_clear_error(no_gpu, tmp_path):
    with pytest.raises(ConfigError, match="device 'cuda' was asked but no CUDA GPU is visible"):
        build_strategy("dense", cache_dir=str(tmp_path), device="cuda")
    with pytest.raises(ConfigError, match="device 'cuda' was asked"):
        build_strategy("hybrid", cache_dir=str(tmp_path), device="cuda")


def test_onnx_int8_is_this_cpus_preset_and_auto_is_fp32():
    preset = E.cpu_int8_preset()
    assert preset in E.INT8_PRESETS
    assert E.resolve_quantization("int8", "onnx") == f"int8_{preset}"
    assert E.resolve_quantization("int8_avx512_vnni", "onnx") == "int8_avx512_vnni"   # named explicitly
    # int8 moved a LongMemEval query out of hybrid's top 5 (the 0.005 band of issue #29): fp32 by default
    assert E.resolve_quantization("auto", "onnx") == E.resolve_quantization("auto", "openvino") == "none"


def test_an_embedder_reads_the_backend_off_its_encoder():
    class Runtime(Recorder):
        backend, quantization = "onnx", "int8_avx2"

    assert E.Embedder(Runtime(), "m").model_name == "m@onnx-int8_avx2"
    assert E.Embedder(Recorder(), "m").model_name == "m"                      # a plain encoder: torch fp32

    class OpenVINOBf16(Recorder):
        backend, quantization, precision = "openvino", "none", "bf16"

    embedder = E.Embedder(OpenVINOBf16(), "m", precision="auto")
    assert embedder.model_name == "m@openvino-bf16" and embedder.precision == "bf16"   # the encoder's arithmetic
    assert isinstance(embedder._autocast(), contextlib.nullcontext)                    # no torch autocast around it


@pytest.mark.parametrize("settings, match", [
    ({"backend": "tensorrt"}, "dense.backend must be one of"),
    ({"quantization": "int4"}, "dense.quantization must be one of"),
    ({"backend": "openvino", "quantization": "int8_avx2"}, "does not apply to the openvino backend"),
    ({"backend": "onnx", "quantization": "int8_weights"}, "does not apply to the onnx backend"),
    ({"backend": "torch", "quantization": "int8"}, "needs backend onnx or openvino"),
    ({"backend": "onnx", "precision": "bf16"}, "precision 'bf16' applies to the torch and openvino backends"),
    ({"backend": "openvino", "precision": "fp16"}, "does not apply to the openvino backend: it computes in fp32"),
    ({"backend": "openvino", "quantization": "int8", "precision": "bf16"}, "applies to the openvino backend's fp32"),
    ({"backend": "onnx", "device": "cuda"}, "runs on the CPU here"),
    ({"device": "gpu"}, "dense.device must be one of"),
    ({"batch_size": 0}, "positive integer or null"),
])
def test_backend_settings_are_checked(settings, match):
    with pytest.raises(ConfigError, match=match):
        DenseConfig(**settings)


def test_the_rankers_forward_the_encoder_settings():
    from pipelines.memory.hybrid import HybridConfig

    dense = HybridConfig(backend="openvino", quantization="int8_weights", export_dir="/x", device="cpu",
                         batch_size=8).dense_config
    assert (dense.backend, dense.quantization, dense.export_dir, dense.device, dense.batch_size) == \
        ("openvino", "int8_weights", "/x", "cpu", 8)


# --- a missing package: one clear error -------------------------------------------------------------------------

def test_a_missing_onnxruntime_is_one_error_naming_it_and_the_command(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)        # import onnxruntime -> ImportError
    with pytest.raises(ConfigError) as err:
        E.load_encoder(backend="onnx", quantization="int8", export_dir=str(tmp_path))
    message = str(err.value)
    assert "onnxruntime==1.32.0" in message and "pip install" in message and "backend: torch" in message
    assert not any(tmp_path.iterdir())                           # nothing exported


def test_a_missing_openvino_or_nncf_names_the_package_and_the_command(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "openvino", None)
    with pytest.raises(ConfigError, match=r"needs openvino==2026\.4\.1, not installed here: pip install -e \."):
        E.load_encoder(backend="openvino", export_dir=str(tmp_path))
    monkeypatch.setitem(sys.modules, "nncf", None)
    with pytest.raises(ConfigError, match=r"quantization int8 needs openvino==2026\.4\.1, nncf==3\.4\.0.*"
                                          r"pip install -e '\.\[openvino-int8\]'"):
        E.load_encoder(backend="openvino", quantization="int8", export_dir=str(tmp_path))


# --- exports: made once, atomically, shared by concurrent processes ---------------------------------------------

def _make_slowly(out, log):
    with open(log, "a") as f:
        f.write("made\n")
    (out / "graph.onnx").write_text("half")
    time.sleep(0.5)                                 # a reader must not see the folder until META_FILE is written
    (out / E.META_FILE).write_text("{}")


def _export_in_a_process(root, log):
    E.cached_export("model-onnx-int8", lambda out: _make_slowly(out, log), root)


def test_concurrent_processes_export_once_and_never_leave_a_half_folder(tmp_path):
    log = tmp_path / "made.log"
    root = tmp_path / "encoders"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_export_in_a_process, args=(str(root), str(log))) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert log.read_text() == "made\n"                                   # one export, the others waited
    assert sorted(p.name for p in root.iterdir() if not p.name.endswith(".lock")) == ["model-onnx-int8"]
    assert (root / "model-onnx-int8" / E.META_FILE).exists()


def test_a_failed_export_leaves_nothing(tmp_path):
    def broken(out):
        (out / "partial.onnx").write_text("x")
        raise RuntimeError("export failed")

    with pytest.raises(RuntimeError, match="export failed"):
        E.cached_export("m-onnx-none", broken, tmp_path)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def _fake_export(root, name, source, sha, backend="onnx", quantization="none"):
    def make(out):
        (out / "model.onnx").write_text(sha)
        (out / E.META_FILE).write_text(json.dumps({"backend": backend, "quantization": quantization,
                                                   "source": source, "source_sha256": sha}))
    return E.cached_export(name, make, root)


def test_an_export_of_retrained_weights_replaces_the_older_one_of_the_same_folder_and_variant(tmp_path):
    """models/reranker retrained: its export under the new digest supersedes the old one (never read again: the
    folder no longer holds those weights); other folders, other variants and the one being made stay."""
    root = tmp_path / "encoders"
    first = _fake_export(root, "reranker-onnx-none-aaa", "/p/models/reranker", "aaa")
    int8 = _fake_export(root, "reranker-onnx-int8-aaa", "/p/models/reranker", "aaa", quantization="int8_avx2")
    openvino = _fake_export(root, "reranker-openvino-none-aaa", "/p/models/reranker", "aaa", backend="openvino")
    other = _fake_export(root, "fold-0-onnx-none-ccc", "/p/models/reranker/folds/0", "ccc")
    foreign = root / "made-by-hand"
    foreign.mkdir()                                                # no encoder.json: not an export, left alone
    busy = _fake_export(root, "reranker-onnx-none-ddd", "/p/models/reranker", "ddd")
    assert not first.exists()                                      # ddd superseded aaa
    with open(root / f".{busy.name}.lock", "w") as lock:           # another process holds ddd's lock
        fcntl.flock(lock, fcntl.LOCK_EX)
        second = _fake_export(root, "reranker-onnx-none-bbb", "/p/models/reranker", "bbb")
        assert busy.exists()                                       # left for the next prune
    assert E.prune_superseded(second) == [busy] and not busy.exists()
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == sorted(
        [second.name, int8.name, openvino.name, other.name, foreign.name])
    assert E.cached_export(second.name, lambda out: pytest.fail("made twice"), root) == second
    # The reranker stage scores its model in its staging folder: that export belongs to the folder it is published to.
    staged = _fake_export(root, "reranker-onnx-none-eee", "/p/.mnemos/staging/reranker/new/models/reranker", "eee")
    assert not second.exists() and staged.exists() and other.exists()
    # The folder back at weights exported before (a deterministic retrain, `dvc checkout`): the export found is
    # used, and the one it supersedes goes, as after a new export.
    older = _fake_export(root, "reranker-onnx-none-fff", "/p/models/reranker", "fff")
    assert not staged.exists()
    E._PRUNED.discard(staged)
    (root / staged.name).mkdir()
    (root / staged.name / E.META_FILE).write_text(json.dumps({"backend": "onnx", "quantization": "none",
                                                              "source": "/p/models/reranker", "source_sha256": "eee"}))
    assert E.cached_export(staged.name, lambda out: pytest.fail("made twice"), root) == staged
    assert not older.exists()


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """The shipped MiniLM exported to ONNX (fp32 and int8) on this machine, in a fresh folder."""
    root = tmp_path_factory.mktemp("encoders")
    return root, {q: E.export_encoder(E.default_model_path(), "onnx", E.resolve_quantization(q, "onnx"), root)
                  for q in ("none", "int8")}


@pytest.mark.slow   # the session's two exports: about 30 s on 2 idle cores
def test_the_onnx_exports_agree_with_torch_and_are_reused(exported, monkeypatch):
    root, folders = exported
    reference = E.load_encoder(backend="torch").encode(TEXTS, normalize_embeddings=True,
                                                       convert_to_numpy=True)                           # (N, D)
    fp32 = E.RuntimeEncoder(folders["none"]).encode(TEXTS, batch_size=2)        # several padded batches
    int8 = E.RuntimeEncoder(folders["int8"]).encode(TEXTS, batch_size=4)
    assert np.abs(fp32 - reference).max() < 1e-4                               # the same function, traced
    cos = (int8 * reference).sum(1)
    assert cos.min() > 0.97 and cos.mean() > 0.985                             # int8 arithmetic, same model
    assert E.RuntimeEncoder(folders["int8"]).meta["quantization"] == f"int8_{E.cpu_int8_preset()}"
    assert not list(E.default_model_path().glob("*.onnx"))                      # nothing written in the package
    monkeypatch.setattr(E, "_export", lambda *a: pytest.fail("exported again"))
    assert E.export_encoder(E.default_model_path(), "onnx", "none", root) == folders["none"]


@pytest.mark.slow
def test_the_dense_strategy_on_the_onnx_backend_ranks_the_paraphrase_first(exported, episode, fill, q):
    root, _ = exported
    strategy = build_strategy("dense", cache_dir=None, backend="onnx", quantization="int8", export_dir=str(root),
                              device="cpu")
    assert isinstance(strategy.embedder.encoder, E.RuntimeEncoder)
    fill(strategy, episode)
    assert strategy.retrieve(q("What kind of dog does Ana have?"), 1)[0].turn_id == "e1:S1:T1"
    assert strategy.retrieve(q("What is Ana's profession?"), 1)[0].turn_id == "e1:S2:T1"


@pytest.mark.slow
@pytest.mark.parametrize("quantization, precision, floor", [("none", "fp32", 0.9999), ("int8_weights", "fp32", 0.998),
                                                          ("none", "bf16", 0.999)])
def test_the_openvino_exports_agree_with_torch(tmp_path, quantization, precision, floor):
    # openvino is a dependency and nncf (int8_weights) the openvino-int8 extra, both installed by `make setup`.
    # bf16 is compiled as asked whatever this CPU computes (a CPU without bf16 runs it in fp32).
    folder = E.load_encoder(backend="openvino", quantization=quantization, precision="fp32",
                            export_dir=str(tmp_path)).folder
    encoder = E.RuntimeEncoder(folder, precision)
    assert encoder.precision == precision
    reference = E.load_encoder(backend="torch").encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    assert (encoder.encode(TEXTS, batch_size=3) * reference).sum(1).min() > floor
