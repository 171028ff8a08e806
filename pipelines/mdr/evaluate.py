"""The MDR generator as a benchmark strategy: responses on the test split, scored like the paper.

MDR (seed 001, Table 2) reports BLEU-1, ROUGE-L and Distinct-1/2 on ConvAI2. Responses here are
generated greedily from the cached distilled feature R^(K) and the query Q (the decoder never
sees R); S-Dist draws 5 sampled responses per context. The published ConvAI2 figures are shown
beside ours with the profile, so tiny-model figures are never read as paper figures.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Sequence

PAPER_CONVAI2 = {"bleu-1": 19.40, "rouge-l": 19.34}  # MDR, Table 2 (ConvAI2), GPT-2 backbone


def session_number(session_id: str, index: dict[str, int]) -> int | None:
    """1-based session number of ``session_id`` (from the episodes' Session.index)."""
    return index[session_id] + 1 if session_id in index else None


def evaluate_mdr(decoder_dir: str | Path, student_dir: str | Path, examples: Sequence, *,
                 max_new_tokens: int = 32, samples: int = 5, sample_contexts: int = 32,
                 session_index: dict[str, int] | None = None, seed: int = 2022) -> dict:
    """Generate and score the MDR responses of ``examples``.

    Returns ``{"overall": metrics, "by_session": {n: metrics}, "examples": [...]}``.
    """
    from pipelines.evaluate.generation import generation_metrics
    from pipelines.mdr.decoder import features_for, generate_responses
    from pipelines.mdr.prefix_lm import PrefixLM
    from pipelines.mdr.student import load_response_features
    from pipelines.mdr.tasks import FEATURES_FILE
    from pipelines.mdr.text import load_codec

    decoder_dir, student_dir = Path(decoder_dir), Path(student_dir)
    decoder = PrefixLM.load(decoder_dir / "decoder")
    codec = load_codec(decoder_dir / "tokenizer")
    cache_path = student_dir / FEATURES_FILE
    feats = features_for([e.id for e in examples], load_response_features(cache_path), source=str(cache_path))
    queries = [e.query for e in examples]
    hyps = generate_responses(decoder, codec, queries, feats, max_new_tokens=max_new_tokens)
    refs = [e.response for e in examples]
    n = min(sample_contexts, len(examples))
    sampled = [generate_responses(decoder, codec, queries[:n], feats[:n], max_new_tokens=max_new_tokens,
                                  do_sample=True, top_k=50, seed=seed + 1000 * s) for s in range(samples)]
    groups = [[sampled[s][i] for s in range(samples)] for i in range(n)]
    out = {"overall": generation_metrics(hyps, refs, samples=groups)}
    by: dict[int, list[int]] = defaultdict(list)
    for i, e in enumerate(examples):
        num = session_number(e.session_id, session_index or {})
        if num is not None:
            by[num].append(i)
    out["by_session"] = {num: generation_metrics([hyps[i] for i in idx], [refs[i] for i in idx])
                         for num, idx in sorted(by.items())}
    out["examples"] = [{"query": q, "reference": r, "response": h} for q, r, h in zip(queries[:5], refs[:5], hyps[:5])]
    return out
