"""A tiny random Llama with a byte-level BPE tokenizer and a chat template, saved as a model folder.

What the tests of the LLM layer (and the smoke run of benchmarks/llm_throughput.py) load, serve and generate
with: 2 layers, 32 wide, 300-token vocabulary, written in well under a second. Its weights are random (a large
initialiser range keeps the greedy choices far from ties, so batched and one-at-a-time decoding agree), so it
writes gibberish, but real gibberish: every code path of a pretrained instruction model is taken.
"""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|' + m['role'] + '|>' + m['content'] + '<|end|>' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")
TEXTS = ["the quick brown fox jumps over the lazy dog", "Alice moved to Paris in May",
         "Bob likes tea and cakes", "Where did Alice move? She moved to Paris."] * 20


def write_tiny_llama(folder: Path, seed: int = 0) -> Path:
    """Save the tiny model and its tokenizer into ``folder``; returns it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pipelines.models.tokenizers import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(TEXTS, vocab_size=300,
                                    special_tokens=["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"])
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, initializer_range=0.5)
    LlamaForCausalLM(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return Path(folder)
