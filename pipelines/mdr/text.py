"""Token layouts of MDR (seed 001) and the padding that turns them into tensors.

Every text an encoder reads (Q, P, a history round, R) is ``tokens(text) + [eos]``: the causal
GPT-2 encoder's last position has then seen the whole text, and the token features of R line up
one to one with the decoder's targets (R tokens and the closing eos). A history round is
``tokens(Q) + [sep] + tokens(R) + [eos]``. The decoders read ``[prefix ; tokens(Q) ; sep ;
tokens(R) ; eos]`` and are trained on the R tokens and the eos (DialoGPT's layout, where sep and
eos are both ``<|endoftext|>``). Padding is on the right and masked; the pad id is eos.

:class:`Codec` wraps either a ``transformers`` tokenizer or a raw ``tokenizers.Tokenizer``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch

from pipelines.errors import ConfigError

IGNORE = -100  # label of positions that are not targets (PyTorch's cross-entropy ignore_index)


class Codec:
    """Text <-> ids with the special tokens MDR uses, over either tokenizer library."""

    def __init__(self, tokenizer: Any, eos_token: str = "<|endoftext|>", sep_token: str | None = None):
        self.tokenizer = tokenizer
        self._raw = hasattr(tokenizer, "token_to_id") and not hasattr(tokenizer, "convert_tokens_to_ids")
        self.eos_id = self._token_id(eos_token, "eos_token")
        self.sep_id = self._token_id(sep_token or eos_token, "sep_token")
        self.pad_id = self.eos_id

    def _token_id(self, token: str, what: str) -> int:
        if self._raw:
            idx = self.tokenizer.token_to_id(token)
        else:
            idx = self.tokenizer.convert_tokens_to_ids(token)
            if idx is not None and idx == getattr(self.tokenizer, "unk_token_id", None) and \
                    token != getattr(self.tokenizer, "unk_token", None):
                idx = None
        if idx is None:
            raise ConfigError(f"mdr.{what} {token!r} is not a token of the tokenizer: train the tokenizer with it "
                              f"as a special token, or set mdr.{what} to one it has.")
        return int(idx)

    @property
    def vocab_size(self) -> int:
        if self._raw:
            return int(self.tokenizer.get_vocab_size(with_added_tokens=True))
        return len(self.tokenizer)

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without any special token added."""
        if self._raw:
            return list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens dropped."""
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)

    # --- the layouts ------------------------------------------------------------------------
    def encoder_ids(self, text: str, max_tokens: int) -> list[int]:
        """``tokens(text)[:max_tokens] + [eos]``: what an encoder reads for one text."""
        return self.encode(text)[:max_tokens] + [self.eos_id]

    def round_ids(self, query: str, response: str, max_tokens: int) -> list[int]:
        """One history round ``tokens(Q) + [sep] + tokens(R) + [eos]``, cut to ``max_tokens`` + eos."""
        ids = self.encode(query) + [self.sep_id] + self.encode(response)
        return ids[:max_tokens] + [self.eos_id]

    def decoder_ids(self, query: str, response: str, max_query: int, max_response: int
                    ) -> tuple[list[int], list[int]]:
        """``(tokens(Q) + [sep] + tokens(R) + [eos], labels)`` with labels IGNORE on the query part."""
        q = self.encode(query)[:max_query] + [self.sep_id]
        r = self.encoder_ids(response, max_response)
        return q + r, [IGNORE] * len(q) + r

    def save(self, out_dir: Path) -> None:
        """Write the tokenizer next to a model (``tokenizer.json`` or ``save_pretrained``)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        if self._raw:
            self.tokenizer.save(str(out_dir / "tokenizer.json"))
        else:
            self.tokenizer.save_pretrained(str(out_dir))


def load_codec(path: str | Path, eos_token: str = "<|endoftext|>", sep_token: str | None = None) -> Codec:
    """A Codec over the tokenizer saved in ``path`` (a folder from save_pretrained or a tokenizer.json)."""
    path = Path(path)
    if path.is_file():
        from tokenizers import Tokenizer
        return Codec(Tokenizer.from_file(str(path)), eos_token, sep_token)
    if not path.is_dir():
        raise ConfigError(f"tokenizer path {path} does not exist.")
    if (path / "tokenizer_config.json").exists():
        from transformers import AutoTokenizer
        return Codec(AutoTokenizer.from_pretrained(str(path), local_files_only=True), eos_token, sep_token)
    if (path / "tokenizer.json").exists():
        from tokenizers import Tokenizer
        return Codec(Tokenizer.from_file(str(path / "tokenizer.json")), eos_token, sep_token)
    raise ConfigError(f"no tokenizer in {path}: expected tokenizer.json or a save_pretrained folder.")


def pad(seqs: Sequence[Sequence[int]], value: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad lists of ids: ``(ids (N, L), mask (N, L))``; ``N = 0`` gives ``(0, 1)`` tensors."""
    length = max((len(s) for s in seqs), default=1)
    ids = torch.full((len(seqs), length), value, dtype=torch.long)
    mask = torch.zeros((len(seqs), length), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(list(s), dtype=torch.long)
        mask[i, :len(s)] = 1
    return ids, mask
