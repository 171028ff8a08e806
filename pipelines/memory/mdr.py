"""``mdr``: MDR's history selection as a memory strategy (seed 001, section 3.2 "Student Encoder").

MDR ("MDR: Memory Distillation and Reproduction for Personalized Dialogue Generation") reads its
memory through the frozen teacher encoder: the query and every history round are encoded
(equations 4 and 6, ``Q_TE = Encoder_teacher(Q)``, ``H_TE = Encoder_teacher(H)``) and the round
most similar to the query is selected (equation 7, :func:`pipelines.mdr.student.select_history`):

    index = argmax_i cos(Q_TE(T), H_TE(i))

Here every observed turn is a candidate H(i): the strategy holds the teacher sentence feature of
each turn (:func:`pipelines.mdr.features.sentence_features`, the mean of the teacher's last layer
over the tokens) and ``retrieve(query, k)`` ranks the held turns by ``cos(Q_TE(query), H_TE(turn))``,
best first; the top-1 is MDR's selected history. (Exact ties, i.e. identical encoded ids, go to
the newer turn as in every turn strategy, :mod:`.turn_store`; torch's argmax would take the older.)

What is encoded is what the teacher encoded in stage B (:func:`pipelines.mdr.tasks.student_item`),
bare texts without speaker names, in :class:`~pipelines.mdr.text.Codec`'s layouts:

- the query: ``tokens(question)[:max_query_tokens] + [eos]`` (Q);
- a turn, ``turn_text="round"`` (default): MDR's history round ``tokens(Q) sep tokens(R)`` cut to
  ``max_history_tokens``, + eos, where R is the turn and Q the turn just before it in the same
  session when another speaker said it (the rule :mod:`pipelines.data.tasks` forms rounds by; a
  round is identified by its response turn, as in ``MDRExample.history_turn_ids``). A turn
  without such a predecessor (it opens the session or follows its own speaker) is encoded alone,
  ``tokens(turn)[:max_history_tokens] + [eos]``; ``turn_text="utterance"`` encodes every turn so.
  As in MDR, a round is cut from its end: a Q longer than ``max_history_tokens`` hides the turn.

The limits, eos / sep tokens and tokenizer are the ones the teacher was trained with:
``mdr_config.json`` and ``tokenizer/`` written beside the model by stage ``mdr_teacher``. The
teacher encoder is loaded lazily (first encode) through :meth:`MDRTeacher.load` (frozen, eval
mode), once per (directory, device) per process, and runs under ``torch.no_grad`` in batches.

Features are a pure function of the token ids, so they are cached per loaded teacher for the
process (``cache_features``): ``prepare(episodes)`` encodes every turn and question once, and the
fresh strategy the evaluator builds for each episode reads them from there. ``forget`` drops the
forgotten rows and purges their features from that cache (unless a row still held, in any episode's
store, encodes the same ids); a turn whose round used a forgotten turn as its Q is re-encoded alone,
so nothing derived from a forgotten text is kept. ``reset``
empties the held rows (the cache of pure features stays for the next episode).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from pipelines.data.schema import Episode, Query
from pipelines.errors import ConfigError, ModelNotTrained
from pipelines.memory.base import StrategyConfig, register_strategy
from pipelines.memory.turn_store import TurnItem, TurnStrategy

if TYPE_CHECKING:  # heavy imports stay lazy: importing pipelines.memory must not load torch
    from pipelines.mdr.config import MDRConfig
    from pipelines.mdr.text import Codec

STAGE = "mdr_teacher"
TURN_TEXTS = ("round", "utterance")
Ids = tuple[int, ...]


@dataclass(frozen=True)
class MDRStrategyConfig(StrategyConfig):
    """Settings of the ``mdr`` strategy."""

    teacher: str | None = None   # directory written by stage mdr_teacher (normally models/mdr_teacher)
    turn_text: str = "round"     # a turn's H(i): "round" (Q sep R, MDR's history round) or "utterance"
    batch_size: int = 32         # texts per forward pass of the teacher encoder
    device: str = "cpu"          # torch device of the teacher encoder
    cache_features: bool = True  # keep features for the process (prepare warms it; forget purges it)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.teacher is None or not str(self.teacher).strip():
            raise ConfigError("mdr.teacher is not set: the mdr strategy needs the trained teacher directory "
                              "(normally models/mdr_teacher, written by stage mdr_teacher).")
        if self.turn_text not in TURN_TEXTS:
            raise ConfigError(f"mdr.turn_text is {self.turn_text!r}: choose one of {', '.join(TURN_TEXTS)}.")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"mdr.batch_size must be a positive integer, got {self.batch_size!r}.")


@dataclass
class TeacherEncoder:
    """The frozen teacher encoder with the codec and MDR settings it was trained with."""

    encoder: Any                       # GPT2Model, frozen, eval mode, on ``device``
    codec: "Codec"
    config: "MDRConfig"
    device: str
    features: dict[Ids, np.ndarray] = field(default_factory=dict)  # token ids -> (H,) float32

    @property
    def hidden(self) -> int:
        return int(self.encoder.get_input_embeddings().embedding_dim)

    def encode(self, seqs: Sequence[Sequence[int]], batch_size: int) -> np.ndarray:
        """Sentence features of id sequences, (N,) -> (N, H) float32, batched (shortest first)."""
        import torch

        from pipelines.mdr.features import sentence_features
        from pipelines.mdr.text import pad

        out = np.zeros((len(seqs), self.hidden), dtype=np.float32)       # (N, H)
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))     # less padding per batch
        with torch.no_grad():
            for start in range(0, len(order), batch_size):
                rows = order[start:start + batch_size]
                ids, mask = pad([seqs[i] for i in rows], self.codec.pad_id)                  # (b, L)
                feats = sentence_features(self.encoder, ids.to(self.device), mask.to(self.device))  # (b, H)
                out[rows] = feats.float().cpu().numpy()
        return out

    def cached(self, seqs: Sequence[Ids], batch_size: int, use_cache: bool = True) -> np.ndarray:
        """Like :meth:`encode`, reading and filling :attr:`features` when ``use_cache``."""
        if not use_cache:
            return self.encode(seqs, batch_size)
        missing = list(dict.fromkeys(s for s in seqs if s not in self.features))
        if missing:
            self.features.update(zip(missing, self.encode(missing, batch_size)))
        if not seqs:
            return np.zeros((0, self.hidden), dtype=np.float32)
        return np.stack([self.features[s] for s in seqs])                # (N, H)


def load_teacher_encoder(path: str | Path, device: str = "cpu") -> TeacherEncoder:
    """The teacher of an mdr_teacher directory (one per directory, version and device per process)."""
    path = Path(path)
    if not path.is_dir():
        raise ModelNotTrained(f"strategy 'mdr': teacher = {str(path)!r} does not exist", path=str(path), stage=STAGE)
    meta = path / "mdr_teacher.json"
    return _load(str(path.resolve()), device, meta.stat().st_mtime_ns if meta.exists() else 0)


@lru_cache(maxsize=4)
def _load(path: str, device: str, version: int) -> TeacherEncoder:
    from pipelines.mdr.config import MDRConfig
    from pipelines.mdr.teacher import MDRTeacher
    from pipelines.mdr.text import load_codec

    settings_file = Path(path) / "mdr_config.json"
    if not settings_file.exists():
        raise ConfigError(f"{settings_file} is missing: the mdr strategy needs the settings the teacher was "
                          f"trained with (written with tokenizer/ by stage mdr_teacher); rerun mdr_teacher.")
    settings = json.loads(settings_file.read_text())
    cfg = MDRConfig(**{f.name: settings[f.name] for f in fields(MDRConfig) if f.name in settings})
    codec = load_codec(Path(path) / "tokenizer", eos_token=cfg.eos_token, sep_token=cfg.sep_token)
    encoder = MDRTeacher.load(path).encoder.to(device)  # frozen, eval mode (the decoder is dropped)
    return TeacherEncoder(encoder, codec, cfg, device)


@register_strategy("mdr")
class MDR(TurnStrategy):
    """Turns ranked by the cosine of their teacher features to the query's (MDR, eq. 7)."""

    config_class = MDRStrategyConfig
    model_settings = {"teacher": STAGE}

    def __init__(self, config=None, counter=None):
        super().__init__(config, counter)
        if not Path(self.config.teacher).is_dir():  # fail before a run, not at the first encode
            raise ModelNotTrained(f"strategy 'mdr': teacher = {self.config.teacher!r} does not exist",
                                  path=str(self.config.teacher), stage=STAGE)
        self._teacher: TeacherEncoder | None = None

    def _empty_scope(self) -> dict:
        return {**super()._empty_scope(),
                "_vectors": np.zeros((0, 0), dtype=np.float32),  # (N, H) teacher features, store order
                "_keys": [],        # (N,) the token ids each row encodes
                "_context": []}     # (N,) turn id of the round's Q part (None: alone)

    @property
    def teacher(self) -> TeacherEncoder:
        if self._teacher is None:
            self._teacher = load_teacher_encoder(self.config.teacher, self.config.device)
        return self._teacher

    # --- rendering (stage B's layouts) ------------------------------------------------------------
    def _turn_ids(self, prev: Any, turn: Any) -> tuple[Ids, str | None]:
        """(ids of H(i), id of the Q turn or None) for ``turn`` after ``prev`` in its session."""
        codec, limit = self.teacher.codec, self.teacher.config.max_history_tokens
        if self.config.turn_text == "round" and prev is not None and prev.speaker != turn.speaker:
            return tuple(codec.round_ids(prev.text.strip(), turn.text.strip(), limit)), _id(prev)
        return tuple(codec.encoder_ids(turn.text.strip(), limit)), None

    def _query_ids(self, question: str) -> Ids:
        return tuple(self.teacher.codec.encoder_ids(question.strip(), self.teacher.config.max_query_tokens))

    def _features(self, seqs: Sequence[Ids]) -> np.ndarray:
        return self.teacher.cached(list(seqs), self.config.batch_size, self.config.cache_features)

    # --- the interface ------------------------------------------------------------------------------
    def prepare(self, episodes: Sequence[Episode]) -> None:
        """Encode every turn (as :meth:`observe` renders it) and question of ``episodes`` in one
        batched pass into the process cache; adds nothing to memory. Without the cache: nothing."""
        if not self.config.cache_features:
            return
        seqs = [self._turn_ids(prev, turn)[0] for e in episodes for s in e.sessions
                for prev, turn in zip([None, *s.turns[:-1]], s.turns)]
        seqs += [self._query_ids(q.question) for e in episodes for q in e.queries]
        self._features(list(dict.fromkeys(seqs)))

    def _on_add(self, new: list[TurnItem]) -> None:
        if not new:
            return
        # observe() appends one session's turns in order: the previous item is the previous turn
        rendered = [self._turn_ids(prev, item) for prev, item in zip([None, *new[:-1]], new)]
        vectors = self._features([ids for ids, _ in rendered])                  # (n, H)
        self._vectors = vectors if self._vectors.size == 0 else np.vstack([self._vectors, vectors])
        self._keys += [ids for ids, _ in rendered]
        self._context += [ctx for _, ctx in rendered]

    def _on_remove(self, removed: list[TurnItem], keep: np.ndarray) -> None:
        gone = {i.turn_id for i in removed}
        purge = {k for k, kept in zip(self._keys, keep) if not kept}
        self._vectors = self._vectors[keep]
        self._keys = [k for k, kept in zip(self._keys, keep) if kept]
        self._context = [c for c, kept in zip(self._context, keep) if kept]
        # rounds whose Q was forgotten: the response turn is re-encoded alone
        stale = [j for j, c in enumerate(self._context) if c in gone]
        if stale:
            purge |= {self._keys[j] for j in stale}
            for j in stale:
                self._keys[j], self._context[j] = self._turn_ids(None, self._items[j])
            self._vectors[stale] = self._features([self._keys[j] for j in stale])
        held = {k for state in self.held_scopes() for k in state["_keys"]}  # every episode's rows
        for key in purge - held:
            self.teacher.features.pop(key, None)

    def _scores(self, query: Query) -> np.ndarray:
        """cos(Q_TE(query), H_TE(i)) for every held turn i (N,), as select_history computes it."""
        import torch
        import torch.nn.functional as F

        q_te = torch.from_numpy(self._features([self._query_ids(query.question)]))  # (1, H)
        h_te = torch.from_numpy(self._vectors)                                       # (N, H)
        return F.cosine_similarity(h_te, q_te, dim=-1, eps=1e-8).double().numpy()    # (N,)


def _id(turn: Any) -> str | None:
    """The id of a TurnItem (``turn_id``) or of a schema Turn (``id``)."""
    return getattr(turn, "turn_id", None) or getattr(turn, "id", None)
