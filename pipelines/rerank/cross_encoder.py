"""A cross-encoder re-ranker trained on question -> evidence pairs (issue #18), from the shipped MiniLM weights.

Re-ranking (Nogueira & Cho, "Passage Re-ranking with BERT", 2019): a first-stage retriever proposes the top-N
candidates and a cross-encoder reads the question and each candidate together, one transformer pass over

    [CLS] question [SEP] candidate [SEP]   ->   s(q, d) = w^T h(q, d) + b        (a scalar logit)

so that every question token attends to every candidate token, which a dual encoder (one vector each) cannot.

Training (Gao, Dai & Callan, "Rethink Training of BERT Rerankers in Multi-Stage Retrieval Pipeline", ECIR 2021:
Localized Contrastive Estimation, LCE): each question q with an evidence turn d+ forms a group with G-1 hard
negatives d-_1..d-_{G-1} drawn from the first stage's top candidates (here BM25's top ``negative_depth``
non-evidence turns of the same conversation's earlier sessions: what the re-ranker must tell apart at test time),
and the loss is the softmax cross-entropy of the positive within its group,

    L = -log( exp s(q, d+) / (exp s(q, d+) + sum_j exp s(q, d-_j)) )

The pairs are those of EMMA's retriever (:func:`pipelines.emma.retriever.question_examples`, each turn rendered
``"speaker: text"`` as the turn strategies index it), so the re-ranker learns from the same data as the trained
dual encoder, and the reranker stage trains it over the same folds (:mod:`pipelines.training.folds`).

Initialisation: ``model`` (None: the shipped all-MiniLM-L6-v2, the only pretrained encoder here). MiniLM was trained
to be read through the mean of its last layer, so the default head (``head: mean``) is a new linear layer on that
mean, s(q, d) = w^T mean_t h_t(q, d) + b; ``head: classifier`` keeps a checkpoint's own sequence-classification
head (the paper profile may name a trained cross-encoder, e.g. an MS MARCO MiniLM one, or a local folder).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pipelines.data.sampling import seeded_sample
from pipelines.emma.retriever import RetrievalExample, examples_of
from pipelines.errors import ConfigError
from pipelines.lexical import bm25_tokens
from pipelines.training.config import Tokens

from pipelines.rerank.cross_encoder_config import CONFIG_FILE, HEAD_FILE, CrossEncoderConfig


class CrossEncoder(nn.Module):
    """s(q, d) over ``[CLS] q [SEP] d [SEP]``: a linear head on the encoder's mean-pooled last layer (``head: mean``)
    or the checkpoint's sequence-classification head (``head: classifier``)."""

    def __init__(self, encoder: nn.Module, tokenizer, config: CrossEncoderConfig, head: nn.Module | None = None):
        super().__init__()
        self.encoder, self.tokenizer, self.config = encoder, tokenizer, config
        self.inference_precision = "fp32"     # score(): fp32, or bf16 / fp16 autocast (load_scorer on a GPU)
        if config.head == "mean":
            self.head = head if head is not None else nn.Linear(encoder.config.hidden_size, 1)
        limit = getattr(encoder.config, "max_position_embeddings", None)
        if limit is not None and config.max_length > limit:
            raise ConfigError(f"rerank.model.max_length = {config.max_length} exceeds the encoder's {limit} "
                              f"position embeddings.")

    @staticmethod
    def _auto(head: str):
        from transformers import AutoModel, AutoModelForSequenceClassification

        return AutoModel if head == "mean" else AutoModelForSequenceClassification

    @classmethod
    def from_pretrained(cls, config: CrossEncoderConfig | None = None) -> "CrossEncoder":
        """The encoder of ``config.model`` (a local path or a cached name; never downloaded here) with a new linear
        head (``mean``; seeded), or with its classification head (``classifier``: one label, new when it has none)."""
        from transformers.utils import logging as hf_logging

        from pipelines.models._hf import hub_offline
        from pipelines.models.tokenizers import load_tokenizer

        config = config or CrossEncoderConfig()
        path = config.resolved_model()
        extra = {"num_labels": 1} if config.head == "classifier" else {}
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()     # "some weights newly initialised": a new head, by design
        try:
            encoder = cls._auto(config.head).from_pretrained(
                path, local_files_only=hub_offline() and not Path(path).is_dir(), dtype=torch.float32, **extra)
        except OSError as err:
            raise ConfigError(f"cannot load re-ranker checkpoint {path!r}: it is neither a local directory nor a "
                              f"cached model (no download is attempted offline). Cause: {err}") from err
        finally:
            hf_logging.set_verbosity(verbosity)
        torch.manual_seed(config.seed)
        return cls(encoder, load_tokenizer(path), config)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def tokenize(self, questions: Sequence[str], texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Pairs (question_i, text_i), padded to the longest, cut to ``max_length`` (N, L)."""
        self.tokenizer.truncation_side = "right"
        return self.tokenizer(list(questions), list(texts), padding=True, truncation="longest_first",
                              max_length=self.config.max_length, return_tensors="pt")

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(N, L) pairs -> (N,) logits s(q, d)."""
        extra = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **extra)
        if self.config.head == "classifier":
            return out.logits.squeeze(-1)
        m = attention_mask.unsqueeze(-1).to(out.last_hidden_state.dtype)             # (N, L, 1)
        pooled = (out.last_hidden_state * m).sum(1) / m.sum(1).clamp(min=1.0)        # (N, H)
        return self.head(pooled).squeeze(-1)                                          # (N,)

    def score(self, question: str, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """s(question, text) for every text: (N,) float32, in the order of ``texts``. The pairs are tokenized once,
        sorted by length and cut into the batches of least padded work (:func:`length_batches`); with
        ``inference_precision`` bf16 / fp16 (:func:`load_scorer` on a GPU) the forward passes run under autocast."""
        import contextlib

        was_training = self.training
        self.eval()
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.inference_precision)
        cast = torch.autocast(self.device.type, dtype=dtype) if dtype else contextlib.nullcontext()

        def forward(batch: dict[str, np.ndarray]) -> np.ndarray:
            with torch.inference_mode(), cast:
                return self(**{k: torch.from_numpy(v).to(self.device) for k, v in batch.items()}).float().cpu().numpy()

        try:
            self.tokenizer.truncation_side = "right"
            return score_pairs(self.tokenizer, self.config.max_length, forward, question, texts, batch_size,
                               TORCH_BATCH_OVERHEAD)
        finally:
            self.train(was_training)

    def save(self, out_dir: str | os.PathLike) -> Path:
        """``model/`` (HF format, with the tokenizer), ``head.safetensors`` (head: mean) and ``reranker.json``."""
        from safetensors.torch import save_file

        out = Path(out_dir)
        self.encoder.save_pretrained(out / "model")
        self.tokenizer.save_pretrained(out / "model")
        if self.config.head == "mean":
            save_file({k: v.contiguous() for k, v in self.head.state_dict().items()}, str(out / HEAD_FILE))
        saved = asdict(self.config) | {"model": str(out / "model")}
        (out / CONFIG_FILE).write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")
        return out

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "CrossEncoder":
        from safetensors.torch import load_file
        from transformers import AutoTokenizer

        d = Path(directory)
        if not (d / CONFIG_FILE).exists():
            raise ConfigError(f"{d} is not a saved re-ranker (no {CONFIG_FILE}): run the reranker stage.")
        config = CrossEncoderConfig(**{**json.loads((d / CONFIG_FILE).read_text(encoding="utf-8")),
                                       "model": str(d / "model")})
        encoder = cls._auto(config.head).from_pretrained(d / "model", dtype=torch.float32)
        head = None
        if config.head == "mean":
            head = nn.Linear(encoder.config.hidden_size, 1)
            head.load_state_dict(load_file(str(d / HEAD_FILE)))
        return cls(encoder, AutoTokenizer.from_pretrained(d / "model"), config, head)


# --- inference: length-sorted batches, the ONNX Runtime export ------------------------------------------------------

# The fixed cost of one forward pass in padded tokens' worth, which :func:`length_batches` weighs against padding.
# An ONNX Runtime forward of MiniLM-L6 costs about what 16 more tokens do (fitted on 2 CPU cores); a torch one far
# more (Python module calls, thread-pool wake-ups on the CPU, kernel launches on a GPU): torch cuts a batch only
# where a few hundred tokens of padding are saved.
TORCH_BATCH_OVERHEAD, RUNTIME_BATCH_OVERHEAD = 512, 16
RERANK_BACKENDS = ("auto", "torch", "onnx", "openvino")
RERANK_QUANTIZATIONS = ("auto", "none", "int8")


def length_batches(lengths: Sequence[int], batch_size: int, overhead: float = 0.0) -> list[tuple[int, int]]:
    """Cut sequences sorted longest first (``lengths``) into consecutive batches ``[i, j)`` of at most
    ``batch_size`` that minimise the padded work  sum_b (|b| * max_{s in b} len(s) + overhead)  (dynamic
    programming over the cut points; ``overhead`` is a forward pass's fixed cost in tokens)."""
    n = len(lengths)
    cost, cut = [0.0] + [float("inf")] * n, [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(max(0, j - batch_size), j):
            c = cost[i] + (j - i) * lengths[i] + overhead        # longest first: lengths[i] is the batch's longest
            if c < cost[j]:
                cost[j], cut[j] = c, i
    out, j = [], n
    while j > 0:
        out.append((cut[j], j))
        j = cut[j]
    return out[::-1]


def score_pairs(tokenizer, max_length: int, forward, question: str, texts: Sequence[str], batch_size: int,
                overhead: float) -> np.ndarray:
    """``forward`` (padded int64 arrays (B, L) by input name -> (B,) scores) over the pairs (question, text), each
    tokenized once, longest first, in :func:`length_batches`; (N,) float32 in the order of ``texts``."""
    out = np.zeros(len(texts), dtype=np.float32)
    if not len(texts):
        return out
    enc = tokenizer([question] * len(texts), list(texts), truncation="longest_first", max_length=max_length)
    ids = enc["input_ids"]
    order = sorted(range(len(texts)), key=lambda i: -len(ids[i]))
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in enc]
    for a, b in length_batches([len(ids[i]) for i in order], batch_size, overhead):
        rows = order[a:b]
        width = len(ids[rows[0]])
        batch = {}
        for name in names:                                    # right padding, as the tokenizer pads
            fill = tokenizer.pad_token_id if name == "input_ids" else 0
            arr = np.full((len(rows), width), fill, dtype=np.int64)                         # (B, L)
            for r, i in enumerate(rows):
                arr[r, :len(enc[name][i])] = enc[name][i]
            batch[name] = arr
        out[rows] = forward(batch)                                                          # (B,)
    return out


def saved_digest(directory: Path) -> str:
    """sha256 of a saved re-ranker as a model: its weights and settings, not where it was first saved nor what it
    trained on (:func:`pipelines.models.embeddings.source_digest`, computed once per process for unchanged files).
    It names the re-ranker's exports and keys the torch scorer :func:`load_scorer` keeps."""
    from pipelines.models.embeddings import source_digest

    if not (directory / CONFIG_FILE).exists():
        raise ConfigError(f"{directory} is not a saved re-ranker (no {CONFIG_FILE}): run the reranker stage.")
    settings = {k: v for k, v in json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8")).items()
                if k != "model"}
    weights = [f for f in (*(directory / "model").rglob("*"), directory / HEAD_FILE) if f.is_file()]
    described = source_digest(directory, weights) + json.dumps(settings, sort_keys=True)
    return hashlib.sha256(described.encode()).hexdigest()


def export_cross_encoder(directory: str | os.PathLike, quantization: str = "int8",
                         export_dir: str | os.PathLike | None = None) -> Path:
    """The saved re-ranker in ``directory`` exported to ONNX (encoder + head in one graph, fused by ONNX Runtime's
    transformer optimizer; ``int8``: dynamically quantized in this CPU's preset), made once in ``export_dir``
    (:func:`pipelines.models.embeddings.cached_export`, never in the model's folder)."""
    from pipelines.models import embeddings as E

    d = Path(directory)
    digest = saved_digest(d)            # a ConfigError when d holds no saved re-ranker
    E.require("onnx")
    concrete = E.resolve_quantization(quantization, "onnx")

    def make(out: Path) -> None:
        model = CrossEncoder.load(d).eval()
        model.encoder.set_attn_implementation("eager")   # the plain attention pattern the optimizer fuses
        features = model.tokenize(["a question", "a question"], ["a candidate longer than the other one", "short"])
        names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in features]
        graph = E.trace_to_onnx(model, features, names, "scores", out / "model_fp32.onnx")
        graph = E.fuse_onnx(graph, model.encoder.config, out / "model_fused.onnx")
        if concrete != "none":
            graph = E.quantize_onnx(graph, concrete.removeprefix("int8_"), out / f"model_{concrete}.onnx")
        for stale in out.glob("*.onnx*"):
            if stale.name != graph.name:
                stale.unlink()
        model.tokenizer.save_pretrained(out)
        meta = {"backend": "onnx", "quantization": concrete, "file": graph.name, "inputs": names,
                "max_length": model.config.max_length, "source": str(d.resolve()), "source_sha256": digest}
        (out / E.META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        question, texts = "What did Ana adopt?", [t.partition(": ")[2] or t for t in E.CALIBRATION_TEXTS[:16]]
        model.encoder.set_attn_implementation("sdpa")
        diff = np.abs(RuntimeCrossEncoder(out).score(question, texts) - model.score(question, texts)).max()
        meta["check"] = {"pairs": len(texts), "max_abs_diff": float(diff)}
        (out / E.META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    return E.cached_export(f"reranker-{d.resolve().name}-onnx-{concrete}-{digest[:12]}", make, export_dir)


class RuntimeCrossEncoder:
    """s(q, d) over the ONNX export of a saved :class:`CrossEncoder` (:func:`export_cross_encoder`), run by ONNX
    Runtime (``backend`` onnx) or compiled by OpenVINO (``backend`` openvino, which reads the same ONNX file; its
    ``precision`` fp32, or bf16 on a CPU that computes bf16)."""

    def __init__(self, folder: str | os.PathLike, backend: str = "onnx", precision: str = "fp32"):
        from transformers import AutoTokenizer

        from pipelines.models.embeddings import META_FILE, openvino_config, require

        self.folder = Path(folder)
        self.meta = json.loads((self.folder / META_FILE).read_text(encoding="utf-8"))
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        self.tokenizer.truncation_side = "right"
        self.backend, self.precision = backend, precision if backend == "openvino" else "fp32"
        graph = str(self.folder / self.meta["file"])
        if backend == "openvino":
            core = require("openvino")["openvino"].Core()
            compiled = core.compile_model(graph, "CPU", {"PERFORMANCE_HINT": "LATENCY",
                                                         **openvino_config(self.precision)})
            self._forward = lambda batch: compiled(batch)[0]                                  # (B,)
        else:
            ort = require("onnx")["onnxruntime"]
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
            self._forward = lambda batch: session.run(None, batch)[0]                         # (B,)

    def score(self, question: str, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """s(question, text) for every text: (N,) float32, in the order of ``texts``."""
        return score_pairs(self.tokenizer, int(self.meta["max_length"]), self._forward, question, texts, batch_size,
                           RUNTIME_BATCH_OVERHEAD)


@lru_cache(maxsize=8)
def _runtime_scorer(folder: str, backend: str, precision: str) -> RuntimeCrossEncoder:
    """One :class:`RuntimeCrossEncoder` per export, backend and precision in a process: a strategy is built anew for
    every episode (a LongMemEval question is one), and compiling the graph again each time (OpenVINO: about 0.25 s
    on 2 cores) cost more than scoring the question's 30 pairs. Scoring keeps no state, so sharing it is safe."""
    return RuntimeCrossEncoder(folder, backend, precision)


def load_scorer(directory: str | os.PathLike, backend: str = "auto", quantization: str = "auto",
                device: str = "auto", export_dir: str | os.PathLike | None = None, precision: str = "auto"):
    """The saved re-ranker of ``directory`` ready to score: ``openvino`` (the default on a CPU that computes bf16
    natively, in bf16) or ``onnx`` (the default on other CPUs; ``quantization`` none = fp32 by default, or int8) a
    :class:`RuntimeCrossEncoder`, ``torch`` (the default on a GPU) the :class:`CrossEncoder` on ``device``, scoring
    in ``precision`` (auto: fp32 on a GPU. Measured on an H200 with benchmarks/embedding_backends.py --device cuda,
    30 LoCoMo-like pairs a query: fp32 8.8 ms, bf16 9.5 ms, fp16 9.2 ms; a batch of 30 pairs is launch-bound, so
    half precision only moves the scores, by up to 0.0024. On 2 AVX-512 EPYC cores, 30 pairs of 128 tokens, as a
    LongMemEval question's: OpenVINO bf16 120 ms, torch bf16 183, OpenVINO fp32 225, ONNX Runtime fp32 281, torch
    fp32 517; bf16 moved the scores by up to 0.0013)."""
    from pipelines.models.embeddings import (cpu_computes_bf16, resolve_device, resolve_precision,
                                             resolve_runtime_precision)

    check_rerank_backend(backend, quantization, device, precision)
    device = resolve_device(device)
    if backend == "auto":
        cpu_bf16 = (not device.startswith("cuda") and quantization in ("auto", "none")
                    and precision in ("auto", "bf16") and cpu_computes_bf16())
        torch_wanted = device.startswith("cuda") or (not cpu_bf16 and precision in ("bf16", "fp16"))
        backend = "torch" if torch_wanted else "openvino" if cpu_bf16 else "onnx"
    check_rerank_backend(backend, quantization, device, precision)
    if backend in ("onnx", "openvino"):
        # auto = fp32: int8 moved the scores by up to 0.18 (std 0.40) and cost LoCoMo re-ranking recall@1 0.18 -> 0.15
        folder = export_cross_encoder(directory, "none" if quantization == "auto" else quantization, export_dir)
        return _runtime_scorer(str(folder), backend, resolve_runtime_precision(precision, backend))
    saved = Path(directory)
    arithmetic = "fp32" if precision == "auto" else resolve_precision(precision, device)
    return _torch_scorer(str(saved.resolve()), device, arithmetic, saved_digest(saved))


@lru_cache(maxsize=4)
def _torch_scorer(directory: str, device: str, precision: str, digest: str) -> CrossEncoder:
    """The saved re-ranker on ``device``, once per process for unchanged weights (``digest``), as
    :func:`_runtime_scorer`: loading it again for every episode cost about 0.14 s a LongMemEval question."""
    model = CrossEncoder.load(directory).to(device).eval()
    model.inference_precision = precision
    return model


def check_rerank_backend(backend: str, quantization: str, device: str = "auto", precision: str = "auto") -> None:
    """ConfigError for an unknown cross-encoder backend / quantization, or settings that do not go together."""
    if backend not in RERANK_BACKENDS:
        raise ConfigError(f"rerank.rerank_backend must be one of {list(RERANK_BACKENDS)}, got {backend!r}.")
    if quantization not in RERANK_QUANTIZATIONS:
        raise ConfigError(f"rerank.rerank_quantization must be one of {list(RERANK_QUANTIZATIONS)}, "
                          f"got {quantization!r}.")
    if backend == "torch" and quantization == "int8":
        raise ConfigError("rerank.rerank_quantization int8 needs rerank_backend onnx (or auto on the CPU).")
    if backend == "openvino" and quantization == "int8":
        raise ConfigError("rerank.rerank_quantization int8 needs rerank_backend onnx (ONNX Runtime's dynamic int8); "
                          "openvino runs the fp32 export, in fp32 or bf16 (precision).")
    if backend in ("onnx", "openvino") and str(device).startswith("cuda"):
        raise ConfigError(f"rerank.rerank_backend {backend} runs on the CPU here; on a GPU use rerank_backend torch "
                          "(or auto).")
    if backend == "onnx" and precision not in ("auto", "fp32"):
        raise ConfigError(f"rerank precision {precision!r} does not apply to rerank_backend onnx, which computes "
                          "fp32 (int8 with rerank_quantization); bf16 on the CPU: rerank_backend openvino or torch.")
    if backend == "openvino" and precision == "fp16":
        raise ConfigError("rerank precision fp16 does not apply to rerank_backend openvino: it computes fp32 or bf16.")


# --- examples: LCE groups with first-stage hard negatives ---------------------------------------------------------

def first_stage_order(question: str, candidates: Sequence[str]) -> list[int]:
    """The candidates' indices by BM25 score for ``question`` (rank_bm25's BM25Okapi at its defaults, k1 1.5, b 0.75,
    epsilon 0.25: the bm25 strategy's defaults and scores), best first, ties to the later (newer) candidate."""
    from rank_bm25 import BM25Okapi

    docs = [bm25_tokens(t) for t in candidates]
    if not any(docs):  # no candidate has a word token: BM25 has no average length; newest first
        return list(reversed(range(len(candidates))))
    scores = BM25Okapi(docs).get_scores(bm25_tokens(question))  # (N,)
    return sorted(range(len(candidates)), key=lambda i: (-scores[i], -i))


@dataclass(frozen=True)
class Group:
    """One LCE group: a question, one of its evidence turns, the hard negatives it draws from."""

    question: str
    positive: str
    negatives: tuple[str, ...]


def group_slots(examples: Sequence[RetrievalExample]) -> list[tuple[int, str]]:
    """(example index, evidence turn) of each group :func:`groups` builds, in its order, without ranking anything:
    a question with a candidate that is not evidence has a negative (negative_depth >= 1)."""
    return [(i, p) for i, ex in enumerate(examples) if set(ex.candidates) - set(ex.positives) for p in ex.positives]


def groups(examples: Sequence[RetrievalExample], config: CrossEncoderConfig,
           slots: Sequence[tuple[int, str]] | None = None) -> list[Group]:
    """One group per (question, evidence turn) with BM25's top ``negative_depth`` non-evidence candidates as its
    negatives; a question without a negative gives none. ``slots`` (of :func:`group_slots`, a sample of them):
    only those groups, in that order, each question ranked once (BM25 over a question's candidates is most of the
    cost on a user's long histories)."""
    hard: dict[int, tuple[str, ...]] = {}
    out = []
    for i, positive in group_slots(examples) if slots is None else slots:
        if i not in hard:
            ex, positives = examples[i], set(examples[i].positives)
            ranked = [ex.candidates[j] for j in first_stage_order(ex.context, ex.candidates)]
            hard[i] = tuple([c for c in ranked if c not in positives][: config.negative_depth])
        out.append(Group(examples[i].context, positive, hard[i]))
    return out


@torch.no_grad()
def evaluate_reranker(model: "CrossEncoder | RuntimeCrossEncoder", examples: Sequence[RetrievalExample],
                      depth: int = 30) -> dict[str, float]:
    """Re-rank BM25's top ``depth`` candidates of each question; recall@1 and MRR of the best evidence turn in
    BM25's order and in the re-ranker's (a question whose evidence is not in the top ``depth`` counts 0 in both).
    Returns ``{"recall@1", "mrr", "bm25_recall@1", "bm25_mrr", "in_depth", "queries"}``."""
    examples = [ex for ex in examples if set(ex.positives) & set(ex.candidates)]
    if not examples:
        return {"recall@1": 0.0, "mrr": 0.0, "bm25_recall@1": 0.0, "bm25_mrr": 0.0, "in_depth": 0.0, "queries": 0.0}
    sums = dict.fromkeys(("recall@1", "mrr", "bm25_recall@1", "bm25_mrr", "in_depth"), 0.0)
    for ex in examples:
        top = [ex.candidates[i] for i in first_stage_order(ex.context, ex.candidates)[:depth]]
        hit = [c in ex.positives for c in top]
        if not any(hit):
            continue
        scores = model.score(ex.context, top)                                     # (depth,)
        order = sorted(range(len(top)), key=lambda i: (-scores[i], i))
        rank = 1 + min(order.index(i) for i, h in enumerate(hit) if h)
        first = 1 + hit.index(True)
        sums["in_depth"] += 1
        sums["recall@1"] += rank == 1
        sums["mrr"] += 1.0 / rank
        sums["bm25_recall@1"] += first == 1
        sums["bm25_mrr"] += 1.0 / first
    n = len(examples)
    return {**{k: v / n for k, v in sums.items()}, "queries": float(n)}


class RerankerTask:
    """The reranker stage for the training engine (pipelines.training.train): LCE groups, collate, loss."""

    paper = ("Cross-encoder re-ranker (Nogueira & Cho 2019) trained with Localized Contrastive Estimation "
             "(Gao, Dai & Callan, ECIR 2021) on question -> evidence turns, BM25 hard negatives")

    def __init__(self, config: CrossEncoderConfig, train_episodes, valid_episodes=()):
        from pipelines.models.tokenizers import load_tokenizer

        self.config = config
        by_kind = {kind: examples_of(kind, train_episodes) for kind in config.pairs}
        self.valid_examples = seeded_sample([ex for kind in config.pairs for ex in examples_of(kind, valid_episodes)],
                                            config.max_valid_examples, f"rerank-valid-questions:{config.seed}")
        self.counts = {kind: len(examples) for kind, examples in by_kind.items()}
        train = [ex for examples in by_kind.values() for ex in examples]
        slots = group_slots(train)
        if config.max_train_examples is not None and len(slots) > config.max_train_examples:
            rng = random.Random(f"rerank-subset:{config.seed}")        # the groups drawn, then only those built
            slots = [slots[j] for j in rng.sample(range(len(slots)), config.max_train_examples)]
        self.train_groups = groups(train, config, slots)
        self.valid_groups = seeded_sample(groups(self.valid_examples, config), config.max_valid_examples,
                                          f"rerank-valid-groups:{config.seed}")
        self.counts["groups"] = len(self.train_groups)
        self.tokenizer = load_tokenizer(config.resolved_model())

    def build_model(self) -> CrossEncoder:
        return CrossEncoder.from_pretrained(self.config)

    def _sampled(self, items: Sequence[Group], salt: str) -> list[tuple[str, tuple[str, ...]]]:
        """Each group's pairs: its positive first, then G-1 negatives drawn (seeded per group) from its hard ones."""
        out = []
        k = self.config.group_size - 1
        for g in items:
            rng = random.Random(f"{salt}:{self.config.seed}:{g.question}:{g.positive}")
            negatives = list(g.negatives) if len(g.negatives) <= k else rng.sample(list(g.negatives), k)
            out.append((g.question, (g.positive, *negatives)))
        return out

    def train_dataset(self) -> list[tuple[str, tuple[str, ...]]]:
        return self._sampled(self.train_groups, "rerank-train")

    def valid_dataset(self) -> list[tuple[str, tuple[str, ...]]]:
        return self._sampled(self.valid_groups, "rerank-valid")

    def collate(self, items: Sequence[tuple[str, tuple[str, ...]]]) -> dict[str, torch.Tensor]:
        """Every pair of the batch's groups flattened (B * G, L), and each group's rows (B, G; -1 pads a group
        with fewer negatives)."""
        width = max(len(texts) for _, texts in items)
        questions, texts = [], []
        rows = torch.full((len(items), width), -1, dtype=torch.long)
        for b, (question, pair_texts) in enumerate(items):
            rows[b, : len(pair_texts)] = torch.arange(len(texts), len(texts) + len(pair_texts))
            questions += [question] * len(pair_texts)
            texts += list(pair_texts)
        self.tokenizer.truncation_side = "right"
        enc = self.tokenizer(questions, texts, padding=True, truncation="longest_first",
                             max_length=self.config.max_length, return_tensors="pt")
        return {**dict(enc), "group_rows": rows}

    def compute_loss(self, model: CrossEncoder, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Tokens]:
        """LCE: cross-entropy of the positive (column 0) among its group's logits; tokens = the pairs' tokens."""
        rows = batch["group_rows"]                                                    # (B, G)
        inputs = {k: v for k, v in batch.items() if k != "group_rows"}
        logits = model(**inputs)                                                      # (B*G,)
        grouped = logits[rows.clamp(min=0)].masked_fill(rows < 0, float("-inf"))      # (B, G)
        loss = F.cross_entropy(grouped.float(), torch.zeros(len(rows), dtype=torch.long, device=grouped.device))
        return loss, batch["attention_mask"].sum()

    def evaluate(self, model: CrossEncoder) -> dict[str, float]:
        """Recall@1 / MRR re-ranking BM25's top ``negative_depth`` on the validation questions (a report; the engine
        stops on the validation loss)."""
        return evaluate_reranker(model, self.valid_examples, self.config.negative_depth)

    def save_final(self, model: CrossEncoder, out_dir: str | os.PathLike) -> Path:
        return model.save(out_dir)
