"""EMMA's dialogue module: one model fine-tuned with QLoRA on three tasks at once (seed 000, 4.1, E.1).

The tasks (generation, memory summarisation, memory linking; formats in :mod:`pipelines.emma.formats`) share
one FLAN-T5 (or, in the small profile, a decoder-only SmolLM2) and are told apart by their prefix. The module is
built in layers:

- :mod:`pipelines.emma.dialogue_config`: :class:`EMMADialogueConfig` (params.yaml ``emma.dialogue``, Appendix
  E.1's defaults) and the model's architecture, importing no torch;
- :mod:`pipelines.emma.dialogue_model`: the tokenizer, the frozen 4-bit base and the LoRA adapters (QLoRA);
- :mod:`pipelines.emma.dialogue_encoding`: examples as token ids and padded batches (a T5's, a decoder's);
- :mod:`pipelines.emma.dialogue_training`: the training task (the mixed examples, the target cross-entropy);
- here, :class:`EMMADialogue`: a trained module loaded from its folder, and what the egocentric memory calls.

Generation is greedy (or nucleus sampling when ``do_sample``): a T5 decodes from the source; a decoder continues
its left-padded prompts (:func:`pipelines.emma.dialogue_encoding.prompt_frame` around the source, cut as in
training), and the text is the new tokens up to EOS.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import torch

from pipelines.emma.dialogue_config import (ADAPTER_DIR, BASE_DIR, CONFIG_FILE, TOKENIZER_DIR, EMMADialogueConfig,
                                            base_reference)
from pipelines.emma.dialogue_encoding import collate_examples, encode_causal_examples, prompt_frame
from pipelines.emma.dialogue_model import load_base
from pipelines.emma.formats import Example, GenerationInput, link_source, parse_link, parse_summary, summarize_source
from pipelines.errors import ConfigError


class EMMADialogue:
    """A trained dialogue module: ``generate``, ``summarize``, ``link``, and ``generate_text`` (the
    text-to-text function the egocentric memory calls for its summariser and linker)."""

    def __init__(self, model, tokenizer, config: EMMADialogueConfig, arch: str = "seq2seq"):
        self.model, self.tokenizer, self.config, self.arch = model.eval(), tokenizer, config, arch
        self.frame = prompt_frame(tokenizer) if arch == "causal" else None

    @classmethod
    def load(cls, directory: str | os.PathLike, **overrides) -> "EMMADialogue":
        from peft import PeftModel

        d = Path(directory)
        if not (d / CONFIG_FILE).exists():
            raise ConfigError(f"{d} is not a saved EMMA dialogue module (no {CONFIG_FILE}).")
        saved = json.loads((d / CONFIG_FILE).read_text(encoding="utf-8"))
        base, arch = saved.pop("base"), saved.pop("arch", "seq2seq")   # modules saved before decoders: T5s
        saved.update(zero_stage=None, deepspeed=None)
        config = EMMADialogueConfig(**{**saved, **overrides})
        from pipelines.models.tokenizers import load_tokenizer

        tokenizer = load_tokenizer(d / TOKENIZER_DIR)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        if base == BASE_DIR:
            ref = d / base
        else:
            ref = base_reference(base) if arch == "causal" else base
        model = load_base(config, ref, len(tokenizer), arch)
        return cls(PeftModel.from_pretrained(model, d / ADAPTER_DIR), tokenizer, config, arch)

    @torch.no_grad()
    def generate_text(self, sources: Sequence[str], max_new_tokens: int | None = None) -> list[str]:
        """Decode one output per source (greedy, or nucleus sampling when configured)."""
        if not sources:
            return []
        if self.arch == "causal":
            return self._generate_causal(sources, max_new_tokens or self.config.max_new_tokens)
        batch = collate_examples(self.tokenizer, [Example("generation", s, "", "", "") for s in sources],
                                 self.config.max_source_length, 1)
        device = next(p for p in self.model.parameters()).device
        kwargs = dict(do_sample=True, top_p=self.config.top_p) if self.config.do_sample else dict(do_sample=False)
        out = self.model.generate(input_ids=batch["input_ids"].to(device),
                                  attention_mask=batch["attention_mask"].to(device),
                                  max_new_tokens=max_new_tokens or self.config.max_new_tokens, **kwargs)
        drop = {self.tokenizer.pad_token, self.tokenizer.eos_token, self.tokenizer.bos_token} - {None}
        texts = []
        for row in out.tolist():
            tokens = [t for t in self.tokenizer.convert_ids_to_tokens(row) if t not in drop]
            texts.append(self.tokenizer.convert_tokens_to_string(tokens).strip())
        return texts

    def _generate_causal(self, sources: Sequence[str], max_new_tokens: int) -> list[str]:
        """A decoder continues each prompt (:func:`prompt_frame` around the source cut as in training), left-padded
        so that every row continues from its last position; the text is the new tokens up to EOS."""
        from pipelines.llm.local import left_pad

        prompts = [ex.source_ids for ex in encode_causal_examples(
            self.tokenizer, [Example("generation", s, "", "", "") for s in sources], self.config.max_source_length, 1,
            self.frame)]
        input_ids, mask = left_pad(prompts, self.tokenizer.pad_token_id)
        device = next(p for p in self.model.parameters()).device
        kwargs = dict(do_sample=True, top_p=self.config.top_p) if self.config.do_sample else dict(do_sample=False)
        out = self.model.generate(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                                  max_new_tokens=max_new_tokens, eos_token_id=self.tokenizer.eos_token_id,
                                  pad_token_id=self.tokenizer.pad_token_id, **kwargs)
        new = out[:, input_ids.shape[1]:].tolist()
        return [self.tokenizer.decode(row, skip_special_tokens=True).strip() for row in new]

    def generate(self, inp: GenerationInput) -> str:
        """The main speaker's next utterance."""
        return self.generate_text([inp.render()])[0]

    def summarize(self, about: str, final_sequence: str) -> list[str]:
        """Memories about ``about`` from a finished session ([] for "[NONE]")."""
        return parse_summary(self.generate_text([summarize_source(about, final_sequence)])[0])

    def link(self, memory_1: str, memory_2: str) -> bool:
        """True when the newer ``memory_2`` refers to or updates ``memory_1``."""
        return parse_link(self.generate_text([link_source(memory_1, memory_2)])[0])
