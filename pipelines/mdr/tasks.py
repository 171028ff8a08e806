"""The three MDR training stages as TrainTasks for the training engine (seed 001, section 3.4).

"The training process is divided into three stages ... firstly the teacher encoder is trained
with L_teacher using response data. Next, sentence-level alignment is carried out through
training with L_sentence ... Finally, token-level alignment is carried out through training with
L_token." Each task turns :class:`~pipelines.data.tasks.MDRExample` lists into pre-tokenised items,
pads them in ``collate`` and computes its loss by calling the model (so DDP hooks run):

- :class:`MDRTeacherTask`: MDRTeacher, L_teacher (eq. 3), target count = R tokens (+ eos).
- :class:`MDRStudentTask`: MDRStudent around the frozen teacher encoder, L_sentence (eq. 13),
  target count = examples; by default the teacher features, history selection and H_P of the
  training and validation items are computed once before training (teacher_table.py);
  ``save_final`` also caches R^(K) of ``cache_examples`` (eval mode: the expectation over P^(0)).
- :class:`MDRDecoderTask`: MDRDecoder (copy of the teacher decoder, or fresh), L_token (eq. 14),
  target count = R tokens (+ eos); R^(K) comes from the student's cache.

A GPT-2 factory (``() -> GPT2LMHeadModel`` with the codec's vocabulary) builds fresh models:
:func:`gpt2_factory` wraps ``pipelines.models.gpt2.build_gpt2``; tests pass their own.

Speed levers of the engine (issue #30): each task names its sequence tensors and their pad values
(``sequence_pad_values``), so ``TrainConfig.length_buckets`` can pad its batches to few static shapes
without changing a loss. None of them packs (``TrainConfig.pack``): every GPT-2 pass of MDR is causal over
independent texts, so block-diagonal packing would be exact in principle, but each step also reads
per-example vectors that a packed row would have to route by segment inside the model: stages A and C
put a prefix embedding ``W_p f`` computed in the step (from R_TE or R^(K)) before each example's tokens
and pool R's features per text (eq. 1; stage C's token weights), stage B pools Q, P and H_P per text
before the Memory Net. Packing them needs segment-aware PrefixLM and pooling, not only a collate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Mapping, Sequence

import torch
from torch import nn
from torch.utils.data import Dataset

from pipelines.data.tasks import MDRExample
from pipelines.mdr.config import MDRConfig
from pipelines.mdr.decoder import MDRDecoder
from pipelines.mdr.memory_net import MemoryNet
from pipelines.mdr.prefix_lm import PrefixLM
from pipelines.mdr.student import MDRStudent, cache_response_features, compute_sentence_loss
from pipelines.mdr.teacher import MDRTeacher, base_model, compute_teacher_loss
from pipelines.mdr.text import IGNORE, Codec, pad
from pipelines.mdr.teacher_table import (TeacherFeatureTable, attach_features, attach_partial_history, attach_rows,
                                         feature_sequences, item_sequences)
from pipelines.mdr.token_weights import check_aligned, compute_token_loss
from pipelines.errors import ConfigError, DataError
from pipelines.training.config import Tokens

PAPER = "MDR: Memory Distillation and Reproduction for Personalized Dialogue Generation (seed 001)"
FEATURES_FILE = "response_features.safetensors"

GPT2Factory = Callable[[], nn.Module]


def gpt2_factory(spec, codec: Codec) -> GPT2Factory:
    """A factory of fresh GPT2LMHeadModels (``pipelines.models.gpt2.build_gpt2``: a profile name such
    as "tiny" / "paper", a GPT2Spec, or a local pretrained directory) over the codec's vocabulary."""
    def make() -> nn.Module:
        from pipelines.models.gpt2 import build_gpt2
        return build_gpt2(spec, codec.vocab_size, bos_token_id=codec.eos_id, eos_token_id=codec.eos_id,
                          pad_token_id=codec.pad_id)
    return make


def check_positions(lm: nn.Module, cfg: MDRConfig) -> None:
    """ConfigError when the longest MDR sequence does not fit the model's position table."""
    limit = getattr(lm.config, "n_positions", None) or getattr(lm.config, "max_position_embeddings", None)
    hp = min(cfg.max_hp_tokens, 2 * (cfg.max_history_tokens + 1))               # H_P: two rounds, cut
    longest = max(cfg.prefix_tokens + cfg.max_query_tokens + cfg.max_response_tokens + 2,
                  cfg.max_persona_tokens + 1, cfg.max_history_tokens + 1, hp)
    if limit is not None and longest > limit:
        raise ConfigError(f"the longest MDR sequence has {longest} positions (prefix + query + sep + response + "
                          f"eos, a persona / history round + eos, or H_P) but model {cfg.model!r} has {limit}: "
                          f"lower mdr.max_*_tokens or use a model with more positions.")


class ItemDataset(Dataset):
    """A list of pre-tokenised items."""

    def __init__(self, items: list[dict]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        return self.items[i]


# --- items (lists of ids) and collates (padded tensors) ----------------------------------------

def teacher_item(example: MDRExample, codec: Codec, cfg: MDRConfig) -> dict:
    """Encoder input R + eos, decoder input Q sep R eos with labels on R and eos."""
    dec, labels = codec.decoder_ids(example.query, example.response, cfg.max_query_tokens, cfg.max_response_tokens)
    return {"r": codec.encoder_ids(example.response, cfg.max_response_tokens), "dec": dec, "labels": labels}


def teacher_pad_values(pad_id: int) -> dict[str, int]:
    """The sequence tensors of :func:`collate_teacher`'s (and :func:`collate_decoder`'s) batch and their pad
    values, for the engine's length buckets (TrainConfig.length_buckets): padding them further changes no loss."""
    return {"r_ids": pad_id, "r_mask": 0, "dec_ids": pad_id, "dec_mask": 0, "labels": IGNORE}


def collate_teacher(items: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    r_ids, r_mask = pad([it["r"] for it in items], pad_id)                       # (B, Tr)
    dec_ids, dec_mask = pad([it["dec"] for it in items], pad_id)                 # (B, L)
    labels, _ = pad([it["labels"] for it in items], IGNORE)                      # (B, L)
    return {"r_ids": r_ids, "r_mask": r_mask, "dec_ids": dec_ids, "dec_mask": dec_mask, "labels": labels}


def student_item(example: MDRExample, codec: Codec, cfg: MDRConfig, *, with_response: bool = True) -> dict:
    """Q, P (persona sentences joined by spaces; empty -> absent), the history rounds (the
    ``max_history_rounds`` most recent) and, for the loss, R."""
    history = example.history
    if cfg.max_history_rounds is not None:
        history = history[max(0, len(history) - cfg.max_history_rounds):]
    persona = " ".join(p.strip() for p in example.persona if p.strip())
    item = {"q": codec.encoder_ids(example.query, cfg.max_query_tokens),
            "p": codec.encoder_ids(persona, cfg.max_persona_tokens) if persona else [],
            "h": [codec.round_ids(q, r, cfg.max_history_tokens) for q, r in history]}
    if with_response:
        item["r"] = codec.encoder_ids(example.response, cfg.max_response_tokens)
    return item


def student_pad_values(pad_id: int) -> dict[str, int]:
    """The sequence tensors of :func:`collate_student`'s batch and their pad values (TrainConfig.length_buckets):
    each feature is a masked mean, and the step's H_P (student.concat_rounds) reads the rounds' masks."""
    return {f"{name}_{kind}": pad_id if kind == "ids" else 0 for name in ("q", "p", "hp", "h", "r")
            for kind in ("ids", "mask")}


def collate_student(items: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Pads Q and P, and H_P when every item carries its precomputed ids (``hp``, teacher_table.py:
    hp_ids / hp_mask (B, Lhp), hp_present (B,)); otherwise flattens every history round of the
    batch into h_ids (N_h, Lh) with h_index (B, R), for the selection in the step."""
    q_ids, q_mask = pad([it["q"] for it in items], pad_id)                       # (B, Lq)
    p_present = torch.tensor([bool(it["p"]) for it in items])                    # (B,)
    p_ids, p_mask = pad([it["p"] or [pad_id] for it in items], pad_id)           # (B, Lp)
    batch = {"q_ids": q_ids, "q_mask": q_mask, "p_ids": p_ids, "p_mask": p_mask, "p_present": p_present}
    if items and all("hp" in it for it in items):
        batch["hp_ids"], batch["hp_mask"] = pad([it["hp"] or [pad_id] for it in items], pad_id)  # (B, Lhp)
        batch["hp_present"] = torch.tensor([bool(it["hp"]) for it in items])    # (B,)
    else:
        rounds = [r for it in items for r in it["h"]]
        h_ids, h_mask = pad(rounds, pad_id)                                      # (N_h, Lh)
        if not rounds:
            h_ids, h_mask = h_ids[:0], h_mask[:0]
        width = max((len(it["h"]) for it in items), default=0)
        h_index = torch.full((len(items), max(width, 1)), -1, dtype=torch.long) # (B, R)
        row = 0
        for b, it in enumerate(items):
            for r in range(len(it["h"])):
                h_index[b, r] = row
                row += 1
        batch.update(h_ids=h_ids, h_mask=h_mask, h_index=h_index)
    if items and all("r" in it for it in items):
        batch["r_ids"], batch["r_mask"] = pad([it["r"] for it in items], pad_id)
    return batch


def decoder_item(example: MDRExample, codec: Codec, cfg: MDRConfig, feature: torch.Tensor) -> dict:
    item = teacher_item(example, codec, cfg)
    item["feature"] = feature
    return item


def collate_decoder(items: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    batch = collate_teacher(items, pad_id)
    batch["features"] = torch.stack([it["feature"].float() for it in items])   # (B, H)
    check_aligned(batch["r_mask"], batch["labels"])  # every label becomes a decoder target (prefix_lm.py)
    return batch


# --- the three tasks ---------------------------------------------------------------------------

class _MDRTask:
    paper = PAPER

    def __init__(self, config: MDRConfig, train: Sequence[MDRExample], valid: Sequence[MDRExample] | None,
                 codec: Codec):
        if not train:
            raise DataError("no training example: the MDR task builder found no (Q, R) round",
                            record="train split", rule="non_empty_split")
        self.config, self.codec = config, codec
        self.train_examples, self.valid_examples = list(train), list(valid or [])

    def train_dataset(self) -> Dataset:
        return ItemDataset([self._item(e) for e in self.train_examples])

    def valid_dataset(self) -> Dataset | None:
        return ItemDataset([self._item(e) for e in self.valid_examples]) if self.valid_examples else None

    def _item(self, example: MDRExample) -> dict:
        raise NotImplementedError

    def _save_common(self, out_dir: Path, stage: str) -> None:
        self.codec.save(out_dir / "tokenizer")
        (out_dir / "mdr_config.json").write_text(json.dumps({"stage": stage, **self.config.to_dict()}, indent=2))


class MDRTeacherTask(_MDRTask):
    """Stage A: train Enc_teacher + Dec_teacher with L_teacher (eq. 3)."""

    def __init__(self, config: MDRConfig, train: Sequence[MDRExample], valid: Sequence[MDRExample] | None,
                 codec: Codec, gpt2: GPT2Factory):
        super().__init__(config, train, valid, codec)
        self.gpt2 = gpt2

    def build_model(self) -> MDRTeacher:
        teacher = MDRTeacher.build(self.gpt2, self.config.prefix_tokens)
        check_positions(teacher.decoder.lm, self.config)
        return teacher

    def _item(self, example: MDRExample) -> dict:
        return teacher_item(example, self.codec, self.config)

    def collate(self, items: list) -> dict[str, torch.Tensor]:
        return collate_teacher(items, self.codec.pad_id)

    def sequence_pad_values(self) -> dict[str, int]:
        return teacher_pad_values(self.codec.pad_id)

    def compute_loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Tokens]:
        out = model(**batch)
        return compute_teacher_loss(out.logits, out.targets)

    def save_final(self, model: nn.Module, out_dir: Path) -> None:
        model.save(out_dir)
        self._save_common(Path(out_dir), "mdr_teacher")


class MDRStudentTask(_MDRTask):
    """Stage B: train the student encoder and the Memory Net with L_sentence (eq. 13)."""

    def __init__(self, config: MDRConfig, train: Sequence[MDRExample], valid: Sequence[MDRExample] | None,
                 codec: Codec, teacher: MDRTeacher, gpt2: GPT2Factory,
                 cache_examples: Sequence[MDRExample] = (), cache_batch_size: int = 32, progress: bool = True):
        super().__init__(config, train, valid, codec)
        self.teacher, self.gpt2 = teacher.freeze(), gpt2
        self.cache_examples, self.cache_batch_size = list(cache_examples), cache_batch_size
        self.table: TeacherFeatureTable | None = None   # built with the datasets (config.precompute_teacher_features)
        self.progress = progress
        self._built: tuple[list[dict], list[dict]] | None = None   # (train items, valid items), see _items

    def build_model(self) -> MDRStudent:
        cfg = self.config
        memory = MemoryNet(self.teacher.hidden, cfg.hops, p0=cfg.p0, init_std=cfg.init_std,
                           share_weights=cfg.share_update_weights, p0_eval=cfg.p0_eval,
                           eval_samples=cfg.p0_eval_samples, eval_seed=cfg.eval_seed)
        student = base_model(self.gpt2())
        check_positions(student, cfg)
        return MDRStudent(student, self.teacher.encoder, memory, cfg.max_hp_tokens)

    def _item(self, example: MDRExample) -> dict:
        return student_item(example, self.codec, self.config)

    def train_dataset(self) -> Dataset:
        return ItemDataset(self._items()[0])

    def valid_dataset(self) -> Dataset | None:
        valid = self._items()[1]
        return ItemDataset(valid) if valid else None

    def _items(self) -> tuple[list[dict], list[dict]]:
        """The training and validation items, built once; with ``precompute_teacher_features`` the
        frozen teacher's features of every text in them, each item's history selection and H_P
        (eq. 7) and the features of each H_P are computed here, once (self.table, teacher_table.py),
        and each item records its H_P ids and its rows."""
        if self._built is None:
            train = [self._item(e) for e in self.train_examples]
            valid = [self._item(e) for e in self.valid_examples]
            if self.config.precompute_teacher_features:
                pad_id, encoder, items = self.codec.pad_id, self.teacher.encoder, train + valid
                self.table = TeacherFeatureTable(encoder, (s for it in items for s in item_sequences(it, pad_id)),
                                                 pad_id, progress=self.progress)
                attach_partial_history(items, self.table, self.config.max_hp_tokens)
                self.table.add(encoder, (s for it in items for s in feature_sequences(it, pad_id)),
                               desc="teacher features (H_P)")
                for item in items:
                    attach_rows(item, self.table)
            self._built = (train, valid)
        return self._built

    def collate(self, items: list) -> dict[str, torch.Tensor]:
        batch = collate_student(items, self.codec.pad_id)
        if self.table is not None and all("te_rows" in it for it in items):
            attach_features(batch, items, self.table)
        return batch

    def sequence_pad_values(self) -> dict[str, int]:
        return student_pad_values(self.codec.pad_id)

    def compute_loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Tokens]:
        out = model(**batch)
        return compute_sentence_loss(out["r_pred"], out["r_te"])

    def save_final(self, model: nn.Module, out_dir: Path) -> None:
        """The student (``encoder/``, ``memory_net.safetensors``) and the cached R^(K) of
        ``cache_examples`` in ``response_features.safetensors`` (section 4.2)."""
        out_dir = Path(out_dir)
        model.save(out_dir)
        self._save_common(out_dir, "mdr_student")
        if self.cache_examples:
            items = [student_item(e, self.codec, self.config, with_response=False) for e in self.cache_examples]
            cache_response_features(model, items, [e.id for e in self.cache_examples], out_dir / FEATURES_FILE,
                                    collate=self.collate, batch_size=self.cache_batch_size)


class MDRDecoderTask(_MDRTask):
    """Stage C: fine-tune the decoder on (R^(K), Q) -> R with L_token (eq. 14)."""

    def __init__(self, config: MDRConfig, train: Sequence[MDRExample], valid: Sequence[MDRExample] | None,
                 codec: Codec, teacher: MDRTeacher, features: Mapping[str, torch.Tensor],
                 gpt2: GPT2Factory | None = None, features_source: str = FEATURES_FILE):
        super().__init__(config, train, valid, codec)
        if config.decoder_init == "fresh" and gpt2 is None:
            raise ConfigError("mdr.decoder_init is 'fresh' but no GPT-2 factory was given to build the decoder.")
        self.teacher, self.features, self.gpt2 = teacher.freeze(), features, gpt2
        self.features_source = features_source

    def build_model(self) -> MDRDecoder:
        if self.config.decoder_init == "teacher":
            decoder = self.teacher.decoder.copy()
            for p in decoder.parameters():
                p.requires_grad_(True)
            decoder.train()
        else:
            decoder = PrefixLM(self.gpt2(), self.teacher.hidden, self.config.prefix_tokens)
        check_positions(decoder.lm, self.config)
        return MDRDecoder(decoder, self.teacher.encoder, self.config.sigma)

    def _item(self, example: MDRExample) -> dict:
        feature = self.features.get(example.id)
        if feature is None:
            raise DataError("no cached R^(K) for this example; rerun mdr_student on the same examples",
                            file=self.features_source, record=example.id, field="R^(K)")
        return decoder_item(example, self.codec, self.config, feature)

    def collate(self, items: list) -> dict[str, torch.Tensor]:
        return collate_decoder(items, self.codec.pad_id)

    def sequence_pad_values(self) -> dict[str, int]:
        return teacher_pad_values(self.codec.pad_id)

    def compute_loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Tokens]:
        out = model(**batch)
        return compute_token_loss(out["logits"], out["targets"], out["weights"])

    def save_final(self, model: nn.Module, out_dir: Path) -> None:
        """The decoder (``decoder/`` = PrefixLM.save), tokenizer and config; the benchmark loads it
        with ``PrefixLM.load(out_dir / "decoder")``."""
        out_dir = Path(out_dir)
        model.decoder.save(out_dir / "decoder")
        self._save_common(out_dir, "mdr_decoder")
