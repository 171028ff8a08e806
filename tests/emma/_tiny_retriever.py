"""A tiny random BERT with the shipped MiniLM WordPiece tokenizer: a retriever checkpoint that trains in a second."""

from __future__ import annotations

from pathlib import Path


def write_tiny_encoder(folder: Path) -> Path:
    """A 1-layer, 32-wide BertModel (random, seeded) and MiniLM's tokenizer saved in ``folder``."""
    import torch
    from transformers import BertConfig, BertModel

    from pipelines.models.minilm import minilm_path
    from pipelines.models.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(str(minilm_path()))
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=64, max_position_embeddings=128))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_tiny_dual_encoder(root: Path, memory_max_length: int = 64) -> Path:
    """A dual encoder of two tiny towers (:func:`write_tiny_encoder`), saved as the emma_retriever stage saves one,
    in ``root / "saved"``."""
    from pipelines.emma import retriever as R

    cfg = R.RetrieverConfig(model=str(write_tiny_encoder(root / "encoder")), context_max_length=128,
                            memory_max_length=memory_max_length)
    return R.DualEncoder.from_pretrained(cfg).save(root / "saved")
