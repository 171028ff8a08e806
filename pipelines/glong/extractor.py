"""G-Long's triplet extraction module (seed 003, section 3.2 and Appendix B): prompt, strict
parsing, training examples, precision / recall / F1, and greedy inference.

A small LM instruction-tuned with QLoRA turns one utterance into a JSON list
``[{"subject": ..., "relation": ..., "object": ...}, ...]``. The prompt is the paper's
(Appendix B):

    system:    You are an expert in Knowledge Graph Construction. Extract (subject, relation,
               object) triplets from the text and output them in JSON format.
    user:      Extract triplets from the following dialogue:
               "Speaker A: I love playing tennis on weekends."
    assistant: [{"subject": "Speaker A", "relation": "hobby", "object": "tennis"}]

An utterance without a fact is trained to give ``[]``.

Parsing never raises. Each output is classified as
- ``valid``: the whole output is a JSON list of well-formed triplet objects (``[]`` included);
- ``repaired``: triplets were recovered after a fix (text around the JSON, a single object
  instead of a list, trailing commas, single quotes, a truncated list, a non-string scalar value,
  some malformed items dropped);
- ``dropped``: nothing usable; the utterance yields no triplet.

Metrics (section 4 / Appendix G of the project report): micro precision, recall and F1 of exact
matches of normalised (subject, relation, object) — case-folded, whitespace collapsed, "_" in
relations read as a space — with duplicates within an utterance counted once.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from pipelines.data.sampling import evenly_spaced, seeded_sample
from pipelines.data.schema import Episode, Triplet
from pipelines.llm.base import PLAIN_TEMPLATE  # the plain layout of a prompt for a tokenizer without a chat template

SYSTEM_INSTRUCTION = ("You are an expert in Knowledge Graph Construction. Extract (subject, relation, "
                      "object) triplets from the text and output them in JSON format.")
USER_TEMPLATE = 'Extract triplets from the following dialogue:\n"{speaker}: {text}"'
KEYS = ("subject", "relation", "object")
STATUSES = ("valid", "repaired", "dropped")
EVAL_FILE = "extraction_eval.json"   # the glong_extractor stage's scores, in the model folder (the report reads it)


# --- prompt ------------------------------------------------------------------------------------

def user_message(speaker: str, text: str) -> str:
    return USER_TEMPLATE.format(speaker=speaker, text=text)


def render_prompt(speaker: str, text: str, tokenizer=None) -> str:
    """The prompt text: the tokenizer's chat template when it has one, else a plain layout."""
    user = user_message(speaker, text)
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        messages = [{"role": "system", "content": SYSTEM_INSTRUCTION},
                    {"role": "user", "content": user}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return PLAIN_TEMPLATE.format(system=SYSTEM_INSTRUCTION, user=user)


def target_json(triplets: Sequence[Triplet]) -> str:
    """The assistant's answer: a JSON list in the key order of the paper's example."""
    return json.dumps([{k: getattr(t, k) for k in KEYS} for t in triplets], ensure_ascii=False)


# --- strict parsing with repair ----------------------------------------------------------------

@dataclass
class ParseStats:
    """Counts of outputs by parse status, and of triplet items dropped inside outputs."""

    valid: int = 0
    repaired: int = 0
    dropped: int = 0
    items_dropped: int = 0

    def add(self, status: str, items_dropped: int = 0) -> None:
        setattr(self, status, getattr(self, status) + 1)
        self.items_dropped += items_dropped

    @property
    def total(self) -> int:
        return self.valid + self.repaired + self.dropped

    def to_dict(self) -> dict[str, int]:
        return {"valid": self.valid, "repaired": self.repaired, "dropped": self.dropped,
                "items_dropped": self.items_dropped}


@dataclass(frozen=True)
class Parsed:
    triplets: list[Triplet]
    status: str               # "valid" | "repaired" | "dropped"
    items_dropped: int = 0    # list items that were not well-formed triplet objects


_PARSE_ERRORS = (ValueError, SyntaxError, TypeError, RecursionError, MemoryError)
_TRAILING_COMMA = re.compile(r",\s*([\]}])")
_FLAT_OBJECT = re.compile(r"\{[^{}]*\}")


def _loads(text: str):
    """JSON, else a Python literal (single quotes); None when neither parses."""
    for load in (json.loads, ast.literal_eval):
        try:
            return load(text)
        except _PARSE_ERRORS:
            continue
    return None


def _item(obj) -> tuple[Triplet | None, bool]:
    """(triplet or None, whether a value had to be converted)."""
    if not isinstance(obj, dict) or not all(k in obj for k in KEYS):
        return None, False
    values, converted = [], False
    for k in KEYS:
        v = obj[k]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            v, converted = str(v), True
        if not isinstance(v, str) or not v.strip():
            return None, False
        values.append(" ".join(v.split()))
    return Triplet(subject=values[0], relation=values[1], object=values[2]), converted


def _items(objs: list) -> tuple[list[Triplet], int, bool]:
    triplets, bad, converted = [], 0, False
    for obj in objs:
        t, conv = _item(obj)
        if t is None:
            bad += 1
        else:
            triplets.append(t)
            converted |= conv
    return triplets, bad, converted


def parse_triplets(output: str) -> Parsed:
    """Parse one model output into triplets; never raises (see the module docstring)."""
    if not isinstance(output, str):
        return Parsed([], "dropped")
    text = output.strip()
    whole = _loads_json_only(text)
    if isinstance(whole, list):
        triplets, bad, converted = _items(whole)
        if not bad and not converted:
            return Parsed(triplets, "valid")
        return Parsed(triplets, "repaired" if triplets else "dropped", bad)
    candidates = []
    start = min([i for i in (text.find("["), text.find("{")) if i >= 0], default=-1)
    if start >= 0:
        body = text[start:]
        end = max(body.rfind("]"), body.rfind("}"))
        for piece in (body[:end + 1] if end >= 0 else body, body):
            fixed = _TRAILING_COMMA.sub(r"\1", piece)
            candidates.append(fixed)
            cut = fixed.rfind("}")          # a truncated list: close it after the last object
            if fixed.startswith("[") and cut >= 0:
                candidates.append(fixed[:cut + 1] + "]")
    for candidate in candidates:
        obj = _loads(candidate)
        if isinstance(obj, dict):
            obj = [obj]
        if isinstance(obj, list):
            triplets, bad, _ = _items(obj)
            if triplets or not obj:             # recovered triplets, or an explicit "[]"
                return Parsed(triplets, "repaired", bad)
    objs = [_loads(m) for m in _FLAT_OBJECT.findall(text)]   # last resort: object by object
    triplets, bad, _ = _items([o for o in objs if o is not None])
    bad += sum(o is None for o in objs)
    if triplets:
        return Parsed(triplets, "repaired", bad)
    return Parsed([], "dropped", bad)


def _loads_json_only(text: str):
    try:
        return json.loads(text)
    except _PARSE_ERRORS:
        return None


# --- metrics -----------------------------------------------------------------------------------

def normalise(t: Triplet) -> tuple[str, str, str]:
    """Case-folded, whitespace-collapsed (s, r, o); "_" in the relation is read as a space."""
    def norm(x: str) -> str:
        return " ".join(x.split()).casefold()

    return norm(t.subject), norm(t.relation.replace("_", " ")), norm(t.object)


@dataclass(frozen=True)
class TripletScores:
    precision: float
    recall: float
    f1: float
    true_positives: int
    predicted: int
    gold: int

    def to_dict(self, prefix: str = "triplet_") -> dict[str, float]:
        return {f"{prefix}precision": self.precision, f"{prefix}recall": self.recall,
                f"{prefix}f1": self.f1, f"{prefix}predicted": float(self.predicted),
                f"{prefix}gold": float(self.gold)}


def triplet_prf(predicted: Sequence[Sequence[Triplet]], gold: Sequence[Sequence[Triplet]]
                ) -> TripletScores:
    """Micro P/R/F1 over utterances (aligned lists), exact match on normalised triplets."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted lists for {len(gold)} gold lists")
    tp = n_pred = n_gold = 0
    for p, g in zip(predicted, gold):
        ps, gs = {normalise(t) for t in p}, {normalise(t) for t in g}
        tp += len(ps & gs)
        n_pred += len(ps)
        n_gold += len(gs)
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return TripletScores(precision, recall, f1, tp, n_pred, n_gold)


# --- training examples -------------------------------------------------------------------------

@dataclass(frozen=True)
class ExtractionExample:
    """One utterance with its gold triplets (PersonaExt through its loader, or synthetic)."""

    id: str                     # "<episode id>/<turn id>"
    speaker: str
    text: str
    triplets: list[Triplet] = field(default_factory=list)

    @property
    def target(self) -> str:
        return target_json(self.triplets)


def extraction_examples(episodes: Iterable[Episode], include_empty: bool = True
                        ) -> list[ExtractionExample]:
    """One example per turn; turns without triplets give "[]" targets when ``include_empty``."""
    out = []
    for episode in episodes:
        for _, turn in episode.turns():
            if turn.triplets or include_empty:
                out.append(ExtractionExample(f"{episode.id}/{turn.id}", turn.speaker, turn.text,
                                             list(turn.triplets)))
    return out


SPLITS = ("train", "valid", "test")


def normalise_utterance(text: str) -> str:
    """Case-folded words (letters and digits), single-spaced: "I love cats!" and "i love cats ." are one."""
    return " ".join(re.sub(r"[^\w\s]|_", " ", text.casefold()).split())


def utterance_split(text: str, valid_share: float, test_share: float) -> str:
    """"train", "valid" or "test" from a hash of the normalised utterance: deterministic, whatever the order or
    the process, so the same utterance text lands in one split wherever it appears."""
    digest = hashlib.sha256(normalise_utterance(text).encode("utf-8")).digest()
    u = int.from_bytes(digest[:8], "big") / 2 ** 64          # uniform in [0, 1)
    return "test" if u < test_share else "valid" if u < test_share + valid_share else "train"


def split_by_utterance(examples: Iterable[ExtractionExample], valid_share: float, test_share: float
                       ) -> dict[str, list[ExtractionExample]]:
    """Examples of one dataset into train / valid / test by :func:`utterance_split`, in their order.

    Examples of the same normalised utterance become one (the first's id and text, every distinct triplet), so an
    utterance is scored against all its annotated triplets, once.
    """
    merged: dict[str, ExtractionExample] = {}
    for e in examples:
        key = normalise_utterance(e.text)
        if key not in merged:
            merged[key] = ExtractionExample(e.id, e.speaker, e.text, list(e.triplets))
            continue
        seen = {normalise(t) for t in merged[key].triplets}
        merged[key].triplets.extend(t for t in e.triplets if normalise(t) not in seen)
    out: dict[str, list[ExtractionExample]] = {split: [] for split in SPLITS}
    for key, e in merged.items():
        out[utterance_split(key, valid_share, test_share)].append(e)
    return out


def sample_datasets(datasets: Sequence[Sequence[ExtractionExample]], limit: int | None, seed: int
                    ) -> list[ExtractionExample]:
    """At most ``limit`` examples of several datasets, shared equally (a dataset with fewer gives its share to the
    others): 19,000 PersonaExt utterances do not crowd out 960 synthetic ones. Each a
    :func:`~pipelines.data.sampling.seeded_sample`."""
    if limit is None:
        return [e for examples in datasets for e in examples]
    shares, left = [0] * len(datasets), limit
    for rank, i in enumerate(sorted(range(len(datasets)), key=lambda i: len(datasets[i]))):
        shares[i] = min(len(datasets[i]), left // (len(datasets) - rank))
        left -= shares[i]
    return [e for examples, n in zip(datasets, shares) for e in seeded_sample(examples, n, seed)]


def evaluation_examples(examples: Sequence[ExtractionExample], limit: int) -> list[ExtractionExample]:
    """At most ``limit`` examples to score: half with facts (recall) and half fact-free (precision) where both
    are there, the other kind filling in otherwise; each kind evenly spaced over the split."""
    facts = [e for e in examples if e.triplets]
    empty = [e for e in examples if not e.triplets]
    n_facts = min(len(facts), max(limit // 2, limit - len(empty)))
    return evenly_spaced(facts, n_facts) + evenly_spaced(empty, min(len(empty), limit - n_facts))


# --- greedy inference --------------------------------------------------------------------------

class TripletExtractor:
    """Greedy decoding of a (QLoRA-tuned) causal or seq2seq LM, parsed strictly.

    Called with (speaker, utterance) pairs, returns one triplet list per pair: the ``Extractor``
    the graph memory strategy takes. ``stats`` accumulates parse statuses.
    """

    def __init__(self, model, tokenizer, *, max_new_tokens: int = 128, batch_size: int = 16):
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.is_seq2seq = bool(getattr(model.config, "is_encoder_decoder", False))
        # Prompt tokens that fit: a causal LM's positions hold the prompt and the new tokens.
        positions = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", None)
        self.max_prompt_tokens = (max(positions - max_new_tokens, 16) if positions and not self.is_seq2seq
                                  else 1024)
        self.stats = ParseStats()

    def generate(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        import torch

        tok = self.tokenizer
        outputs: list[str] = []
        device = next(self.model.parameters()).device
        self.model.eval()
        for start in range(0, len(pairs), self.batch_size):
            prompts = [render_prompt(s, t, tok) for s, t in pairs[start:start + self.batch_size]]
            side, cut = tok.padding_side, tok.truncation_side
            tok.padding_side = "right" if self.is_seq2seq else "left"  # causal: prompts end together
            tok.truncation_side = "left"  # an over-long prompt keeps its end (utterance, answer cue)
            try:
                enc = tok(prompts, return_tensors="pt", padding=True, truncation=True,
                          max_length=self.max_prompt_tokens).to(device)
            finally:
                tok.padding_side, tok.truncation_side = side, cut
            with torch.no_grad():
                gen = self.model.generate(**enc, max_new_tokens=self.max_new_tokens,
                                          do_sample=False, num_beams=1,
                                          pad_token_id=tok.pad_token_id)      # (B, T')
            new = gen if self.is_seq2seq else gen[:, enc["input_ids"].shape[1]:]
            outputs.extend(tok.batch_decode(new, skip_special_tokens=True))
        return outputs

    def parse(self, pairs: Sequence[tuple[str, str]]) -> list[Parsed]:
        """Each pair's output, parsed (counted in ``stats``)."""
        result = []
        for text in self.generate(list(pairs)):
            parsed = parse_triplets(text)
            self.stats.add(parsed.status, parsed.items_dropped)
            result.append(parsed)
        return result

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[list[Triplet]]:
        return [parsed.triplets for parsed in self.parse(pairs)]


def extraction_scores(parsed: Sequence[Parsed], gold: Sequence[Sequence[Triplet]]) -> dict[str, float]:
    """Triplet P/R/F1 of parsed outputs against the gold lists, plus their parse counts."""
    scores = triplet_prf([p.triplets for p in parsed], gold)
    statuses = Counter(p.status for p in parsed)
    counts = {f"parse_{k}": float(statuses[k]) for k in STATUSES}
    counts["parse_items_dropped"] = float(sum(p.items_dropped for p in parsed))
    return {**scores.to_dict(), **counts}


def evaluate_extractor(extractor: TripletExtractor, examples: Sequence[ExtractionExample]
                       ) -> dict[str, float]:
    """Triplet P/R/F1 on ``examples`` plus the parse counters of this evaluation."""
    parsed = extractor.parse([(e.speaker, e.text) for e in examples])
    return extraction_scores(parsed, [e.triplets for e in examples])


def extraction_table(scores: dict[str, float]) -> str:
    """The scores of :func:`pipelines.glong.stage.extraction_scores_by_source` as a markdown table: a row per dataset and model."""
    prefixes = dict.fromkeys(k.removesuffix("triplet_f1") for k in scores if k.endswith("triplet_f1"))
    figures = ("triplet_precision", "triplet_recall", "triplet_f1")
    counts = ("triplet_predicted", "triplet_gold", "parse_valid", "parse_repaired", "parse_dropped")
    lines = ["| held back | model | precision | recall | F1 | predicted | gold | parsed valid | repaired | dropped |",
             "| --- | --- |" + " ---: |" * (len(figures) + len(counts))]
    for prefix in prefixes:
        dataset = prefix.removesuffix("zero_shot/").removesuffix("/") or "all"
        model = "zero-shot base" if prefix.endswith("zero_shot/") else "fine-tuned"
        values = [f"{scores[prefix + k]:.3f}" for k in figures] + [f"{scores[prefix + k]:.0f}" for k in counts]
        lines.append(f"| {dataset} | {model} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"
