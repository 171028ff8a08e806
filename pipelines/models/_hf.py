"""Shared loading rules of the model factories: local directories first, never a silent hub download.

A name or path that is not a built-in spec goes to ``from_pretrained``. With
``HF_HUB_OFFLINE=1`` (the project's default, set by the Makefile and tests) transformers
only reads local directories and its local cache; a miss becomes a ConfigError that
says what to do instead of a network traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

from pipelines.errors import ConfigError


def hub_offline() -> bool:
    """True when HF_HUB_OFFLINE is set: names resolve only from the local cache."""
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("0", "", "false", "no")


def attn_implementation(model_cls) -> str:
    """"sdpa" (torch's fused scaled-dot-product attention) where the architecture supports it."""
    return "sdpa" if getattr(model_cls, "_supports_sdpa", False) else "eager"


def load_pretrained(model_cls, name_or_path: str | Path, *, model_type: str, vocab_size: int | None = None,
                    **kwargs):
    """``model_cls.from_pretrained`` with the project's errors; checks ``model_type`` and resizes the vocabulary."""
    from transformers import AutoConfig

    ref = str(name_or_path)
    local = Path(ref).is_dir()
    offline = hub_offline()
    try:
        config = AutoConfig.from_pretrained(ref, local_files_only=offline and not local)
    except (OSError, ValueError) as err:
        where = ("a local directory with config.json" if local
                 else "a built-in spec, a local directory or a cached model")
        raise ConfigError(f"cannot load model {ref!r}: it is not {where}"
                          + (" (HF_HUB_OFFLINE is set: no download is attempted)" if offline else "")
                          + f". Cause: {err}") from err
    if config.model_type != model_type:
        raise ConfigError(f"model {ref!r} is a {config.model_type!r} model; this factory builds {model_type!r} models.")
    kwargs.setdefault("attn_implementation", attn_implementation(model_cls))
    model = model_cls.from_pretrained(ref, local_files_only=offline and not local, **kwargs)
    if vocab_size is not None and vocab_size != model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(vocab_size)
    return model


def check_positive(owner: str, **values: float) -> None:
    for name, value in values.items():
        if value < 1:
            raise ConfigError(f"{owner}.{name} is {value}: it must be at least 1.")
