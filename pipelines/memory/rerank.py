"""``rerank``: ``fusion_threads``' top candidates re-scored by the trained cross-encoder (issue #18).

Two stages (Nogueira & Cho, "Passage Re-ranking with BERT", 2019): the first stage (:mod:`.fusion` with
``fusion_threads``' settings: BM25 + dense fusion, session scoring, time awareness, the conversation so far and
threads) ranks every held turn by f'; its
top ``depth`` turns C are read with the question by the cross-encoder of the reranker stage
(:mod:`pipelines.rerank.cross_encoder`, trained with LCE on question -> evidence turns), and each candidate's final
score interpolates both, each normalised over C (as :mod:`.fusion` normalises its rankers):

    g(d) = z(f'(d)) + w_c * z(s(q, d))          d in C;  the turns outside C keep their order below C

A session's score gains its best candidate's cross-encoder score the same way (MaxP, Dai & Callan 2019):

    S'(s) = z(S(s)) + w_s * z(max_{d in C, d in s} s(q, d))     (a session without a candidate: z = 0)

(w_s = ``session_weight``, w_c unless set; 0 keeps the first stage's session ranking.) The cross-encoder reads the
question alone, never the conversation it is asked in; so for a question asked inside a session whose session the
first stage linked to an earlier one (:mod:`pipelines.threads`, ``query_link_weight`` w_q), that thread is lifted
again over S' as fusion_threads lifts it: S''(s) = S'(s) + w_q * (max S' - min S') * [T(s) = T(t_q)].

Cost: one cross-encoder pass per candidate, ``depth`` pairs per query; the benchmark records it in each query's
latency (``latency_ms_p50``, the ablation table), and the strategy keeps the re-ranking time alone of each query in
``rerank_ms`` (model loading included, the first time). On the CPU the cross-encoder runs (``rerank_backend: auto``)
as an ONNX export of the saved model (fused by ONNX Runtime's transformer optimizer), made once in the encoders'
export folder (:func:`pipelines.rerank.cross_encoder.export_cross_encoder`): compiled by OpenVINO in bf16 on a CPU
that computes bf16 natively, else run by ONNX Runtime in fp32 (:func:`~pipelines.rerank.cross_encoder.load_scorer`
gives the figures); the pairs are tokenized once, sorted by length and cut into the batches of least padded work
(half of a padded batch of 30 LoCoMo pairs is padding). benchmarks/embedding_backends.py measures it against the
torch fp32 scoring it replaces.

Honest evaluation: as ``trained_dense``, each episode is scored by the main model unless it trained on the
episode, else by the fold model that held it out (``models/reranker/folds/``), else not at all (ConfigError).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from pipelines.data.schema import Episode, Query
from pipelines.errors import ConfigError
from pipelines.memory.base import Retrieved, check_k, check_weights, register_strategy
from pipelines.memory.fusion import Fusion, FusionThreadsConfig, calibrate, rank_sessions
from pipelines.memory.index import top_k
from pipelines.data.folds import HeldOutModels

STAGE, FOLDS_KEY = "reranker", "rerank.folds"


@dataclass(frozen=True)
class RerankConfig(FusionThreadsConfig):
    """fusion_threads' settings (the first stage), and the re-ranker's."""

    reranker_path: str | None = None   # a saved reranker (models/reranker, the benchmark's default)
    depth: int = 30                    # |C|: the first stage's top turns the cross-encoder reads
    rerank_weight: float = 2.0         # w_c (0: the first stage alone)
    session_weight: float | None = None  # w_s, the cross-encoder's weight in a session's score (None: w_c)
    rerank_batch_size: int = 64        # at most this many pairs per cross-encoder forward pass (length-sorted batches)
    rerank_backend: str = "auto"       # auto (torch on a GPU; openvino in bf16 on a CPU that computes bf16, else
                                       # onnx) | torch | onnx (ONNX Runtime) | openvino (both over the ONNX export)
    rerank_quantization: str = "auto"  # onnx: auto = none (fp32) | none | int8 (dynamic, this CPU's preset; moves
                                       # the scores enough to cost re-ranking recall: measured, not the default)
    device: str = "auto"               # auto | cpu | cuda | cuda:N: the dense encoder's and the cross-encoder's

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("depth", "rerank_batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"rerank.{name} must be a positive integer, got {value!r}.")
        from pipelines.rerank.cross_encoder import check_rerank_backend

        check_rerank_backend(self.rerank_backend, self.rerank_quantization, self.device, self.precision)
        check_weights(self, "rerank", ("rerank_weight",) if self.session_weight is None else
                      ("rerank_weight", "session_weight"))

    @property
    def w_s(self) -> float:
        """The cross-encoder's weight in a session's score."""
        return self.rerank_weight if self.session_weight is None else self.session_weight


def _held_out(path) -> HeldOutModels:
    from pipelines.rerank.cross_encoder import CONFIG_FILE

    return HeldOutModels(path, CONFIG_FILE, STAGE, "rerank", FOLDS_KEY, setting="reranker_path")


@register_strategy("rerank")
class Rerank(Fusion):
    """fusion_threads + a cross-encoder re-ranking its top turns (trained on question -> evidence pairs)."""

    config_class = RerankConfig
    model_settings = {"reranker_path": "reranker"}
    ingredient = "+ cross-encoder re-ranking of the top turns (MiniLM, LCE on question -> evidence)"

    def __init__(self, config=None, counter=None, embedder=None, time_reader=None, expander=None):
        super().__init__(config, counter, embedder, time_reader, expander)
        if not self.config.reranker_path:
            raise ConfigError("rerank.reranker_path is not set: give the folder of a trained reranker (the "
                              "benchmark's default is models/reranker).")
        self.models = _held_out(self.config.reranker_path)
        self._loaded: dict[Path, object] = {}       # folder -> CrossEncoder
        self._memo: dict[tuple[Path, str, str], float] = {}   # (model, question, turn text) -> s(q, d)
        self.rerank_ms: list[float] = []            # cross-encoder time of each query that scored new pairs

    @classmethod
    def unavailable(cls, episodes: Sequence[Episode], settings: dict) -> str | None:
        from pipelines.rerank.cross_encoder import CONFIG_FILE

        return HeldOutModels.unavailable(settings.get("reranker_path"), episodes, CONFIG_FILE, STAGE, "rerank",
                                         FOLDS_KEY, setting="reranker_path")

    def enter(self, episode: Episode) -> None:
        """Enter ``episode`` after choosing its model (ConfigError when every model trained on it)."""
        self.models.choose(episode.id)
        super().enter(episode)

    def model_for(self, episode_id: str) -> Path:
        return self.models.choose(episode_id)

    def _cross_scores(self, question: str, texts: list[str]) -> np.ndarray:
        """s(q, d) of each text (C,), by the episode's model; each (model, question, text) scored once."""
        path = self.models.chosen(self.episode_id)
        if path is None:
            raise ConfigError("rerank: no episode entered; call enter(episode) or observe first.")
        missing = [t for t in dict.fromkeys(texts) if (path, question, t) not in self._memo]
        if missing:
            started = time.perf_counter()
            if path not in self._loaded:
                from pipelines.rerank.cross_encoder import load_scorer

                c = self.config
                self._loaded[path] = load_scorer(path, c.rerank_backend, c.rerank_quantization, c.device,
                                                 c.export_dir, precision=c.precision)
            scores = self._loaded[path].score(question, missing, self.config.rerank_batch_size)
            self._memo.update({(path, question, t): float(v) for t, v in zip(missing, scores)})
            self.rerank_ms.append(1000.0 * (time.perf_counter() - started))
        return np.asarray([self._memo[(path, question, t)] for t in texts], dtype=np.float64)

    def reset(self) -> None:
        super().reset()
        if hasattr(self, "_memo"):
            self._memo.clear()   # a forgotten turn's text leaves no score behind

    def forget(self, selector) -> int:
        removed = super().forget(selector)
        held = {i.indexed_text(True) for i in self.bm25.items}
        self._memo = {key: v for key, v in self._memo.items() if key[2] in held}
        return removed

    def retrieve(self, query: Query, k: int) -> list[Retrieved]:
        check_k(k)
        if not len(self):
            self._last = (self._asked(query), [], np.zeros(0))
            return []
        c = self.config
        rows, fused, sessions, pooled = self._fuse(query, max(c.depth, k))     # (U,), (U,), (S,), (S,)
        if rows is None:                                                        # every held turn scored
            rows = np.arange(len(fused))
        items = self.bm25._items
        top = top_k(fused, c.depth, background=-np.inf)
        top = top[np.isfinite(fused[top])]                                      # C (positions in U), best first
        candidates = rows[top]
        cross = self._cross_scores(query.question, [items[j].indexed_text(True) for j in candidates.tolist()])  # (C,)
        final = np.full(len(rows), -np.inf)                                     # (U,)
        if top.size:
            final[top] = calibrate(fused[top], c.calibration) + c.rerank_weight * calibrate(cross, c.calibration)
            rest = np.isfinite(fused)                                           # (U,) scored, not in C
            rest[top] = False
            if rest.any():        # below every candidate, in the first stage's order
                final[rest] = fused[rest] - fused[rest].max() + final[top].min() - 1.0
        # sessions: S' = z(S) + w_s * z(best candidate's s(q, d)), filtered sessions (-inf) stay out
        best = np.full(len(sessions), -np.inf)                                  # (S,)
        if top.size:
            np.maximum.at(best, self._layout().session_of[candidates], cross)
        lifted = np.zeros(len(sessions))
        has = np.isfinite(best)
        if has.any():
            lifted[has] = calibrate(best[has], c.calibration)
        finite = np.isfinite(pooled)
        scored = np.full(len(sessions), -np.inf)
        if finite.any():
            scored[finite] = calibrate(pooled[finite], c.calibration) + c.w_s * lifted[finite]
        if self._linked >= 0 and c.w_s:   # the thread the conversation continues, which the cross-encoder never reads
            from pipelines.threads import lift

            scored = lift(scored, self._layout().threads, self._linked, c.query_link_weight)
        self._last = (self._asked(query), sessions, scored)
        return self._retrieved(rows, final, k)

    def session_ranking(self, query: Query) -> list[str] | None:
        """The sessions by S' (the cross-encoder's best candidate in each lifts it)."""
        if self._last is None or self._last[0] != self._asked(query):
            self.retrieve(query, max(len(self), 1))
        return rank_sessions(self._last[1], self._last[2])
