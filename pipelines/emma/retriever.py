"""EMMA's retrieval module: a dual encoder trained with a triplet loss (seed 000, section 4.2, Appendix E.2).

Two encoders of the same architecture, both initialised from one checkpoint (paper: BERT-base; tiny
profile: the shipped all-MiniLM-L6-v2), one for the dialogue context (max 512 tokens) and one for
memory sentences (max 32 tokens). Relevance is their cosine similarity,

    sim(c, m_i) = cos(E_c(c), E_m(m_i))                                                   (1)

and training minimises the triplet loss on the cosine distance d(x, y) = 1 - cos(x, y), margin 0.2:

    L = mean_b max(0, d(E_c(c_b), E_m(m_b^+)) - d(E_c(c_b), E_m(m_b^-)) + margin)

(sentence-transformers' TripletLoss defaults to the Euclidean distance and margin 5; both are set
here explicitly). At inference EMMA keeps the top-1 memory (and the memories linked to it, see
pipelines.memory.egocentric).

Triplets come from MiSC's memory tags: the context is the generation sequence up to a main-speaker turn
(speakers, [NOW], the session's turns, without the prefix and the memory block, as the authors' code
feeds it), the positive is a memory the turn is tagged with, the negatives are the owner's other
memories written before the session (those a retriever can choose from; when there are none, the
episode's other memories). Negatives are mined from those of the same episode under the current
encoders, inside the training forward pass and without gradients (``negative_mining``):

- "semi-hard" (default; Schroff et al., 2015, FaceNet): the closest negative that is still farther from
  the context than the positive, d(a, n) > d(a, p); when there is none, the farthest one;
- "hardest": the most similar negative;
- "random": a uniformly drawn negative.

Training (Appendix E.2): lr 1e-4, batch 90, margin 0.2, at most 20 epochs "with early stopping" on 8 GPUs.
The paper names no early-stopping criterion: the engine stops on the validation triplet loss (the loss it
trains), and Recall@1 / MRR are measured after training on the test split (``evaluate_retriever``; the
emma_retriever stage reports both the untrained and the trained encoder). The batch is per process (see
``RetrieverConfig.batch_size``); the negatives are mined among each example's own candidates, not across
the batch, so the loss of an example does not depend on the batch size.

Measured on the synthetic data (MiniLM init, batch 16, lr 1e-4, early stopping on validation loss, test
split of 96 episodes, 145 tagged turns): untrained recall@1 0.117 / MRR 0.291; semi-hard 0.159 / 0.341;
hardest 0.103 / 0.298, its validation loss staying at the margin (0.20): the hardest negatives alone keep
the triplets at d(a, p) = d(a, n), the collapse FaceNet describes.

Question -> evidence pairs (``RetrieverConfig.pairs``, issue #18): besides MiSC's tagged turns
("memory_tags", the paper's data), the retriever can learn from the questions the benchmarks ask
("questions": LoCoMo's evidence turns, LongMemEval's has_answer turns, the synthetic queries' evidence):
the context is the question, the positives are its evidence turns and the candidates every turn of the
episode's earlier sessions (hard negatives from the same conversation), each turn rendered
``"speaker: text"`` exactly as the ``dense`` and ``trained_dense`` strategies index it, so that the trained
encoder is a turn retriever of the benchmark (pipelines.memory.trained_dense). Questions whose evidence is
sessions only (RealMem) are a third, opt-in kind, "session_questions" (:func:`question_examples`).
Turns are longer than MiSC's memory sentences (LoCoMo's: 20-60 tokens; LongMemEval's assistant turns:
hundreds): ``memory_max_length`` (32, E.2's value for memory sentences) cuts them, so training on
questions wants ``memory_max_length`` 64 to 128 (params.yaml ``emma.retriever.memory_max_length``). A user's
files give thousands of such triplets (one per evidence turn of a question): ``max_train_triplets`` and
``max_valid_triplets`` keep a seeded sample of them (every kind together), so that training fits a CPU's time.

Folds (:class:`pipelines.data.folds.Folds`, params.yaml ``emma.retriever_folds``): a dataset published as one test split
(LoCoMo's 10 conversations) is cut into k folds by episode, so that each of its conversations is scored by a
model that never saw it (:func:`pipelines.data.folds.assign_folds`; the emma_retriever stage trains one model per fold).

Pooling is a choice the paper leaves open: the authors' code takes the [CLS] vector ("cls", used with
BERT-base: the paper profile's setting); all-MiniLM-L6-v2 was trained with mean pooling ("mean", the
default and the tiny profile's). Long contexts
are cut from the left, keeping the latest turns (``context_truncation``).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from pipelines.data.sampling import seeded_sample
from pipelines.data.schema import Episode
from pipelines.emma.formats import EpisodeView, FormatConfig
from pipelines.errors import ConfigError
from pipelines.training.config import Tokens

from pipelines.emma.retriever_config import CONFIG_FILE, PAIRS, RetrieverConfig


# --- the loss: pure tensor functions --------------------------------------------------------------

def cosine_distance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """d(x, y) = 1 - cos(x, y), row by row: (B, H), (B, H) -> (B,)."""
    return 1.0 - F.cosine_similarity(x, y, dim=-1)


def compute_loss(anchor: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor,
                 margin: float = 0.2) -> torch.Tensor:
    """Triplet loss on the cosine distance (Appendix E.2, margin 0.2).

    anchor = E_c(context), positive = E_m(tagged memory), negative = E_m(other memory), each (B, H);
    returns mean_b max(0, d(a, p) - d(a, n) + margin), a scalar.
    """
    loss = nn.TripletMarginWithDistanceLoss(distance_function=cosine_distance, margin=margin)
    return loss(anchor, positive, negative)


# --- the dual encoder ------------------------------------------------------------------------------

@torch.no_grad()
def mine_negatives(anchor: torch.Tensor, positive: torch.Tensor, negative_index: torch.Tensor, mining: str,
                   encode_pool) -> torch.Tensor:
    """The pool row of each anchor's negative: (B,) from anchors (B, H), positives (B, H), candidates (B, K).

    ``encode_pool(rows)`` embeds the given pool rows with the current memory encoder. "hardest" takes the
    smallest d(a, n); "semi-hard" the smallest d(a, n) with d(a, n) > d(a, p), else the largest d(a, n).
    With one candidate per anchor (K = 1, e.g. "random" chosen in collate) nothing is encoded.
    """
    if negative_index.shape[1] == 1 or mining == "random":
        return negative_index[:, 0]
    valid = negative_index >= 0                                              # (B, K)
    rows = torch.unique(negative_index[valid])                               # the pool rows in use
    pool = torch.zeros(int(negative_index.max()) + 1, anchor.shape[1], device=anchor.device, dtype=anchor.dtype)
    pool[rows] = encode_pool(rows).to(anchor.dtype)                          # (P, H)
    d_an = cosine_distance(anchor.unsqueeze(1), pool[negative_index.clamp(min=0)])   # (B, K)
    d_ap = cosine_distance(anchor, positive).unsqueeze(1)                    # (B, 1)
    inf = torch.tensor(float("inf"), device=d_an.device, dtype=d_an.dtype)
    hardest = torch.where(valid, d_an, inf).argmin(1)                        # (B,)
    if mining == "hardest":
        choice = hardest
    else:
        outside = valid & (d_an > d_ap)                                      # farther than the positive
        semi = torch.where(outside, d_an, inf).argmin(1)
        easiest = torch.where(valid, d_an, -inf).argmax(1)
        choice = torch.where(outside.any(1), semi, easiest)
    return negative_index.gather(1, choice.unsqueeze(1)).squeeze(1)


def tokenize(tokenizer, texts: Sequence[str], config: RetrieverConfig, tower: str):
    """Padded ids and mask of ``texts`` for one tower ("context" or "memory") with its max length."""
    if tower == "context":
        tokenizer.truncation_side, limit = config.context_truncation, config.context_max_length
    else:
        tokenizer.truncation_side, limit = "right", config.memory_max_length
    return tokenizer(list(texts), padding=True, truncation=True, max_length=limit, return_tensors="pt")


class DualEncoder(nn.Module):
    """E_c and E_m: two transformer encoders with their tokenizer, and cosine relevance (eq. 1)."""

    def __init__(self, context_encoder: nn.Module, memory_encoder: nn.Module, tokenizer,
                 config: RetrieverConfig):
        super().__init__()
        self.context_encoder, self.memory_encoder = context_encoder, memory_encoder
        self.tokenizer, self.config = tokenizer, config
        limit = getattr(context_encoder.config, "max_position_embeddings", None)
        for name in ("context_max_length", "memory_max_length"):
            if limit is not None and getattr(config, name) > limit:
                raise ConfigError(f"emma.retriever.{name} = {getattr(config, name)} exceeds the encoder's "
                                  f"{limit} position embeddings.")

    @classmethod
    def from_pretrained(cls, config: RetrieverConfig | None = None) -> "DualEncoder":
        """Both encoders from ``config.model`` (a local path or a cached name; never downloaded here)."""
        from transformers import AutoModel

        from pipelines.models._hf import hub_offline
        from pipelines.models.tokenizers import load_tokenizer

        config = config or RetrieverConfig()
        path = config.resolved_model()
        local_only = hub_offline() and not Path(path).is_dir()
        try:
            # fp32 master weights whatever the checkpoint's dtype (transformers 5 loads the saved dtype by
            # default; AdamW on fp16 weights underflows); autocast gives bf16 compute on GPUs
            towers = [AutoModel.from_pretrained(path, local_files_only=local_only, dtype=torch.float32)
                      for _ in range(2)]
        except OSError as err:
            raise ConfigError(f"cannot load retriever checkpoint {path!r}: it is neither a local directory nor a "
                              f"cached model (no download is attempted offline). Cause: {err}") from err
        return cls(towers[0], towers[1], load_tokenizer(path), config)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T, H), (B, T) -> (B, H): the [CLS] vector or the masked mean of the last layer."""
        if self.config.pooling == "cls":
            return hidden[:, 0]
        m = mask.unsqueeze(-1).to(hidden.dtype)                       # (B, T, 1)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)           # (B, H)

    def _tower(self, encoder: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.pool(encoder(input_ids=ids, attention_mask=mask).last_hidden_state, mask)

    def forward(self, context_ids: torch.Tensor | None = None, context_mask: torch.Tensor | None = None,
                memory_ids: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None,
                pool_ids: torch.Tensor | None = None, pool_mask: torch.Tensor | None = None,
                negative_index: torch.Tensor | None = None, mining: str = "semi-hard"):
        """Embeddings of whatever is given, in one call (one DDP forward per training step).

        Without a pool: returns (E_c(context) (B, H) or None, E_m(memory) (M, H) or None).
        With ``pool_ids`` (P, L) and ``negative_index`` (B, K) (pool rows of each anchor's negatives, -1 = none),
        ``memory_ids`` are the positives (B, L'): each anchor's negative is mined among its K (``mining``,
        see the module docstring) without gradients, encoded with gradients, and the call returns
        (anchor (B, H), positive (B, H), negative (B, H)).
        """
        anchor = self._tower(self.context_encoder, context_ids, context_mask) if context_ids is not None else None
        memory = self._tower(self.memory_encoder, memory_ids, memory_mask) if memory_ids is not None else None
        if pool_ids is None:
            return anchor, memory
        picked = mine_negatives(anchor, memory, negative_index, mining,
                                lambda rows: self._tower(self.memory_encoder, pool_ids[rows], pool_mask[rows]))
        negative = self._tower(self.memory_encoder, pool_ids[picked], pool_mask[picked])    # (B, H)
        return anchor, memory, negative

    def tokenize(self, texts: Sequence[str], tower: str) -> dict[str, torch.Tensor]:
        """Token ids and mask for the context tower (max 512, cut on ``context_truncation``) or the memory tower."""
        return tokenize(self.tokenizer, texts, self.config, tower)

    def encode_context(self, texts: Sequence[str]) -> torch.Tensor:
        """E_c(c): (B, H)."""
        batch = self.tokenize(texts, "context").to(self.device)
        return self(context_ids=batch["input_ids"], context_mask=batch["attention_mask"])[0]

    def encode_memory(self, texts: Sequence[str]) -> torch.Tensor:
        """E_m(m): (N, H)."""
        batch = self.tokenize(texts, "memory").to(self.device)
        return self(memory_ids=batch["input_ids"], memory_mask=batch["attention_mask"])[1]

    def count_tokens(self, texts: Sequence[str], max_length: int) -> int:
        return sum(min(len(ids), max_length) for ids in self.tokenizer(list(texts))["input_ids"])

    @torch.no_grad()
    def scores(self, context: str, memories: Sequence[str]) -> torch.Tensor:
        """sim(c, m_i) for every memory (eq. 1): (N,)."""
        if not memories:
            return torch.empty(0)
        c = self.encode_context([context])                           # (1, H)
        m = self.encode_memory(memories)                             # (N, H)
        return F.cosine_similarity(c, m, dim=-1).float().cpu()       # (N,)

    def save(self, out_dir: str | os.PathLike) -> Path:
        """``context_encoder/``, ``memory_encoder/`` (HF format, each with the tokenizer), ``retriever.json``."""
        out = Path(out_dir)
        for name, enc in (("context_encoder", self.context_encoder), ("memory_encoder", self.memory_encoder)):
            enc.save_pretrained(out / name)
            self.tokenizer.save_pretrained(out / name)
        saved = asdict(self.config) | {"model": str(out / "context_encoder")}
        (out / CONFIG_FILE).write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")
        return out

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "DualEncoder":
        from transformers import AutoModel, AutoTokenizer

        d = Path(directory)
        if not (d / CONFIG_FILE).exists():
            raise ConfigError(f"{d} is not a saved EMMA retriever (no {CONFIG_FILE}).")
        config = RetrieverConfig(**json.loads((d / CONFIG_FILE).read_text(encoding="utf-8")))
        return cls(AutoModel.from_pretrained(d / "context_encoder", dtype=torch.float32),
                   AutoModel.from_pretrained(d / "memory_encoder", dtype=torch.float32),
                   AutoTokenizer.from_pretrained(d / "context_encoder"), config)


# --- examples from tagged turns ----------------------------------------------------------------------

@dataclass(frozen=True)
class RetrievalExample:
    """One retrieval problem: a tagged turn's (memory_tags) or a question's (questions, session_questions)."""

    context: str                    # E_c's input: the dialogue so far (formats.GenerationInput.context) or a question
    positives: tuple[str, ...]      # the memory sentences the turn is tagged with, or the question's evidence turns
    candidates: tuple[str, ...]     # memory sentences (or turns) a retriever chooses from (positives included)
    episode_id: str
    turn_id: str                    # the tagged turn's id, or the question's id

    @property
    def negatives(self) -> tuple[str, ...]:
        return tuple(c for c in self.candidates if c not in self.positives)


def retrieval_examples(episodes: Iterable[Episode], fmt: FormatConfig | None = None,
                       fallback_to_episode: bool = True) -> list[RetrievalExample]:
    """One example per main-speaker turn with memory tags.

    Candidates are the owner's memories written at the end of earlier sessions; with
    ``fallback_to_episode`` (training), a turn whose only candidates are its positives takes the
    episode's other memories as candidates instead, so that it still yields a triplet.
    """
    fmt = fmt or FormatConfig()
    out = []
    for episode in episodes:
        view = EpisodeView(episode, fmt)
        owned = sorted((m for m in view.memory if view.owned(m)), key=view.order.__getitem__)
        for session in episode.sessions:
            available = [m for m in owned if view.order[m][0] < session.index]
            for pos, turn in enumerate(session.turns):
                if turn.speaker != view.owner or not turn.memory_tags:
                    continue
                tags = [m for m in turn.memory_tags if m in view.memory]
                candidates = available
                if fallback_to_episode and not set(candidates) - set(tags):
                    candidates = owned
                context = view.generation_input(session, pos, []).context()
                out.append(RetrievalExample(context, tuple(view.rendered(m) for m in tags),
                                            tuple(view.rendered(m) for m in candidates), episode.id, turn.id))
    return out


def turn_text(speaker: str, text: str) -> str:
    """A turn as the turn retrievers index it: ``"Wren: I collect old maps."`` (the memory tower's input for
    question examples; pipelines.memory.turn_store.TurnItem.indexed_text with ``include_speaker``)."""
    return f"{speaker}: {text}"


def question_examples(episodes: Iterable[Episode], sessions: bool = False) -> list[RetrievalExample]:
    """One example per answerable question with evidence: context = the question, candidates = every turn of
    the episode's sessions before the question's session (all sessions when ``session_id`` is None), rendered
    by :func:`turn_text`, so that a trained model's negatives are the same conversation's other turns.

    ``sessions`` False ("questions"): the queries with turn evidence (LoCoMo, LongMemEval's has_answer turns,
    the synthetic data); the positives are those evidence turns that lie among the candidates.

    ``sessions`` True ("session_questions"): the queries with session evidence only (RealMem); the positives
    are the main speaker's turns of the evidence sessions, the partner's turns of those sessions are left out of
    the candidates (neither evidence nor counter-evidence). This is session-level supervision read as turns:
    it teaches "this session holds the answer", which is what RealMem scores, but a session's small talk
    ("hi, how are you?") becomes a positive too, so it is a separate kind, off by default.

    Abstention questions, questions whose session is not in the episode, and questions none of whose evidence
    was said before them (RealMem's ``evidence_not_earlier``) give no example.
    """
    out = []
    for episode in episodes:
        order = sorted(episode.sessions, key=lambda s: s.index)
        position = {s.id: i for i, s in enumerate(order)}
        for query in episode.queries:
            if query.abstention or (query.session_id is not None and query.session_id not in position):
                continue
            if sessions == bool(query.evidence_turns) or (sessions and not query.evidence_sessions):
                continue
            earlier = order if query.session_id is None else order[:position[query.session_id]]
            if sessions:
                turns, wanted = _session_evidence(earlier, set(query.evidence_sessions), episode.main_speaker)
            else:
                turns = [t for s in earlier for t in s.turns]
                wanted = set(query.evidence_turns)
            example = _example(query.question, turns, wanted, episode.id, query.id)
            if example is not None:
                out.append(example)
    return out


def _session_evidence(earlier: Sequence, evidence: set[str], main_speaker: str) -> tuple[list, set[str]]:
    """(the candidate turns of ``earlier`` sessions, the ids of the positives) when the evidence is sessions: the
    main speaker's turns of an evidence session are positives, the partner's turns there neither."""
    turns = [(s, t) for s in earlier for t in s.turns if s.id not in evidence or t.speaker == main_speaker]
    return [t for _, t in turns], {t.id for s, t in turns if s.id in evidence}


def _example(context: str, turns: Sequence, wanted: set[str], episode_id: str, example_id: str
             ) -> RetrievalExample | None:
    """The example of ``context`` over the candidate ``turns``, those whose ids are ``wanted`` its positives
    (rendered by :func:`turn_text`); None when none is."""
    positives = tuple(dict.fromkeys(turn_text(t.speaker, t.text) for t in turns if t.id in wanted))
    if not positives:
        return None
    candidates = tuple(dict.fromkeys(turn_text(t.speaker, t.text) for t in turns))
    return RetrievalExample(context, positives, candidates, episode_id, example_id)


def thread_examples(episodes: Iterable[Episode], embed=None, opening: int = 4, min_cos: float = 0.4,
                    min_margin: float = 0.1) -> list[RetrievalExample]:
    """Pairs mined without labels from a user's own history ("thread_pairs"; issue #47, point 3): a session that
    continues an earlier one, by content alone (:func:`pipelines.threads.link` over the vectors of ``embed``, the
    shipped MiniLM by default: its opening's mean against each earlier session's centroid, at least ``min_cos`` and
    ``min_margin`` above the mean), gives one example. Its first main-speaker turn is the question (a user coming
    back: "About that checklist..."), the main speaker's turns of the session it continues are the positives, and
    every turn of the sessions before it the candidates (the positives' partner turns left out, as
    ``session_questions``): RealMem's supervision, read off unlabelled logs. No query, evidence or identifier of
    the data is read, so any multi-session file (a user's own) adapts a model this way.
    """
    import numpy as np

    from pipelines.threads import link, session_vectors

    if embed is None:
        from pipelines.models.embeddings import DEFAULT_CACHE_DIR, Embedder, EmbeddingCache, load_encoder

        embed = Embedder(load_encoder(), cache=EmbeddingCache(DEFAULT_CACHE_DIR)).embed
    out = []
    for episode in episodes:
        order = [s for s in sorted(episode.sessions, key=lambda s: s.index) if s.turns]
        if len(order) < 2:
            continue
        texts = [turn_text(t.speaker, t.text) for s in order for t in s.turns]
        session_of = np.repeat(np.arange(len(order)), [len(s.turns) for s in order])            # (N,)
        openings, centroids = session_vectors(np.asarray(embed(texts), dtype=np.float64), session_of, len(order),
                                              opening)                                          # (S, D) each
        for p in range(1, len(order)):
            parent, _ = link(openings[p], centroids[:p], None, 0.0, min_cos, min_margin)
            first = next((t for t in order[p].turns if t.speaker == episode.main_speaker and t.text.strip()), None)
            if parent < 0 or first is None:
                continue
            turns, wanted = _session_evidence(order[:p], {order[parent].id}, episode.main_speaker)
            example = _example(first.text, turns, wanted, episode.id, f"{order[p].id}:thread")
            if example is not None:
                out.append(example)
    return out


def examples_of(kind: str, episodes: Sequence[Episode], fmt: FormatConfig | None = None,
                training: bool = False) -> list[RetrievalExample]:
    """The examples of one ``RetrieverConfig.pairs`` kind; ``training`` lets a tagged turn without earlier
    memories take the episode's other memories as negatives (:func:`retrieval_examples`)."""
    if kind == "memory_tags":
        return retrieval_examples(episodes, fmt, fallback_to_episode=training)
    if kind in ("questions", "session_questions"):
        return question_examples(episodes, sessions=kind == "session_questions")
    if kind == "thread_pairs":
        return thread_examples(episodes)
    raise ConfigError(f"unknown retriever example kind {kind!r}; known: {list(PAIRS)}.")


def encode_longest_first(encode, texts: Sequence[str], batch_size: int) -> torch.Tensor:
    """``encode`` (a tower's ``texts -> (B, H)``) over ``texts`` longest first in batches of ``batch_size``, so
    that a batch holds texts of similar length and pads little (as the dense strategy's encoders batch); the
    unit vectors (N, H) in the order of ``texts``."""
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    parts = [encode([texts[i] for i in order[a:a + batch_size]]) for a in range(0, len(order), batch_size)]
    longest_first = F.normalize(torch.cat(parts), dim=-1)                                    # (N, H)
    out = torch.empty_like(longest_first)
    out[order] = longest_first
    return out


@torch.no_grad()
def evaluate_retriever(model: DualEncoder, episodes: Iterable[Episode] | Sequence[RetrievalExample],
                       fmt: FormatConfig | None = None, batch_size: int = 32,
                       memory_vectors: dict[str, torch.Tensor] | None = None) -> dict[str, float]:
    """Recall@1 and MRR over tagged main-speaker turns.

    The candidates of a turn are the owner's memories written before its session; a turn counts as a hit
    at rank r when the best-ranked tagged memory is r-th (recall@1 = share of turns with r = 1, MRR = mean
    of 1/r; ties keep the candidates' time order). Turns with no tagged candidate are skipped. Returns
    ``{"recall@1", "mrr", "queries"}``. Each distinct text is encoded once, longest first, ``batch_size`` at a
    time; ``memory_vectors`` (text -> E_m(text), unit length) keeps the memory tower's vectors across calls with
    the same model (the kinds of questions of one set of episodes share their candidates).
    """
    items = list(episodes)
    examples = items if items and isinstance(items[0], RetrievalExample) else \
        retrieval_examples(items, fmt, fallback_to_episode=False)
    examples = [ex for ex in examples if set(ex.positives) & set(ex.candidates)]
    if not examples:
        return {"recall@1": 0.0, "mrr": 0.0, "queries": 0.0}
    was_training = model.training
    model.eval()
    known = {} if memory_vectors is None else memory_vectors
    memories = sorted({c for ex in examples for c in ex.candidates})
    new = [text for text in memories if text not in known]
    if new:
        known.update(zip(new, encode_longest_first(model.encode_memory, new, batch_size)))
    row = {text: i for i, text in enumerate(memories)}
    mem = torch.stack([known[text] for text in memories])                                  # (M, H)
    ctx = encode_longest_first(model.encode_context, [ex.context for ex in examples], batch_size)   # (Q, H)
    model.train(was_training)
    hits = rr = 0.0
    for q, ex in enumerate(examples):
        scores = mem[[row[c] for c in ex.candidates]] @ ctx[q]                  # (N,) cosine, eq. 1
        order = torch.argsort(scores, descending=True, stable=True).tolist()
        rank = 1 + min(order.index(i) for i, c in enumerate(ex.candidates) if c in ex.positives)
        hits += rank == 1
        rr += 1.0 / rank
    n = len(examples)
    return {"recall@1": hits / n, "mrr": rr / n, "queries": float(n)}


# --- the training task (the engine's TrainTask protocol) ----------------------------------------------

@dataclass(frozen=True)
class TripletItem:
    """One training item: a context, one positive memory, the negatives to mine from."""

    context: str
    positive: str
    negatives: tuple[str, ...]


def triplet_items(examples: Sequence[RetrievalExample], max_negatives: int, seed: int) -> list[TripletItem]:
    """One item per (tagged turn, positive); at most ``max_negatives`` negatives each (seeded subset)."""
    rng = random.Random(f"emma-retriever-negatives:{seed}")
    items = []
    for ex in examples:
        negatives = list(ex.negatives)
        if not negatives:
            continue
        if len(negatives) > max_negatives:
            negatives = rng.sample(negatives, max_negatives)
        items += [TripletItem(ex.context, p, tuple(negatives)) for p in ex.positives]
    return items


class RetrieverTask:
    """``emma_retriever`` for the training engine (pipelines.training.train): data, collate, triplet loss."""

    paper = "EMMA (arXiv 2410.02503), section 4.2 and Appendix E.2: dual encoder, triplet loss on cosine distance"

    def __init__(self, config: RetrieverConfig, train_episodes: Sequence[Episode],
                 valid_episodes: Sequence[Episode] = (), fmt: FormatConfig | None = None):
        from pipelines.models.tokenizers import load_tokenizer

        self.config, self.fmt = config, fmt or FormatConfig()
        # the examples of every kind in config.pairs, in that order (pipelines.training shuffles them)
        train = {kind: examples_of(kind, train_episodes, self.fmt, training=True) for kind in config.pairs}
        self.counts = {kind: len(examples) for kind, examples in train.items()}   # training examples per kind
        self.train_examples = [ex for examples in train.values() for ex in examples]
        self.valid_examples = [ex for kind in config.pairs
                               for ex in examples_of(kind, valid_episodes, self.fmt, training=True)]
        # one triplet per (example, positive), a seeded sample of them under the caps
        self.train_items = seeded_sample(triplet_items(self.train_examples, config.max_negatives, config.seed),
                                         config.max_train_triplets, f"emma-retriever-train:{config.seed}")
        self.valid_items = seeded_sample(triplet_items(self.valid_examples, config.max_negatives, config.seed),
                                         config.max_valid_triplets, f"emma-retriever-valid:{config.seed}")
        self.counts["triplets"] = len(self.train_items)                 # what it trains on
        self.valid_queries = {kind: examples_of(kind, valid_episodes, self.fmt) for kind in config.pairs}
        self.tokenizer = load_tokenizer(config.resolved_model())
        self._rng = random.Random(f"emma-retriever-random-negative:{config.seed}")

    def build_model(self) -> DualEncoder:
        return DualEncoder.from_pretrained(self.config)

    def train_dataset(self) -> list[TripletItem]:
        return list(self.train_items)

    def valid_dataset(self) -> list[TripletItem]:
        return list(self.valid_items)

    def collate(self, items: Sequence[TripletItem]) -> dict[str, torch.Tensor]:
        """Contexts (B, Lc), positives (B, Lm), the batch's distinct negatives (P, Lm) and, per anchor,
        the pool rows of its negatives (B, K; -1 pads). With random negatives K = 1, drawn here."""
        if self.config.negative_mining != "random":
            choices = [item.negatives for item in items]
        else:
            choices = [(self._rng.choice(item.negatives),) for item in items]
        pool = sorted({n for c in choices for n in c})
        row = {text: i for i, text in enumerate(pool)}
        width = max(len(c) for c in choices)
        index = torch.full((len(items), width), -1, dtype=torch.long)
        for b, c in enumerate(choices):
            index[b, : len(c)] = torch.tensor([row[n] for n in c])
        ctx = tokenize(self.tokenizer, [i.context for i in items], self.config, "context")
        pos = tokenize(self.tokenizer, [i.positive for i in items], self.config, "memory")
        neg = tokenize(self.tokenizer, pool, self.config, "memory")
        return {"context_ids": ctx["input_ids"], "context_mask": ctx["attention_mask"],
                "memory_ids": pos["input_ids"], "memory_mask": pos["attention_mask"],
                "pool_ids": neg["input_ids"], "pool_mask": neg["attention_mask"], "negative_index": index}

    def compute_loss(self, model: DualEncoder, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Tokens]:
        """Triplet loss (margin 0.2, cosine distance) with each anchor's mined negative; the token count
        is the number of context tokens encoded with gradients."""
        anchor, positive, negative = model(**batch, mining=self.config.negative_mining)   # (B, H) each
        loss = compute_loss(anchor, positive, negative, self.config.margin)
        return loss, batch["context_mask"].sum()  # a 0-d tensor: no host sync

    def evaluate(self, model: DualEncoder) -> dict[str, float]:
        """Recall@1 and MRR on the validation episodes (candidates = memories, or turns, of earlier sessions); a
        report, not the early-stopping criterion (the engine stops on the validation triplet loss). Keys:
        ``recall@1``, ``mrr``, ``queries`` for memory_tags, prefixed ``<kind>/`` for the other kinds."""
        out = {}
        for kind, examples in self.valid_queries.items():
            prefix = "" if kind == "memory_tags" else f"{kind}/"
            out.update({f"{prefix}{k}": v for k, v in evaluate_retriever(model, examples).items()})
        return out

    def save_final(self, model: DualEncoder, out_dir: str | os.PathLike) -> Path:
        return model.save(out_dir)
