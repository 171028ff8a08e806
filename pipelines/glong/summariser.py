"""The small profile's importance summariser: a decoder-only instruction model fine-tuned to summarise.

G-Long's importance module (seed 003, section 3.2) reads the cross-attention of a T5 summariser
fine-tuned on SAMSum. No pretrained T5 can be loaded offline here; the small profile starts from
the pretrained model it has, SmolLM2-135M-Instruct (``glong.summariser.model``, resolved by
:func:`pipelines.llm.config.pretrained_folder`), fine-tunes it on session -> summary pairs, and
:class:`pipelines.glong.importance.CausalImportanceScorer` reads its last layer's self-attention
from the summary to the triplets in the prompt (the module docstring there says why that stands in
for the cross-attention).

- Pairs (:func:`summariser_pairs`): every session with a summary of the configured sources
  (``glong.summariser.sources``: the synthetic data, LoCoMo's ``session_summary`` when
  ``sources.locomo`` is configured), with the session's dialogue and, where it has triplets, its
  triplets as the source text (``inputs``). LoCoMo is published as one file whose conversations are
  all ``test``: its last ``holdout_episodes`` conversations validate, the others train. The
  summariser thereby reads summaries of conversations the LoCoMo suite asks about (never a question
  or an answer), which only re-weights triplets that the retrieval then ranks.
- Prompt (:func:`pipelines.glong.importance.summary_prompt`): the chat template around one user
  message, an instruction (:data:`~pipelines.glong.importance.DIALOGUE_INSTRUCTION` or
  :data:`~pipelines.glong.importance.TRIPLETS_INSTRUCTION`), a blank line and the source; the answer
  is the summary and EOS. The loss is the token cross-entropy on the answer only,

      L = -(1/N) sum_{t in summary} log p(y_t | prompt, y_<t)

  A source longer than ``max_source_tokens`` keeps its head, as the summary (cut to
  ``max_target_tokens``) keeps its head: both follow the session in time order.
- Adaptation: LoRA on the linear projections of the top ``lora_layers`` blocks (all blocks with 0),
  the base frozen in full precision. Why the top blocks: on 2 CPU cores a full fine-tune of 135M
  parameters costs about three times as much per token (the backward pass stops at the lowest
  adapted block), while the importance is read from the last layer's attention, which the top
  blocks shape; the lower blocks keep the pretrained representations.
- Saved folder: ``adapter/`` (peft), ``tokenizer/`` and ``summariser.json`` (the base reference, the
  instruction and separator of the scorer's prompt, its window and summary length), which
  :func:`pipelines.glong.importance.load_importance_scorer` recognises.
- Check: the stage summarises the held-out pairs greedily (:func:`generate_summaries`) and scores
  ROUGE-L against their reference summaries.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

import torch

from pipelines.data.schema import Episode
from pipelines.errors import ConfigError, DataError
from pipelines.glong.config import ImportanceConfig, SummariserTrainConfig
from pipelines.data.sampling import evenly_spaced
from pipelines.glong.prompts import CAUSAL_SEPARATOR, DIALOGUE_INSTRUCTION, TRIPLETS_INSTRUCTION, summary_prompt
from pipelines.glong.tasks import IGNORE, SummaryPair, _EncodedLMTask, linear_module_names, session_summary_pairs

SUMMARISER_META = "summariser.json"
INSTRUCTIONS = {"dialogue": DIALOGUE_INSTRUCTION, "triplets": TRIPLETS_INSTRUCTION}


# --- pairs ---------------------------------------------------------------------------------------

def summariser_pairs(sources: Mapping[str, Mapping[str, Sequence[Episode]]], config: SummariserTrainConfig,
                     separator: str | None = None) -> tuple[list[SummaryPair], list[SummaryPair]]:
    """(train, valid) pairs from ``sources``: dataset name -> split -> episodes (in file order).

    A dataset with a train split gives its train and valid sessions to the same splits (its test split is
    the benchmark's, never read). A dataset without one (LoCoMo: every conversation is ``test``) is split
    by episode: its last ``holdout_episodes`` validate, the others train. Then ``max_train_pairs`` and
    ``max_valid_pairs`` cap each split, evenly spaced. ``separator``: the triplet separator (default: the
    scorer's for ``config.arch``).
    """
    if separator is None:
        separator = CAUSAL_SEPARATOR if config.arch == "causal" else ImportanceConfig().separator
    train, valid = [], []
    for splits in sources.values():
        if splits.get("train"):
            train_eps, valid_eps = list(splits["train"]), list(splits.get("valid") or [])
        else:
            everything = [e for split in ("train", "valid", "test") for e in splits.get(split) or []]
            cut = max(len(everything) - config.holdout_episodes, 0)
            train_eps, valid_eps = everything[:cut], everything[cut:]
        train += session_summary_pairs(train_eps, config.inputs, separator)
        valid += session_summary_pairs(valid_eps, config.inputs, separator)
    return evenly_spaced(train, config.max_train_pairs), evenly_spaced(valid, config.max_valid_pairs)


# --- training ------------------------------------------------------------------------------------

def head_tokens(tokenizer, text: str, limit: int) -> str:
    """The longest head of ``text`` that is at most ``limit`` tokens (cut at a token boundary)."""
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return text if len(offsets) <= limit else text[:offsets[limit - 1][1]]


def base_reference(model: str) -> str:
    """What ``summariser.json`` names as the base: a folder as an absolute path, a model name as given."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.is_dir() else model


class CausalSummariserTask(_EncodedLMTask):
    """LoRA fine-tuning of a decoder-only summariser (engine ``TrainTask``); see the module docstring."""

    paper = ("G-Long (seed 003), attention-aware importance scoring; small profile: a decoder-only "
             "summariser (LoRA) whose self-attention over the prompt stands in for T5's cross-attention")

    def __init__(self, train: Sequence[SummaryPair], valid: Sequence[SummaryPair] | None,
                 config: SummariserTrainConfig):
        from transformers import AutoTokenizer

        from pipelines.llm.build import pretrained_folder

        if not train:
            raise DataError("no session with a summary to train the summariser on (glong.summariser.sources)",
                            rule="non_empty_training_set")
        if config.arch != "causal":
            raise ConfigError(f"CausalSummariserTask trains glong.summariser.arch 'causal', got {config.arch!r}.")
        self.config = config
        self.base = pretrained_folder(config.model)
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.base), local_files_only=True)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.tokenizer.eos_token_id is None:
            raise ConfigError(f"the tokenizer of {config.model!r} has no end-of-sequence token.")
        self._train = [self.encode(p) for p in train]
        self._valid = [self.encode(p) for p in valid] if valid else None

    def encode(self, pair: SummaryPair) -> dict[str, list[int]]:
        tok, c = self.tokenizer, self.config
        source = head_tokens(tok, pair.dialogue, c.max_source_tokens)
        prompt = tok(summary_prompt(tok, INSTRUCTIONS[pair.kind], source), add_special_tokens=False)["input_ids"]
        summary = tok(pair.summary, add_special_tokens=False)["input_ids"][:c.max_target_tokens - 1]
        answer = summary + [tok.eos_token_id]
        return {"input_ids": prompt + answer, "labels": [IGNORE] * len(prompt) + answer}

    def train_lengths(self) -> list[int]:
        return [len(item["input_ids"]) for item in self._train]

    def build_model(self):
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        from pipelines.training.checkpoint import adapter_only_checkpoints

        c = self.config
        model = AutoModelForCausalLM.from_pretrained(str(self.base), local_files_only=True, dtype=torch.float32)
        blocks = model.config.num_hidden_layers
        top = list(range(blocks - c.lora_layers, blocks)) if 0 < c.lora_layers < blocks else None
        targets = [name for name in linear_module_names(model) if name != "lm_head"]
        lora = LoraConfig(r=c.lora_r, lora_alpha=c.lora_alpha, lora_dropout=c.lora_dropout, target_modules=targets,
                          layers_to_transform=top, task_type="CAUSAL_LM")
        return adapter_only_checkpoints(get_peft_model(model, lora))

    def target_labels(self, labels):
        """Causal LMs predict token t+1 from token t: the first label is never a target."""
        return labels[:, 1:]

    def save_final(self, model, out_dir: Path) -> None:
        out_dir, c = Path(out_dir), self.config
        model.save_pretrained(out_dir / "adapter")
        self.tokenizer.save_pretrained(out_dir / "tokenizer")
        meta = {"arch": "causal", "base": base_reference(c.model), "instruction": TRIPLETS_INSTRUCTION,
                "separator": CAUSAL_SEPARATOR, "max_input_tokens": c.max_source_tokens,
                "max_summary_tokens": c.max_target_tokens}
        (out_dir / SUMMARISER_META).write_text(json.dumps(meta, indent=1))


def load_causal_summariser(folder: str | Path, device: str = "cpu"):
    """(model, tokenizer, meta) of a folder :class:`CausalSummariserTask` saved: the base with the adapter
    merged into it (eager attention, whose weights the scorer reads), in eval mode on ``device``."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipelines.llm.build import pretrained_folder

    folder = Path(folder)
    meta = json.loads((folder / SUMMARISER_META).read_text())
    base = AutoModelForCausalLM.from_pretrained(str(pretrained_folder(meta["base"])), local_files_only=True,
                                                dtype=torch.float32, attn_implementation="eager")
    model = PeftModel.from_pretrained(base, str(folder / "adapter")).merge_and_unload()
    tokenizer = AutoTokenizer.from_pretrained(str(folder / "tokenizer"), local_files_only=True)
    return model.to(device).eval(), tokenizer, meta


def generate_summaries(model, tokenizer, pairs: Sequence[SummaryPair], max_source_tokens: int,
                       max_new_tokens: int) -> list[str]:
    """Greedy summaries of ``pairs`` (their sources laid out as in training), one at a time."""
    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for pair in pairs:
            source = head_tokens(tokenizer, pair.dialogue, max_source_tokens)
            ids = tokenizer(summary_prompt(tokenizer, INSTRUCTIONS[pair.kind], source),
                            add_special_tokens=False, return_tensors="pt")["input_ids"].to(device)   # (1, T)
            generated = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                       num_beams=1, max_new_tokens=max_new_tokens,
                                       pad_token_id=tokenizer.pad_token_id)                         # (1, T + T_gen)
            out.append(tokenizer.decode(generated[0, ids.shape[1]:], skip_special_tokens=True).strip())
    return out
