"""A tiny random cross-encoder (a 1-layer BERT with a one-logit head) saved as the reranker stage saves one."""

from __future__ import annotations

from pathlib import Path


def save_tiny_cross_encoder(root: Path, **config) -> Path:
    """In ``root / "saved"``: a :class:`~pipelines.rerank.cross_encoder.CrossEncoder` over
    :func:`tests.emma._tiny_retriever.write_tiny_encoder` (no trained_on.json: the caller says what it saw)."""
    from pipelines.rerank.cross_encoder import CrossEncoder, CrossEncoderConfig
    from tests.emma._tiny_retriever import write_tiny_encoder

    cfg = CrossEncoderConfig(model=str(write_tiny_encoder(root / "encoder")), max_length=96, **config)
    return CrossEncoder.from_pretrained(cfg).save(root / "saved")
