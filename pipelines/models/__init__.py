"""Model and tokenizer factories that never need a model hub.

- ``gpt2.build_gpt2(spec_or_name_or_path, vocab_size)``: GPT-2 (MDR), tiny / 124M specs or from_pretrained
- ``t5.build_t5(spec_or_name_or_path, vocab_size)``: T5 (EMMA, G-Long), tiny / t5-small / flan-t5-large specs
- ``tokenizers.train_bpe_tokenizer(texts, vocab_size, out_dir)`` / ``load_tokenizer(name_or_path)``
- ``minilm.minilm_path()`` / ``load_minilm()``: the shipped all-MiniLM-L6-v2 sentence encoder

Submodules import transformers lazily; importing this package is cheap.
"""
