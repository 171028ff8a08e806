"""The declared keys of the resolved configuration, and the check of a whole config before a run.

Every key a stage reads is declared once, where the code declares it:
- a section the code builds into a config dataclass has that dataclass's fields as its keys, typed by their
  annotations: ``synthetic`` -> SyntheticConfig, ``mdr`` -> MDRConfig, ``mdr.teacher`` -> TrainConfig,
  ``emma.dialogue`` -> EMMADialogueConfig, ``glong.extractor`` -> ExtractorTrainConfig, ``llm.reader`` and
  ``llm.judge`` -> LLMConfig (``llm.judge`` may be null: the reader's model judges), ...;
- a section keyed by the names of a registry accepts those names only: ``sources.<loader>``
  (pipelines.data.loaders.LOADERS) and ``benchmark.strategy_settings.<strategy>`` (pipelines.memory.STRATEGIES,
  whose keys are the fields of that strategy's config class);
- the few keys a stage reads without a dataclass of its own (``mdr.tokenizer``, ``emma.eval_examples``,
  ``ingest.max_dropped_turn_share``, ...) are declared by the small settings dataclasses below, a comment on
  every field naming its reader.

:func:`check_keys` refuses an unknown key of one layer (params.yaml, ``--set``, the Dagster run config) with a
:class:`ConfigError` naming the full dotted key, where it came from and the closest known key;
:func:`check_values` checks every value of the resolved config against its field's type, then builds every
config dataclass from its section as the stage will (so its own range and cross-field checks run).
``pipelines.config.resolve`` runs both (check_keys on each layer), so every view of a stage (CLI, Dagster
asset, dvc repro, a launched training process) refuses a bad config before any output is removed.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Literal

from pipelines.errors import ConfigError


def _positive_int(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key} must be a positive integer, got {value!r}.")


def _names(key: str, value: Any) -> None:
    """As pipelines.data.stage.training_sources reads ``<method>.sources`` (empty or null: synthetic)."""
    names = [value] if isinstance(value, str) else value
    if value and not all(isinstance(s, str) and s.strip() for s in names):
        raise ConfigError(f"{key} must be a list of dataset names (synthetic or a configured source), got {value!r}.")


# --- the keys stages read without a config dataclass of their own ------------------------------------------------

@dataclass(frozen=True)
class Globals:
    """Top-level keys: what every stage's MLflow run logs beside its sections (pipelines.config.stage_config)."""

    profile: str = "tiny"    # the defaults of pipelines/config.py PROFILES: tiny (CPU, minutes) or paper
    seed: int = 2022         # seed of every stage (data, initialisation, data order)
    device: str = "cpu"      # torch device of the profile: "cpu", or "auto" (CUDA when there is one)


@dataclass(frozen=True)
class IngestSettings:
    """params.yaml ``ingest``: the loss policy of every load of a published dataset (CLI ingest, ingest_<source>,
    benchmark --path)."""

    # a load that drops more than this share of its turns fails (pipelines.validate.rules.MAX_DROPPED_TURN_SHARE)
    max_dropped_turn_share: float = 0.05

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_dropped_turn_share <= 1.0:
            raise ConfigError(f"ingest.max_dropped_turn_share must lie in [0, 1] (a share of the turns), "
                              f"got {self.max_dropped_turn_share!r}.")


@dataclass(frozen=True)
class BenchmarkSettings:
    """params.yaml ``benchmark`` (pipelines/evaluate/stage.py; the CLI ``benchmark`` reads the last one).
    ``strategy_settings.<strategy>`` is declared by each strategy's config class."""

    suites: list[str] = field(default_factory=list)  # suites run (pipelines/evaluate/suites); empty: [synthetic]
    # texts per forward pass of the dense, hybrid and fused strategies' encoder; None: by device (32 on the CPU, the
    # best measured on 2 cores by benchmarks/embedding_backends.py; 256 on a GPU)
    embedding_batch_size: int | None = None
    # the suites' episodes split into this many shards (benchmark_shard's partitions: Dagster partitions, a dvc.yaml
    # foreach; regenerate dvc.yaml with `make dvc-yaml` after a change), merged by the benchmark stage
    shards: int = 1

    def __post_init__(self) -> None:
        from pipelines.evaluate.suite import load_suite

        for name in self.suites or ():
            load_suite(name)  # ConfigError naming the shipped suites
        if self.embedding_batch_size is not None:
            _positive_int("benchmark.embedding_batch_size", self.embedding_batch_size)
        _positive_int("benchmark.shards", self.shards)


@dataclass(frozen=True)
class MDRStageSettings:
    """params.yaml ``mdr`` keys the MDR stages read beside MDRConfig's (pipelines/mdr/stage.py)."""

    sources: list[str] | str | None = None  # datasets to learn from (pipelines.data.stage.training_sources)
    tokenizer: str = "train"                # "train": a byte-level BPE trained on the examples; else a name / path
    vocab_size: int = 2000                  # vocabulary of that trained BPE

    def __post_init__(self) -> None:
        _names("mdr.sources", self.sources)
        _positive_int("mdr.vocab_size", self.vocab_size)


@dataclass(frozen=True)
class GenerationSettings:
    """params.yaml ``mdr.generation``: MDR's responses in the benchmark (pipelines/evaluate/stage.py, CLI)."""

    max_new_tokens: int = 32   # greedy decoding stops after this many tokens

    def __post_init__(self) -> None:
        _positive_int("mdr.generation.max_new_tokens", self.max_new_tokens)


@dataclass(frozen=True)
class GLongStageSettings:
    """params.yaml ``glong`` keys the G-Long stages read beside their sections (pipelines/glong/stage.py)."""

    # the extractor's datasets (pipelines.data.stage.training_sources): synthetic keeps its split by episode;
    # any other (personaext) is split by utterance (pipelines.glong.extractor.utterance_split)
    sources: list[str] | str | None = None
    valid_share: float = 0.05  # of a dataset split by utterance: the share held back for validation
    test_share: float = 0.10   # ... and the share held back for scoring (never trained on)
    max_train_examples: int | None = None  # at most this many training utterances, a seeded sample (null: all)
    max_valid_examples: int | None = None  # at most this many validation utterances (null: all)
    eval_examples: int = 64    # held-back utterances the trained extractor is scored on, per dataset (half with
                               # facts where there are fact-free ones), fine-tuned and zero-shot

    def __post_init__(self) -> None:
        _names("glong.sources", self.sources)
        _positive_int("glong.eval_examples", self.eval_examples)
        for key in ("max_train_examples", "max_valid_examples"):
            if getattr(self, key) is not None:
                _positive_int(f"glong.{key}", getattr(self, key))
        for key in ("valid_share", "test_share"):
            if not 0.0 < getattr(self, key) < 1.0:
                raise ConfigError(f"glong.{key} must lie strictly between 0 and 1 (a share of the utterances), "
                                  f"got {getattr(self, key)!r}.")
        if self.valid_share + self.test_share >= 1.0:
            raise ConfigError(f"glong.valid_share + glong.test_share is {self.valid_share + self.test_share:g}: "
                              "nothing would be left to train on; keep their sum below 1.")


@dataclass(frozen=True)
class RerankStageSettings:
    """params.yaml ``rerank`` keys the reranker stage reads beside its sections (pipelines/rerank/stage.py)."""

    sources: list[str] | str | None = None  # datasets to learn from (pipelines.data.stage.training_sources)

    def __post_init__(self) -> None:
        _names("rerank.sources", self.sources)


@dataclass(frozen=True)
class EMMAStageSettings:
    """params.yaml ``emma`` keys the EMMA stages and the benchmark read beside their sections."""

    sources: list[str] | str | None = None  # datasets to learn from (pipelines.data.stage.training_sources)
    eval_examples: int = 64                 # generation test turns the benchmark answers (pipelines/evaluate/stage.py)

    def __post_init__(self) -> None:
        _names("emma.sources", self.sources)
        _positive_int("emma.eval_examples", self.eval_examples)


@dataclass(frozen=True)
class LLMSettings:
    """params.yaml ``llm`` top keys: how the benchmark's suites are answered (pipelines/evaluate/answers/run.py)
    and traced (pipelines/tracking.py). ``llm.reader`` and ``llm.judge`` are LLMConfig sections (pipelines/llm)."""

    max_questions: int | None = None        # questions each reader answers per suite, evenly spaced (null: all)
    full_history_tokens: int | None = None  # cap of the full-history reader's context (null: the model's window)
    trace_sample: float = 1.0               # share of the answers logged as MLflow traces (0: none, 1: all)

    def __post_init__(self) -> None:
        for key in ("max_questions", "full_history_tokens"):
            if getattr(self, key) is not None:
                _positive_int(f"llm.{key}", getattr(self, key))
        if not 0.0 <= self.trace_sample <= 1.0:
            raise ConfigError(f"llm.trace_sample must lie in [0, 1] (a share of the answers), "
                              f"got {self.trace_sample!r}.")


# --- the declaration: sections of typed keys ---------------------------------------------------------------------

Base = Callable[[dict, Path], dict]  # (resolved config, project root) -> values the stage puts under a section's own


@dataclass(frozen=True)
class Section:
    """The declared keys of one mapping of the config.

    ``configs`` are the dataclasses built from it (their fields, less ``internal``, are its typed keys), ``leaves``
    further typed keys, ``sections`` the keys holding a nested mapping; ``base`` gives the values a stage adds
    under the section's own before it builds the dataclasses (e.g. the top-level seed). A ``nullable`` section
    may also be null (e.g. ``llm.judge: null``: the reader's model judges).
    """

    configs: tuple[type, ...] = ()
    leaves: dict[str, Any] = field(default_factory=dict)
    sections: dict[str, "Section"] = field(default_factory=dict)
    internal: tuple[str, ...] = ()
    base: Base | None = None
    nullable: bool = False
    _hints: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def hints(self) -> dict[str, Any]:
        """Typed keys -> their type hints."""
        if not self._hints:
            for cls in self.configs:
                try:
                    hints = typing.get_type_hints(cls)
                except NameError:  # an annotation naming a type-checking-only import: the key is known, untyped
                    hints = {}
                self._hints.update({f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)
                                    if f.name not in self.internal})
            self._hints.update(self.leaves)
        return self._hints

    def known(self) -> list[str]:
        return sorted({*self.hints(), *self.sections})


def _seed(config: dict, root: Path) -> dict:
    return {"seed": config.get("seed", 2022)}


def _train(config: dict, root: Path) -> dict:
    """What pipelines.training.stage.train_stage puts under a training section's knobs."""
    return {"output_dir": str(root / "models" / ".runs"), "seed": config.get("seed", 2022), "model_name": "mnemos"}


def _emma_train(part: str) -> Base:
    """emma.<part>_train goes over the TrainConfig that emma.<part> derives (pipelines/emma/stage.py)."""
    def base(config: dict, root: Path) -> dict:
        from pipelines.emma.dialogue import EMMADialogueConfig
        from pipelines.emma.retriever import RetrieverConfig

        cls = EMMADialogueConfig if part == "dialogue" else RetrieverConfig
        return cls(**config["emma"].get(part, {})).train_config(root / "models" / ".runs").to_dict()
    return base


def _rerank_train(config: dict, root: Path) -> dict:
    """rerank.train goes over the TrainConfig that rerank.model derives (pipelines/rerank/stage.py)."""
    from pipelines.rerank.cross_encoder import CrossEncoderConfig

    return CrossEncoderConfig(**config.get("rerank", {}).get("model", {})).train_config(
        root / "models" / ".runs").to_dict()


def _strategy(name: str) -> Base:
    """A strategy's settings go over the project's defaults for it (pipelines.evaluate.suite.strategy_defaults)."""
    def base(config: dict, root: Path) -> dict:
        from pipelines.evaluate.suite import strategy_defaults

        batch = config.get("benchmark", {}).get("embedding_batch_size", 64)
        return strategy_defaults([name], root, embedding_batch_size=batch).get(name, {})
    return base


@lru_cache(maxsize=1)
def declared() -> Section:
    """The declaration of the whole resolved config (built once: it imports the config classes)."""
    from pipelines.data.loaders import LOADERS
    from pipelines.data.synthetic import SyntheticConfig
    from pipelines.emma.dialogue import EMMADialogueConfig
    from pipelines.emma.formats import FormatConfig
    from pipelines.emma.retriever import RetrieverConfig, RetrieverFolds
    from pipelines.rerank.cross_encoder import CrossEncoderConfig
    from pipelines.training.folds import Folds
    from pipelines.glong.config import ExtractorTrainConfig, SummariserTrainConfig
    from pipelines.llm.config import LLMConfig
    from pipelines.mdr.config import MDRConfig
    from pipelines.memory import STRATEGIES
    from pipelines.training.config import TrainConfig

    def train(base: Base = _train) -> Section:
        return Section((TrainConfig,), internal=("output_dir",), base=base)

    strategies = {name: Section((cls.config_class,), base=_strategy(name)) for name, cls in STRATEGIES.items()}
    return Section((Globals,), sections={
        "synthetic": Section((SyntheticConfig,), base=_seed),
        "sources": Section(leaves={name: str | None for name in LOADERS}),
        "ingest": Section((IngestSettings,)),
        "benchmark": Section((BenchmarkSettings,), sections={"strategy_settings": Section(sections=strategies)}),
        "mdr": Section((MDRConfig, MDRStageSettings), sections={
            "teacher": train(), "student": train(), "decoder": train(),
            "generation": Section((GenerationSettings,))}),
        "glong": Section((GLongStageSettings,), sections={
            "extractor": Section((ExtractorTrainConfig,)), "extractor_train": train(),
            "summariser": Section((SummariserTrainConfig,)), "summariser_train": train()}),
        "llm": Section((LLMSettings,), sections={
            "reader": Section((LLMConfig,)), "judge": Section((LLMConfig,), nullable=True)}),
        "emma": Section((EMMAStageSettings,), sections={
            "formats": Section((FormatConfig,)),
            "dialogue": Section((EMMADialogueConfig,)), "dialogue_train": train(_emma_train("dialogue")),
            "retriever": Section((RetrieverConfig,)), "retriever_train": train(_emma_train("retriever")),
            "retriever_folds": Section((RetrieverFolds,), internal=("where",))}),
        "rerank": Section((RerankStageSettings,), sections={
            "model": Section((CrossEncoderConfig,)), "train": train(_rerank_train),
            "folds": Section((Folds,), internal=("where",))}),
    })


# --- unknown keys ------------------------------------------------------------------------------------------------

UNKNOWN = object()  # the declaration of a key that is not declared


def _walk(values: dict, section: Section, prefix: str = ""):
    """(dotted key, value, declaration) of every key of ``values``, nested sections included; the declaration is
    a type hint (a typed key), a Section (a nested mapping) or UNKNOWN."""
    hints = section.hints()
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if key in section.sections:
            yield dotted, value, section.sections[key]
            if isinstance(value, dict):
                yield from _walk(value, section.sections[key], dotted + ".")
        else:
            yield dotted, value, hints.get(key, UNKNOWN)


def _all_keys(section: Section, prefix: str = "") -> list[str]:
    out = [f"{prefix}{k}" for k in section.hints()]
    for key, sub in section.sections.items():
        out.append(f"{prefix}{key}")
        out.extend(_all_keys(sub, f"{prefix}{key}."))
    return out


def _suggest(dotted: str, section: Section) -> str:
    """The closest known key of the same level, else known keys elsewhere ending in a close name."""
    parent, _, name = dotted.rpartition(".")
    prefix = f"{parent}." if parent else ""
    close = difflib.get_close_matches(str(name), section.known(), n=1)
    if close:
        return f"did you mean {prefix}{close[0]}?"
    elsewhere = [k for k in _all_keys(declared()) if difflib.get_close_matches(str(name), [k.rpartition(".")[2]],
                                                                               cutoff=0.8)]
    if elsewhere:
        return f"did you mean {' or '.join(elsewhere[:3])}?"
    return f"known keys {'of ' + parent if parent else 'at the top level'}: {', '.join(section.known())}."


def _parent(dotted: str) -> Section:
    """The declaration of the mapping that holds ``dotted`` (its parents are known)."""
    section = declared()
    for part in dotted.split(".")[:-1]:
        section = section.sections[part]
    return section


def check_keys(values: dict | None, origin: str) -> None:
    """ConfigError listing every key of ``values`` (one layer: params.yaml, --set, ...) that is not declared.

    Each line names the full dotted key, ``origin`` and the closest known key; a declared section given
    something other than a mapping is refused too.
    """
    problems = []
    for dotted, value, declaration in _walk(values or {}, declared()):
        if declaration is UNKNOWN:
            problems.append(dotted)
        elif isinstance(declaration, Section) and not isinstance(value, dict):
            if value is None and declaration.nullable:
                continue
            raise ConfigError(f"{origin}: {dotted} is a section, a mapping of keys (write {{}} for none"
                              + (", or null" if declaration.nullable else "") + f"), got {value!r}.")
    if problems:
        lines = [f"{origin}: unknown key {d}; {_suggest(d, _parent(d))}" for d in problems]
        raise ConfigError("\n".join(lines))


# --- values ------------------------------------------------------------------------------------------------------

def _matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` (as YAML gives it) fits type ``hint``; a list stands for a tuple, an int for a float."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (tuple, list) or hint in (tuple, list):
        if not isinstance(value, (list, tuple)):
            return False
        if len(args) == 2 and args[1] is Ellipsis or origin is list:
            return all(_matches(v, args[0]) for v in value) if args else True
        return not args or (len(value) == len(args) and all(_matches(v, a) for v, a in zip(value, args)))
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    return True  # a type this check does not know: the dataclass checks it


def _describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin in (tuple, list):
        if len(args) == 2 and args[1] is Ellipsis or origin is list:
            return f"a list of {_describe(args[0]).removeprefix('a ').removeprefix('an ')}s" if args else "a list"
        return f"a list of {len(args)} ({', '.join(_describe(a) for a in args)})"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null",
             dict: "a mapping"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def _type_error(dotted: str, value: Any, hint: Any, origin: str) -> ConfigError:
    hint_text = ""
    if isinstance(value, str) and _matches(1.0, hint):
        try:
            float(value)
            hint_text = (f" (YAML reads a number like {value} as a string: write it with a dot and a signed "
                         "exponent, e.g. 1.0e-4)")
        except ValueError:
            pass
    return ConfigError(f"{origin}: {dotted} must be {_describe(hint)}, got {value!r}{hint_text}.")


def _sets(layer: dict, dotted: str) -> bool:
    """Whether ``layer`` holds the (possibly nested) key ``dotted``."""
    node: Any = layer
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _origin_of(dotted: str, layers: list[tuple[str, dict]]) -> str:
    """The label of the highest-priority layer that sets ``dotted``."""
    return next((label for label, layer in layers if _sets(layer, dotted)), "config")


def _build(section: Section, values: dict, config: dict, root: Path, dotted: str,
           layers: list[tuple[str, dict]]) -> None:
    """Build every dataclass of ``section`` from ``values`` over its base, as the stage will; a refusal names
    the section and the layers that set something in it."""
    if not section.configs:
        return
    try:
        base = section.base(config, root) if section.base else {}
        for cls in section.configs:
            names = {f.name for f in dataclasses.fields(cls)}
            cls(**{k: v for k, v in {**base, **values}.items() if k in names})
    except (ConfigError, TypeError, ValueError, AttributeError) as exc:  # the last three: a check not phrased
        named = [k for k in values if re.search(rf"\.{re.escape(str(k))}\b", str(exc))]  # keys the message names
        where = dict.fromkeys(_origin_of(f"{dotted}.{k}", layers) for k in named) if dotted else {}
        origin = f" (set in {', '.join(where)})" if where else ""
        raise ConfigError(f"{dotted or 'config'}{origin}: {exc}") from exc


def check_values(config: dict, root: Path, layers: list[tuple[str, dict]] | None = None) -> None:
    """Check every value of the resolved ``config``: its type first, then the dataclasses built from it.

    ``layers`` (label, values), highest priority first, name where a badly typed value came from.
    """
    layers = layers or []
    for dotted, value, declaration in _walk(config, declared()):
        if declaration is UNKNOWN or isinstance(declaration, Section):
            continue
        if not _matches(value, declaration):
            raise _type_error(dotted, value, declaration, _origin_of(dotted, layers))
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{_origin_of(dotted, layers)}: {dotted} must be a finite number, got {value!r}.")

    def build(section: Section, values: dict, dotted: str) -> None:
        _build(section, values, config, root, dotted, layers)
        for key, sub in section.sections.items():
            if isinstance(values.get(key), dict):  # check_keys refused any other value of a section
                build(sub, values[key], f"{dotted}.{key}" if dotted else key)

    build(declared(), config, "")
