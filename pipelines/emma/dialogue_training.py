"""EMMA's dialogue module, its training: the ``emma_dialogue`` task for the training engine (seed 000, 4.1, E.1).

The tasks (generation, memory summarisation, memory linking; formats in :mod:`pipelines.emma.formats`) share one
model and are told apart by their prefix; training minimises the token cross-entropy of the target given the
source over the mixed examples,

    L = -(1/N) sum_examples sum_t log p(y_t | y_<t, x)        (N = target tokens in the batch)

(:func:`seq2seq_loss` for a T5, :func:`causal_loss` for a decoder, where the prompt and the padding are labelled
-100). :class:`EMMADialogueTask` gives the engine (:mod:`pipelines.training.engine`) the examples (capped on the
CPU by ``max_train_examples`` / ``max_valid_examples``, :func:`cap_examples`), the (Q)LoRA model
(:mod:`pipelines.emma.dialogue_model`), the batches (:mod:`pipelines.emma.dialogue_encoding`) and the loss, and
saves the trained module (:meth:`EMMADialogueTask.save_final`) in the folder that
:meth:`pipelines.emma.dialogue.EMMADialogue.load` reads. Appendix E.1's lr, batch, epochs and early stopping are
the engine's settings (:meth:`pipelines.emma.dialogue_config.EMMADialogueConfig.train_config`).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

import torch

from pipelines.emma.dialogue_config import ADAPTER_DIR, BASE_DIR, CONFIG_FILE, TOKENIZER_DIR, EMMADialogueConfig
from pipelines.emma.dialogue_encoding import (IGNORE, EncodedExample, encode_causal_examples, encode_examples,
                                              pad_batch, pad_causal, prompt_frame)
from pipelines.emma.dialogue_model import build_dialogue_model, build_tokenizer, save_random_base
from pipelines.emma.formats import Example

log = logging.getLogger("mnemos")


def causal_loss(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean token cross-entropy of the targets (the model shifts: position t predicts label t+1) and the
    target tokens as a 0-d tensor (the first label, never predicted, is a prompt token)."""
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
    return out.loss, (batch["labels"][:, 1:] != IGNORE).sum()


def cap_examples(items: Sequence[Example], cap: int | None, seed: int) -> list[Example]:
    """At most ``cap`` of ``items``, spread evenly over their tasks: each task keeps all its examples or its
    share of what is left (a task with fewer than its share leaves the rest to the others), drawn at random
    (seeded) within the task; the kept examples in their original order. ``cap`` None: all of them."""
    if cap is None or len(items) <= cap:
        return list(items)
    by_task: dict[str, list[int]] = {}
    for i, ex in enumerate(items):
        by_task.setdefault(ex.task, []).append(i)
    left, quota = cap, {}
    tasks = sorted(by_task, key=lambda t: (len(by_task[t]), t))
    for k, task in enumerate(tasks):
        quota[task] = min(len(by_task[task]), left // (len(tasks) - k))
        left -= quota[task]
    rng = random.Random(f"emma-dialogue-cap:{seed}")
    keep = sorted(i for task in sorted(by_task) for i in rng.sample(by_task[task], quota[task]))
    return [items[i] for i in keep]


def seq2seq_loss(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean token cross-entropy of the targets (T5's loss over labels != -100), and the target tokens
    as a 0-d tensor (no host sync in the training step)."""
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
    return out.loss, (batch["labels"] != -100).sum()


class EMMADialogueTask:
    """``emma_dialogue`` for the training engine: the three tasks' examples mixed (capped by
    ``max_train_examples`` / ``max_valid_examples``), (Q)LoRA over a T5 or a decoder, target cross-entropy."""

    paper = "EMMA (arXiv 2410.02503), section 4.1 and Appendix E.1: FLAN-T5 with QLoRA on three tasks"

    def __init__(self, config: EMMADialogueConfig, train_examples: Sequence[Example],
                 valid_examples: Sequence[Example] = (), tokenizer=None, work_dir: str | os.PathLike | None = None):
        self.config = config
        train = [ex for ex in train_examples if ex.task in config.tasks]
        valid = [ex for ex in valid_examples if ex.task in config.tasks]
        self.train_examples = cap_examples(train, config.max_train_examples, config.seed)
        self.valid_examples = cap_examples(valid, config.max_valid_examples, config.seed)
        self.counts = {f"{split}_{task}": sum(ex.task == task for ex in kept)
                       for split, kept in (("train", self.train_examples), ("valid", self.valid_examples))
                       for task in config.tasks}
        if len(self.train_examples) < len(train) or len(self.valid_examples) < len(valid):
            log.info("emma_dialogue: %d of %d training and %d of %d validation examples kept (caps %s / %s): %s",
                     len(self.train_examples), len(train), len(self.valid_examples), len(valid),
                     config.max_train_examples, config.max_valid_examples, self.counts)
        self.arch = config.arch()
        texts = [t for ex in self.train_examples for t in (ex.source, ex.target)]
        self.tokenizer = tokenizer or build_tokenizer(config, texts)
        self.frame = prompt_frame(self.tokenizer) if self.arch == "causal" else None
        self._encoded_cache: dict[str, list[EncodedExample]] = {}
        self.base_ref: str | None = None
        if config.is_spec:   # one random init, saved once: every build_model (and the final model) uses it
            self._work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="emma-dialogue-base-"))
            self.base_ref = str(save_random_base(config, self.tokenizer, self._work / BASE_DIR))

    def build_model(self):
        return build_dialogue_model(self.config, self.tokenizer, self.base_ref)

    def train_dataset(self) -> list[EncodedExample]:
        return self._encoded("train")

    def valid_dataset(self) -> list[EncodedExample]:
        return self._encoded("valid")

    def _encoded(self, split: str) -> list[EncodedExample]:
        """The split's examples tokenised once, on first use (collate then only pads)."""
        if split not in self._encoded_cache:
            c = self.config
            examples = self.train_examples if split == "train" else self.valid_examples
            if self.arch == "causal":
                encoded = encode_causal_examples(self.tokenizer, examples, c.max_source_length, c.max_target_length,
                                                 self.frame)
            else:
                encoded = encode_examples(self.tokenizer, examples, c.max_source_length, c.max_target_length)
            self._encoded_cache[split] = encoded
        return self._encoded_cache[split]

    def train_lengths(self) -> list[int]:
        """Source + target tokens of each training example (as collate pads them), for length grouping."""
        return [len(ex.source_ids) + len(ex.target_ids) for ex in self.train_dataset()]

    def collate(self, items: Sequence[EncodedExample]) -> dict[str, torch.Tensor]:
        if self.arch == "causal":
            return pad_causal(items, self.tokenizer.pad_token_id)
        return pad_batch(items, self.tokenizer.pad_token_id)

    def compute_loss(self, model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return causal_loss(model, batch) if self.arch == "causal" else seq2seq_loss(model, batch)

    def save_final(self, model, out_dir: str | os.PathLike) -> Path:
        """``adapter/`` (LoRA weights), ``tokenizer/``, ``base/`` (a spec's random init), ``emma_dialogue.json``
        (the config, the base: ``base`` or the model's name, resolved again at load, and the architecture)."""
        out = Path(out_dir)
        model.save_pretrained(out / ADAPTER_DIR)
        self.tokenizer.save_pretrained(out / TOKENIZER_DIR)
        base = self.config.model
        if self.base_ref is not None:
            shutil.copytree(self.base_ref, out / BASE_DIR, dirs_exist_ok=True)
            base = BASE_DIR
        saved = asdict(self.config) | {"base": base, "arch": self.arch}
        (out / CONFIG_FILE).write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")
        return out
