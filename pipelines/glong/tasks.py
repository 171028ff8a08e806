"""Training tasks of G-Long (seed 003) for the project's engine (pipelines/training/engine.py).

- :class:`GLongExtractorTask`: the triplet extraction module (section 3.2, Appendix B):
  instruction tuning of a small LM with QLoRA: the base weights are quantised to 4-bit NF4 with
  double quantisation (bitsandbytes), frozen, and LoRA adapters are trained on every linear
  projection (peft ``target_modules="all-linear"``). Loss: token cross-entropy on the answer only,

      L = -(1/N) sum_{t in answer} log p(y_t | prompt, y_<t)

  (seq2seq: the answer is the decoder target). Paper: Qwen3-8B on PersonaExt, 10 epochs, batch
  16, greedy decoding at inference. Tiny profile: a random-init GPT-2 (or T5) over a byte-level BPE
  trained on the examples, saved under ``base_dir`` so that the adapter has its base. Small profile:
  SmolLM2-135M-Instruct (``smollm2-135m-instruct``, the LLM layer's shipped GGUF converted once), its own
  tokenizer and chat template; any pretrained model is found by :func:`pretrained_base`.
- :class:`GLongImportanceTask`: the importance module's summariser (section 3.2; paper: T5-small
  fine-tuned on SAMSum): full fine-tuning on dialogue -> summary pairs with cross-entropy on the
  summary. Pairs come from SAMSum's published JSON (:func:`read_samsum`) when given, else from
  the synthetic sessions' summaries (:func:`session_summary_pairs`).

``save_final`` writes folders that :func:`load_extractor` and
:func:`pipelines.glong.importance.load_importance_scorer` read back.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import torch

from pipelines.data.schema import Episode
from pipelines.errors import ConfigError, DataError
from pipelines.glong.config import ExtractorTrainConfig, SummariserTrainConfig
from pipelines.glong.extractor import ExtractionExample, TripletExtractor, render_prompt
from pipelines.training.launch import process_device

IGNORE = -100  # label of positions that carry no loss
BASE_SEED = 2025  # random init of a spec base model (tiny profile), independent of the training seed


# --- shared helpers ----------------------------------------------------------------------------

def bnb_4bit_config():
    """NF4 with double quantisation; compute in bf16 on CUDA, fp32 on the CPU (QLoRA)."""
    from transformers import BitsAndBytesConfig

    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                              bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=dtype)


def load_base(path: str | Path, arch: str, quantize_4bit: bool):
    """A causal / seq2seq LM from a local folder, optionally quantised to 4-bit NF4.

    Full-precision weights for the CPU are read into memory (``disable_mmap``): loaded as they are stored (fp32),
    transformers would leave them views of the memory-mapped safetensors file, clean page-cache pages that a
    machine short of memory drops and reads back from disk in every forward pass (SmolLM2's 525 MB: training
    steps of 20 s took 40 to 150 s on the shared 2-core machine)."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    cls = AutoModelForCausalLM if arch == "causal" else AutoModelForSeq2SeqLM
    if quantize_4bit:
        kwargs = {"quantization_config": bnb_4bit_config(), "device_map": {"": process_device()}}
    else:
        kwargs = {"disable_mmap": process_device().type == "cpu"}
    return cls.from_pretrained(str(path), local_files_only=True, **kwargs)


def linear_module_names(model) -> list[str]:
    """Leaf names of every linear projection, the output head included (``lora_lm_head``)."""
    from transformers.pytorch_utils import Conv1D

    kinds = (torch.nn.Linear, Conv1D)
    try:
        import bitsandbytes as bnb

        kinds += (bnb.nn.Linear4bit,)
    except ImportError:  # the GPU image may lack bitsandbytes: no 4-bit layers then
        pass
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules()
                   if isinstance(m, kinds)})


def pad_batch(items: Sequence[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad ``input_ids`` (pad_id) and ``labels`` (-100); add the attention mask."""
    out: dict[str, torch.Tensor] = {}
    for key, fill in (("input_ids", pad_id), ("labels", IGNORE)):
        width = max(len(i[key]) for i in items)
        out[key] = torch.tensor([i[key] + [fill] * (width - len(i[key])) for i in items])  # (B, T)
    width = out["input_ids"].shape[1]
    out["attention_mask"] = torch.tensor([[1] * len(i["input_ids"]) + [0] * (width - len(i["input_ids"]))
                                          for i in items])                                  # (B, T)
    return out


def pretrained_base(model: str) -> Path:
    """The folder of a pretrained base (``smollm2-135m-instruct``, a .gguf file, a save_pretrained folder, a name in
    the local Hugging Face cache), through :func:`pipelines.llm.config.pretrained_folder`: nothing is downloaded."""
    from pipelines.llm.base import LLMError
    from pipelines.llm.build import pretrained_folder

    try:
        return pretrained_folder(model)
    except LLMError as err:
        raise ConfigError(f"glong.extractor.model {model!r}: {err}") from None


def _is_spec(name: str, arch: str) -> bool:
    if arch == "causal":
        from pipelines.models.gpt2 import resolve_gpt2_spec

        return resolve_gpt2_spec(name) is not None
    from pipelines.models.t5 import resolve_t5_spec

    return resolve_t5_spec(name) is not None


def _tokenizer(model: str, spec: bool, texts: Iterable[str], vocab: int):
    from pipelines.models.tokenizers import load_tokenizer, train_bpe_tokenizer

    tok = train_bpe_tokenizer(texts, vocab) if spec else load_tokenizer(model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if tok.eos_token_id is None:
        raise ConfigError(f"the tokenizer of {model!r} has no end-of-sequence token.")
    return tok


# --- the triplet extractor ---------------------------------------------------------------------

class _EncodedLMTask:
    """The TrainTask parts the two G-Long models share: pre-encoded items, padding, HF loss."""

    def train_dataset(self):
        return self._train

    def valid_dataset(self):
        return self._valid

    def collate(self, items):
        return pad_batch(items, self.tokenizer.pad_token_id)

    def target_labels(self, labels):
        return labels

    def compute_loss(self, model, batch):
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    labels=batch["labels"])
        return out.loss, (self.target_labels(batch["labels"]) != IGNORE).sum()  # 0-d tensor: no host sync


class GLongExtractorTask(_EncodedLMTask):
    """QLoRA instruction tuning of utterance -> JSON triplets (engine ``TrainTask``)."""

    paper = ("G-Long (seed 003), triplet extraction module: QLoRA instruction tuning "
             "(4-bit NF4 base, LoRA on all linear projections)")

    def __init__(self, train: Sequence[ExtractionExample], valid: Sequence[ExtractionExample] | None,
                 config: ExtractorTrainConfig, base_dir: str | Path):
        if not train:
            raise DataError("no training example: the extractor needs utterances with triplets",
                            rule="non_empty_training_set")
        self.config, self.base_dir = config, Path(base_dir)
        self.own_base = _is_spec(config.model, config.arch)
        # a spec model's random base is written to base_dir; a pretrained one is read where it lies
        self.base_path = self.base_dir if self.own_base else pretrained_base(config.model)
        texts = [render_prompt(e.speaker, e.text) + e.target for e in train]
        self.tokenizer = _tokenizer(str(self.base_path), self.own_base, texts, config.tokenizer_vocab)
        self._train = [self.encode(e) for e in train]
        self._valid = [self.encode(e) for e in valid] if valid else None

    def encode(self, example: ExtractionExample) -> dict[str, list[int]]:
        tok, c = self.tokenizer, self.config
        prompt = tok(render_prompt(example.speaker, example.text, tok), add_special_tokens=False)["input_ids"]
        answer = tok(example.target, add_special_tokens=False)["input_ids"][:c.max_new_tokens - 1]
        answer = answer + [tok.eos_token_id]
        if c.arch == "seq2seq":
            return {"input_ids": prompt[-c.max_length:], "labels": answer}
        prompt = prompt[-(c.max_length - len(answer)):]      # keep the end of a long prompt
        return {"input_ids": prompt + answer, "labels": [IGNORE] * len(prompt) + answer}

    def _save_base(self) -> Path:
        """Random-init base (spec models) written once to ``base_dir``; a pretrained model is its own base."""
        if not self.own_base:
            return self.base_path
        if not (self.base_dir / "config.json").exists():
            tok, c = self.tokenizer, self.config
            # the base's random init draws from its own generator: whether the folder already existed
            # must not shift the global RNG that the LoRA init (and dropout) draw from next
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(BASE_SEED)
                if c.arch == "causal":
                    from pipelines.models.gpt2 import build_gpt2

                    model = build_gpt2(c.model, len(tok), eos_token_id=tok.eos_token_id,
                                       pad_token_id=tok.pad_token_id)
                else:
                    from pipelines.models.t5 import build_t5

                    model = build_t5(c.model, len(tok), pad_token_id=tok.pad_token_id,
                                     eos_token_id=tok.eos_token_id)
            model.save_pretrained(self.base_dir)
            tok.save_pretrained(self.base_dir)
        return self.base_dir

    def build_model(self):
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

        c = self.config
        model = load_base(self._save_base(), c.arch, c.quantize_4bit)
        if c.quantize_4bit:
            model = prepare_model_for_kbit_training(
                model, use_gradient_checkpointing=c.gradient_checkpointing,
                gradient_checkpointing_kwargs={"use_reentrant": False})
        elif c.gradient_checkpointing:
            model.activation_checkpointing_enable()  # transformers 5 name; non-reentrant checkpoints
        lora = LoraConfig(r=c.lora_r, lora_alpha=c.lora_alpha, lora_dropout=c.lora_dropout,
                          target_modules=linear_module_names(model) if c.lora_lm_head
                          else "all-linear",
                          task_type="CAUSAL_LM" if c.arch == "causal" else "SEQ_2_SEQ_LM")
        return get_peft_model(model, lora)

    def target_labels(self, labels):
        """Causal LMs predict token t+1 from token t: the first label is never a target."""
        return labels if self.config.arch == "seq2seq" else labels[:, 1:]

    def save_final(self, model, out_dir: Path) -> None:
        out_dir = Path(out_dir)
        model.save_pretrained(out_dir / "adapter")
        self.tokenizer.save_pretrained(out_dir / "tokenizer")
        base = self._save_base()
        if self.own_base:
            shutil.copytree(base, out_dir / "base")
        meta = {"arch": self.config.arch, "base": "base" if self.own_base else str(base.resolve()),
                "quantize_4bit": self.config.quantize_4bit,
                "max_new_tokens": self.config.max_new_tokens}
        if not self.own_base:
            meta["model"] = self.config.model   # found again by name when the base folder moved (another root)
        (out_dir / "extractor.json").write_text(json.dumps(meta, indent=1))


def load_extractor(final_dir: str | Path, *, quantize_4bit: bool | None = None,
                   batch_size: int = 16) -> TripletExtractor:
    """The greedy extractor saved by :class:`GLongExtractorTask` (base + LoRA adapter).

    ``extractor.model`` is a peft model: ``with extractor.model.disable_adapter():`` it is the base alone, as the
    stage scores it zero-shot."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    final_dir = Path(final_dir)
    meta_path = final_dir / "extractor.json"
    if not meta_path.exists():
        raise ConfigError(f"{final_dir} holds no trained extractor (missing extractor.json).")
    meta = json.loads(meta_path.read_text())
    base = final_dir / meta["base"] if meta["base"] == "base" else Path(meta["base"])
    if not base.is_dir() and "model" in meta:
        base = pretrained_base(meta["model"])
    quantize = meta["quantize_4bit"] if quantize_4bit is None else quantize_4bit
    model = PeftModel.from_pretrained(load_base(base, meta["arch"], quantize), final_dir / "adapter")
    tokenizer = AutoTokenizer.from_pretrained(final_dir / "tokenizer", local_files_only=True)
    return TripletExtractor(model.eval(), tokenizer, max_new_tokens=meta["max_new_tokens"],
                            batch_size=batch_size)


# --- the importance summariser -----------------------------------------------------------------

@dataclass(frozen=True)
class SummaryPair:
    """A session's source text and its reference summary."""

    id: str
    dialogue: str   # the source: "Speaker: utterance" lines, or (kind "triplets") the serialised triplets
    summary: str
    kind: str = "dialogue"   # "dialogue" or "triplets": which source, hence which instruction (causal)


def session_summary_pairs(episodes: Iterable[Episode], inputs: Sequence[str] = ("dialogue",),
                          separator: str = ". ") -> list[SummaryPair]:
    """Every session with a summary (synthetic data, LoCoMo, MSC/CC summaries) as one pair per input kind:
    its dialogue and, for a session whose turns carry triplets, its triplets joined by ``separator`` as
    the importance scorer lays them out (pipelines.glong.importance.join_triplets). Ids:
    ``<episode>/<session>``, and ``<episode>/<session>:triplets`` for the triplets."""
    from pipelines.glong.prompts import join_triplets

    out = []
    for e in episodes:
        for s in e.sessions:
            if not (s.summary and s.turns):
                continue
            if "dialogue" in inputs:
                out.append(SummaryPair(f"{e.id}/{s.id}", "\n".join(f"{t.speaker}: {t.text}" for t in s.turns),
                                       s.summary))
            triplets = [t for turn in s.turns for t in turn.triplets]
            if "triplets" in inputs and triplets:
                out.append(SummaryPair(f"{e.id}/{s.id}:triplets", join_triplets(triplets, separator)[0], s.summary,
                                       kind="triplets"))
    return out


def read_samsum(path: str | Path) -> list[SummaryPair]:
    """SAMSum as published: a JSON list of {"id", "summary", "dialogue"} ("Name: text" lines)."""
    path = Path(path)
    if not path.exists():
        raise DataError("file does not exist", file=str(path))
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"not a JSON file ({exc})", file=str(path)) from None
    if not isinstance(records, list):
        raise DataError("expected a JSON list of records", file=str(path), record="top level")
    out = []
    for i, r in enumerate(records):
        for key in ("id", "summary", "dialogue"):
            if not isinstance(r, dict) or not isinstance(r.get(key), str) or not r[key].strip():
                raise DataError("missing or empty string", file=str(path), record=i, field=key)
        out.append(SummaryPair(r["id"], r["dialogue"].replace("\r\n", "\n"), r["summary"]))
    return out


class GLongImportanceTask(_EncodedLMTask):
    """Fine-tuning a T5 dialogue summariser, the source of the importance attention."""

    paper = "G-Long (seed 003), attention-aware importance scoring: T5 dialogue summariser"

    def __init__(self, train: Sequence[SummaryPair], valid: Sequence[SummaryPair] | None,
                 config: SummariserTrainConfig):
        if not train:
            raise DataError("no dialogue-summary pair to train the summariser on",
                            rule="non_empty_training_set")
        self.config = config
        from pipelines.models.t5 import resolve_t5_spec

        self.spec = resolve_t5_spec(config.model)
        texts = [config.prefix + p.dialogue for p in train] + [p.summary for p in train]
        self.tokenizer = _tokenizer(config.model, self.spec is not None, texts,
                                    config.tokenizer_vocab)
        self._train = [self.encode(p) for p in train]
        self._valid = [self.encode(p) for p in valid] if valid else None

    def encode(self, pair: SummaryPair) -> dict[str, list[int]]:
        tok, c = self.tokenizer, self.config
        source = tok(c.prefix + pair.dialogue, add_special_tokens=False)["input_ids"]
        target = tok(pair.summary, add_special_tokens=False)["input_ids"]
        return {"input_ids": source[:c.max_source_tokens - 1] + [tok.eos_token_id],
                "labels": target[:c.max_target_tokens - 1] + [tok.eos_token_id]}

    def build_model(self):
        from pipelines.models.t5 import build_t5

        tok = self.tokenizer
        if self.spec is not None:
            return build_t5(self.spec, len(tok), pad_token_id=tok.pad_token_id,
                            eos_token_id=tok.eos_token_id)
        return build_t5(self.config.model)



    def save_final(self, model, out_dir: Path) -> None:
        model.save_pretrained(out_dir)
        self.tokenizer.save_pretrained(out_dir)
