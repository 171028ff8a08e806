"""The MDR generator as a benchmark strategy: responses on the test split, scored like the paper.

MDR (seed 001, Table 2) reports BLEU-1, ROUGE-L and Distinct-1/2 on ConvAI2. Responses here are
generated greedily from the distilled feature R^(K) and the query Q (the decoder never sees R);
S-Dist draws 5 sampled responses per context. The published ConvAI2 figures are shown beside ours
with the profile, so tiny-model figures are never read as paper figures.

Two entry points share the generation and scoring (:func:`generate_and_score`):

- :func:`evaluate_mdr` (the Dagster benchmark stage, synthetic data): R^(K) is read from the cache
  the student stage wrote for the examples it saw (by example id);
- :func:`evaluate_mdr_episodes` (a benchmark suite's ``generation: [mdr]``, any canonical data):
  the (P, H, Q, R) examples are built from the suite's episodes with the trained model's own
  ``max_history_rounds`` / ``memory_persona`` (its ``mdr_config.json``) and R^(K) is computed with
  the trained student around the frozen teacher, as the student stage computes its cache.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import fields
from pathlib import Path
from typing import Callable, Sequence

from pipelines.data.sampling import evenly_spaced

PAPER_CONVAI2 = {"bleu-1": 19.40, "rouge-l": 19.34}  # MDR, Table 2 (ConvAI2), GPT-2 backbone
TEACHER_STAGE, STUDENT_STAGE, DECODER_STAGE = "mdr_teacher", "mdr_student", "mdr_decoder"
GENERATION_BATCH = 32  # generate_responses' batch size: progress is reported per batch of this size


def session_number(session_id: str, index: dict[str, int]) -> int | None:
    """1-based session number of ``session_id`` (from the episodes' Session.index)."""
    return index[session_id] + 1 if session_id in index else None


def _generate(decoder, codec, queries: Sequence[str], feats, progress: Callable[[int], None] | None,
              seed: int | None = None, **kwargs) -> list[str]:
    """``generate_responses`` batch by batch (the same batches and per-batch seeds as one call)."""
    from pipelines.mdr.decoder import generate_responses

    if progress is None:
        return generate_responses(decoder, codec, queries, feats, seed=seed, **kwargs)
    out: list[str] = []
    for start in range(0, len(queries), GENERATION_BATCH):
        chunk = list(queries[start:start + GENERATION_BATCH])
        out += generate_responses(decoder, codec, chunk, feats[start:start + GENERATION_BATCH],
                                  seed=None if seed is None else seed + start, batch_size=GENERATION_BATCH,
                                  **kwargs)
        progress(len(chunk))
    return out


def generate_and_score(decoder, codec, examples: Sequence, feats, *, max_new_tokens: int = 32, samples: int = 5,
                       sample_contexts: int | None = 32, session_index: dict[str, int] | None = None,
                       seed: int = 2022, max_query_tokens: int = 64, session_sdist: bool = False,
                       progress: Callable[[int], None] | None = None) -> dict:
    """Greedy responses of ``decoder`` to the examples' queries given R^(K) ``feats`` (N, H), scored
    against the examples' responses (:func:`pipelines.text_metrics.generation_metrics`).

    S-Dist: ``samples`` sampled responses (top-k 50, seeds ``seed + 1000 s``) for the first
    ``sample_contexts`` examples (None: every one); ``session_sdist`` also scores S-Dist per
    session over that session's sampled contexts. ``progress(n)`` is called after each batch of
    n generations (``len(examples) + samples * sampled contexts`` in all).
    Returns ``{"overall": metrics, "by_session": {n: metrics}, "examples": [first 5]}``.
    """
    from pipelines.text_metrics import generation_metrics

    queries = [e.query for e in examples]
    hyps = _generate(decoder, codec, queries, feats, progress, max_new_tokens=max_new_tokens,
                     max_query_tokens=max_query_tokens)
    refs = [e.response for e in examples]
    n = len(examples) if sample_contexts is None else min(sample_contexts, len(examples))
    sampled = [_generate(decoder, codec, queries[:n], feats[:n], progress, max_new_tokens=max_new_tokens,
                         max_query_tokens=max_query_tokens, do_sample=True, top_k=50, seed=seed + 1000 * s)
               for s in range(samples)]
    groups = [[sampled[s][i] for s in range(samples)] for i in range(n)]
    out = {"overall": generation_metrics(hyps, refs, samples=groups)}
    by: dict[int, list[int]] = defaultdict(list)
    for i, e in enumerate(examples):
        num = session_number(e.session_id, session_index or {})
        if num is not None:
            by[num].append(i)
    out["by_session"] = {num: generation_metrics([hyps[i] for i in idx], [refs[i] for i in idx],
                                                 samples=([groups[i] for i in idx if i < n] or None)
                                                 if session_sdist else None)
                         for num, idx in sorted(by.items())}
    out["examples"] = [{"query": q, "reference": r, "response": h} for q, r, h in zip(queries[:5], refs[:5], hyps[:5])]
    return out


def evaluate_mdr(decoder_dir: str | Path, student_dir: str | Path, examples: Sequence, *,
                 max_new_tokens: int = 32, samples: int = 5, sample_contexts: int = 32,
                 session_index: dict[str, int] | None = None, seed: int = 2022) -> dict:
    """Generate and score the MDR responses of ``examples`` from the student's cached R^(K).

    Returns ``{"overall": metrics, "by_session": {n: metrics}, "examples": [...]}``.
    """
    from pipelines.mdr.decoder import features_for
    from pipelines.mdr.prefix_lm import PrefixLM
    from pipelines.mdr.student import load_response_features
    from pipelines.mdr.tasks import FEATURES_FILE
    from pipelines.mdr.text import load_codec

    decoder_dir, student_dir = Path(decoder_dir), Path(student_dir)
    decoder = PrefixLM.load(decoder_dir / "decoder")
    codec = load_codec(decoder_dir / "tokenizer")
    cache_path = student_dir / FEATURES_FILE
    feats = features_for([e.id for e in examples], load_response_features(cache_path), source=str(cache_path))
    return generate_and_score(decoder, codec, examples, feats, max_new_tokens=max_new_tokens, samples=samples,
                              sample_contexts=sample_contexts, session_index=session_index, seed=seed)


# --- a suite's generation: examples from any canonical episodes ---------------------------------

def check_models(teacher_dir: str | Path | None, student_dir: str | Path | None,
                 decoder_dir: str | Path | None) -> list:
    """ModelNotTrained for each of the three MDR model folders that is not there (empty: all are)."""
    from pipelines.errors import ModelNotTrained

    wanted = (("teacher", teacher_dir, "mdr_teacher.json", TEACHER_STAGE),
              ("student", student_dir, "mdr_student.json", STUDENT_STAGE),
              ("decoder", decoder_dir, "decoder/prefix_lm.json", DECODER_STAGE))
    missing = []
    for what, folder, marker, stage in wanted:
        if folder is None:
            missing.append(ModelNotTrained(f"generation 'mdr': no MDR {what} folder given", stage=stage))
        elif not (Path(folder) / marker).is_file():
            why = "does not exist" if not Path(folder).is_dir() else f"holds no trained {what} ({marker} is missing)"
            missing.append(ModelNotTrained(f"generation 'mdr': {what} = {str(folder)!r} {why}",
                                           path=str(folder), stage=stage))
    return missing


def saved_config(model_dir: str | Path):
    """The MDRConfig a stage saved next to its model (``mdr_config.json``; unknown keys ignored)."""
    from pipelines.errors import ConfigError
    from pipelines.mdr.config import MDRConfig

    path = Path(model_dir) / "mdr_config.json"
    if not path.is_file():
        raise ConfigError(f"{path} is missing: MDR generation needs the settings the model was trained with "
                          f"(written with tokenizer/ by the mdr stages); rerun the stage.")
    settings = json.loads(path.read_text(encoding="utf-8"))
    return MDRConfig(**{f.name: settings[f.name] for f in fields(MDRConfig) if f.name in settings})


def student_features(examples: Sequence, teacher_dir: str | Path, student_dir: str | Path, *,
                     device: str = "cpu", batch_size: int = 32):
    """R^(K) (N, H) of ``examples`` from the trained student around the frozen teacher, as the
    student stage computes its cache (student items without R, eval mode, the student's saved
    settings and tokenizer), on ``device``; returned on the CPU in the examples' order."""
    import torch

    from pipelines.mdr.student import MDRStudent, response_features
    from pipelines.mdr.tasks import collate_student, student_item
    from pipelines.mdr.teacher import MDRTeacher
    from pipelines.mdr.text import load_codec

    student_dir = Path(student_dir)
    cfg = saved_config(student_dir)
    codec = load_codec(student_dir / "tokenizer", eos_token=cfg.eos_token, sep_token=cfg.sep_token)
    teacher = MDRTeacher.load(teacher_dir)
    student = MDRStudent.load(student_dir, teacher.encoder).to(device)
    items = [student_item(e, codec, cfg, with_response=False) for e in examples]
    cache = response_features(student, items, [e.id for e in examples],
                              collate=lambda batch: collate_student(batch, codec.pad_id), batch_size=batch_size)
    return torch.stack([cache[e.id] for e in examples])                        # (N, H)


def evaluate_mdr_episodes(episodes: Sequence, teacher_dir: str | Path, student_dir: str | Path,
                          decoder_dir: str | Path, *, max_examples: int | None = 200, max_new_tokens: int = 32,
                          samples: int = 5, seed: int = 2022, device: str | None = None, batch_size: int = 32,
                          source: str | None = None, progress_factory: Callable[[int], Callable] | None = None
                          ) -> dict:
    """MDR's response generation on canonical ``episodes`` (a benchmark suite's data).

    Builds the (P, H, Q, R) examples (:func:`pipelines.data.tasks.build_mdr_examples`) with the
    student's saved ``max_history_rounds`` / ``memory_persona``, keeps at most ``max_examples``
    (:func:`pipelines.data.sampling.evenly_spaced`), computes R^(K) with the trained student around the frozen teacher
    (eval mode, without reading R), then generates and scores exactly as :func:`evaluate_mdr`
    (S-Dist over every kept example, also per session). Raises ModelNotTrained (stage named) when a
    model folder is missing. ``progress_factory(total)`` returns a callable advanced by the number
    of generations done. Returns :func:`generate_and_score`'s dict plus ``"examples_total"`` (the
    rounds in the data), ``"examples_scored"``, ``"samples"`` and ``"sessions"`` (session number -> examples).
    """
    import torch

    from pipelines.data.tasks import build_mdr_examples
    from pipelines.mdr.prefix_lm import PrefixLM
    from pipelines.mdr.text import load_codec

    missing = check_models(teacher_dir, student_dir, decoder_dir)
    if missing:
        raise missing[0]
    teacher_dir, student_dir, decoder_dir = Path(teacher_dir), Path(student_dir), Path(decoder_dir)
    cfg = saved_config(student_dir)
    all_examples = build_mdr_examples(episodes, max_history_rounds=cfg.max_history_rounds,
                                      memory_persona=cfg.memory_persona, source=source)
    examples = evenly_spaced(all_examples, max_examples)
    index = {s.id: s.index for e in episodes for s in e.sessions}
    out_extra = {"examples_total": len(all_examples), "examples_scored": len(examples)}
    if not examples:
        return {"overall": {}, "by_session": {}, "examples": [], "sessions": {}, **out_extra}
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")

    feats = student_features(examples, teacher_dir, student_dir, device=device, batch_size=batch_size)

    dec_cfg = saved_config(decoder_dir)
    decoder = PrefixLM.load(decoder_dir / "decoder").to(device)
    dec_codec = load_codec(decoder_dir / "tokenizer", eos_token=dec_cfg.eos_token, sep_token=dec_cfg.sep_token)
    progress = progress_factory(len(examples) * (1 + samples)) if progress_factory else None
    result = generate_and_score(decoder, dec_codec, examples, feats, max_new_tokens=max_new_tokens,
                                samples=samples, sample_contexts=None, session_index=index, seed=seed,
                                max_query_tokens=dec_cfg.max_query_tokens, session_sdist=True, progress=progress)
    counts: dict[int, int] = defaultdict(int)
    for e in examples:
        num = session_number(e.session_id, index)
        if num is not None:
            counts[num] += 1
    return {**result, "sessions": dict(sorted(counts.items())), "samples": samples, **out_extra}
