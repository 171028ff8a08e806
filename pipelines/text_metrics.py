"""Response-generation metrics, from the libraries that define them.

- BLEU-n (n = 1..4): sacrebleu's corpus BLEU with ``max_ngram_order = n`` (uniform weights over
  1..n-grams, brevity penalty, 13a tokenisation), on a 0-100 scale as MDR and G-Long report it.
- ROUGE-L: rouge-score's ``rougeL`` F-measure per response, averaged, x100.
- Distinct-n (Li et al., 2016): distinct n-grams / all n-grams. ``dist-n`` is computed over the whole
  set of responses (the usual corpus figure); ``c_dist-n`` is the mean over responses of each
  response's own ratio (C-Dist); ``s_dist-n`` is, per context, the ratio over several sampled
  responses to that context, averaged over contexts (S-Dist).

:func:`by_session` scores responses overall and per session number. Used by the benchmark, MDR's evaluation and
G-Long's summariser; what EMMA generates under the temporal protocol is composed by
:func:`pipelines.evaluate.generation.temporal_generation_inputs`.
"""

from __future__ import annotations

from typing import Sequence

from pipelines.errors import ConfigError


def _tokens(text: str) -> list[str]:
    return text.lower().split()


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


def distinct(texts: Sequence[str], n: int) -> float:
    """Distinct n-grams over all n-grams of ``texts`` taken together (0 when there are none)."""
    grams = [g for t in texts for g in ngrams(_tokens(t), n)]
    return len(set(grams)) / len(grams) if grams else 0.0


def bleu(hypotheses: Sequence[str], references: Sequence[str], n: int) -> float:
    """Corpus BLEU-n on 0-100 (sacrebleu)."""
    from sacrebleu.metrics import BLEU

    if len(hypotheses) != len(references):
        raise ConfigError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        return 0.0
    return float(BLEU(max_ngram_order=n, effective_order=True).corpus_score(list(hypotheses), [list(references)]).score)


def rouge_l(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Mean ROUGE-L F-measure on 0-100 (rouge-score, with stemming)."""
    from rouge_score import rouge_scorer

    if not hypotheses:
        return 0.0
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    scores = [scorer.score(ref, hyp)["rougeL"].fmeasure for hyp, ref in zip(hypotheses, references)]
    return 100.0 * sum(scores) / len(scores)


def generation_metrics(hypotheses: Sequence[str], references: Sequence[str],
                       samples: Sequence[Sequence[str]] | None = None) -> dict[str, float]:
    """BLEU-1..4, ROUGE-L, dist-1/2, c_dist-1/2 and (with ``samples``) s_dist-1/2."""
    out = {f"bleu-{n}": bleu(hypotheses, references, n) for n in (1, 2, 3, 4)}
    out["rouge-l"] = rouge_l(hypotheses, references)
    for n in (1, 2):
        out[f"dist-{n}"] = distinct(hypotheses, n)
        per = [distinct([h], n) for h in hypotheses]
        out[f"c_dist-{n}"] = sum(per) / len(per) if per else 0.0
        if samples:
            s = [distinct(group, n) for group in samples]
            out[f"s_dist-{n}"] = sum(s) / len(s)
    out["responses"] = float(len(hypotheses))
    return out


def by_session(hypotheses: Sequence[str], references: Sequence[str],
               sessions: Sequence[int | None]) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
    """:func:`generation_metrics` over all responses and per session number (responses whose session is
    None count in the overall figures only); sessions in increasing order."""
    if not len(hypotheses) == len(references) == len(sessions):
        raise ConfigError(f"{len(hypotheses)} hypotheses, {len(references)} references, {len(sessions)} sessions")
    overall = generation_metrics(hypotheses, references)
    per: dict[int, dict[str, float]] = {}
    for num in sorted({s for s in sessions if s is not None}):
        idx = [i for i, s in enumerate(sessions) if s == num]
        per[num] = generation_metrics([hypotheses[i] for i in idx], [references[i] for i in idx])
    return overall, per
