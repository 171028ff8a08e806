"""Data stages: generate the synthetic source, ingest every configured source.

Ingestion = load the source's published files, normalising its known quirks
(``pipelines.data.loaders``) -> validate the canonical tables and what the load left out
(``pipelines.validate``, the loss policy set by params.yaml ``ingest``) -> write
``data/canonical/<source>/`` only when no blocking rule failed: the same
``pipelines.data.ingest.stream_and_validate`` as ``python -m pipelines ingest`` (a LongMemEval
file streamed in two passes, one episode at a time; the other sources loaded whole, as
``load_and_validate`` for ``benchmark --path``). The validation report (HTML + JSON) is written in every case to
``reports/validation/<source>.*`` and each rule becomes a Dagster asset check.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.config import load_params
from pipelines.config_schema import seed_base
from pipelines.data.ingest import IngestSettings
from pipelines.data.loaders import LOADERS
from pipelines.data.synthetic import SyntheticConfig
from pipelines.registry import CheckSpec, Section, StageResult, config_section, stage

RAW_SYNTHETIC = "data/raw/synthetic"

config_section("synthetic", Section((SyntheticConfig,), base=seed_base))
config_section("sources", Section(leaves={name: str | None for name in LOADERS}))  # sources.<loader>: a path
config_section("ingest", Section((IngestSettings,)))


def canonical_dir(source: str) -> str:
    return f"data/canonical/{source}"


def training_sources(section: dict | None, name: str) -> tuple[str, ...]:
    """The canonical datasets a method learns from: params.yaml ``<name>.sources`` (default: synthetic).

    Each entry is ``synthetic`` or a source configured in params.yaml ``sources`` (whose
    ``ingest_<source>`` stage writes ``data/canonical/<source>/``).
    """
    from pipelines.errors import ConfigError

    sources = (section or {}).get("sources") or ["synthetic"]
    if isinstance(sources, str):
        sources = [sources]
    if not isinstance(sources, (list, tuple)) or not all(isinstance(s, str) and s for s in sources):
        raise ConfigError(f"{name}.sources must be a list of dataset names (synthetic or a configured source), "
                          f"got {sources!r}.")
    return tuple(dict.fromkeys(sources))


def training_inputs(name: str) -> tuple[str, ...]:
    """The canonical folders of ``<name>.sources`` in params.yaml: the stage inputs (Dagster, dvc.yaml)."""
    return tuple(canonical_dir(s) for s in training_sources(load_params().get(name), name))


def training_split(ctx, name: str, split: str) -> list[tuple[Path, list]]:
    """(file, episodes) of ``split`` for each source of ``<name>.sources`` that has that split.

    A source whose canonical folder does not exist is a ConfigError saying how to make it; a source
    without the split (a dataset published as one file) contributes nothing to it.
    """
    from pipelines.data.schema import read_episodes
    from pipelines.errors import ConfigError

    out = []
    for source in training_sources(ctx.config.get(name), name):
        folder = ctx.path(canonical_dir(source))
        if not folder.is_dir():
            how = ("run the synthetic and ingest_synthetic stages" if source == "synthetic" else
                   f"set params.yaml sources.{source} to its published files and run ingest_{source}")
            raise ConfigError(f"{name}.sources names {source!r}, but {folder} does not exist: {how}.")
        path = folder / f"{split}.jsonl"
        if path.exists():
            out.append((path, read_episodes(path)))
    if split == "train" and not out:
        raise ConfigError(f"{name}.sources {list(training_sources(ctx.config.get(name), name))} has no train "
                          "split: no <source>/train.jsonl under data/canonical.")
    return out


def training_episodes(ctx, name: str, split: str) -> list:
    """The episodes of ``split`` from every source of ``<name>.sources`` (:func:`training_split`), in order."""
    return [episode for _, episodes in training_split(ctx, name, split) for episode in episodes]


def _rule_specs() -> list[CheckSpec]:
    from pipelines.validate import RULES

    return [CheckSpec(name, rule.description, rule.blocking) for name, rule in RULES.items()]


@stage(name="synthetic", group="data", params=("synthetic",), outputs=(RAW_SYNTHETIC,),
       code=("pipelines/data/synthetic.py", "pipelines/data/synthetic_lexicon.py", "pipelines/data/schema.py"))
def synthetic(ctx) -> StageResult:
    """Synthetic mixed-session episodes (deterministic from the seed): the tiny profile's data.

    Episodes with a main speaker and partners, facts with ground-truth triplets, egocentric
    memories with links and tags, and queries of four kinds with evidence ids, split by episode.
    """
    from pipelines.data.synthetic import SyntheticConfig, generate, write_splits

    knobs = dict(ctx.config["synthetic"])
    knobs.setdefault("seed", ctx.config.get("seed", 2022))
    episodes = generate(SyntheticConfig(**knobs))
    counts = write_splits(episodes, ctx.path(RAW_SYNTHETIC))
    meta = {f"episodes_{split}": n for split, n in counts.items()}
    meta["sessions"] = sum(len(e.sessions) for e in episodes)
    meta["turns"] = sum(len(s.turns) for e in episodes for s in e.sessions)
    meta["queries"] = sum(len(e.queries) for e in episodes)
    return StageResult(metadata=meta, metrics={k: float(v) for k, v in meta.items()})


def ingest_and_validate(ctx, source: str, path: Path, name: str) -> StageResult:
    """Load ``path`` with loader ``source``, validate it, write canonical data only if it passes.

    ``name`` names the dataset: its report is reports/validation/<name>.html and its canonical
    data goes to data/canonical/<name>/. The metadata carries the counts, what was dropped and
    flagged by reason with the first examples of each, and the validation warnings.
    """
    from pipelines.data.ingest import stream_and_validate, write_streamed

    html = ctx.path(f"reports/validation/{name}.html")
    checked = stream_and_validate(source, path, config=ctx.config, report=html)  # LongMemEval M: streamed
    report = checked.report
    if ctx.tracker is not None:
        ctx.tracker.log_artifact(html, artifact_path="validation")
        ctx.tracker.log_artifact(html.with_suffix(".json"), artifact_path="validation")
    meta = {"source": source, "path": str(path), "validation_report": str(html),
            "validation_report_url": html.resolve().as_uri()}
    if not report.passed:
        return StageResult(metadata=meta, checks=list(report.outcomes))
    counts = write_streamed(checked, ctx.path(canonical_dir(name)))
    meta.update(counts)
    metrics = {k: float(v) for k, v in counts.items() if isinstance(v, (int, float))}
    metrics.update({f"dropped.{k}": float(v) for k, v in counts["dropped"].items()})
    metrics.update({f"flagged.{k}": float(v) for k, v in counts["flagged"].items()})
    return StageResult(metadata=meta, metrics=metrics, checks=list(report.outcomes))


@stage(name="ingest_synthetic", group="data", params=("ingest",), inputs=(RAW_SYNTHETIC,),
       outputs=(canonical_dir("synthetic"),), checks=_rule_specs(),
       code=("pipelines/data", "pipelines/validate"))
def ingest_synthetic(ctx) -> StageResult:
    """Ingest and validate the synthetic source into the canonical model (data/canonical/synthetic)."""
    return ingest_and_validate(ctx, "canonical", ctx.path(RAW_SYNTHETIC), "synthetic")


def _source_stage_spec(source: str, path) -> dict:
    """The registry fields of ``ingest_<source>`` reading ``path`` (params.yaml ``sources.<source>``)."""
    return dict(name=f"ingest_{source}", group="data", params=("sources", "ingest"), inputs=(str(path),),
                outputs=(canonical_dir(source),), checks=_rule_specs(), code=("pipelines/data", "pipelines/validate"))


def _source_fn(source: str):
    def fn(ctx, source=source):
        path = Path(ctx.config["sources"][source]).expanduser()
        return ingest_and_validate(ctx, source, path if path.is_absolute() else ctx.root / path, source)

    fn.__doc__ = f"Ingest and validate the {source} files at params.yaml sources.{source} into the canonical model."
    return fn


def source_stage(source: str, path):
    """``ingest_<source>`` for a run whose resolved config sets ``sources.<source>`` to ``path`` (e.g. only through
    ``--set sources.<source>=PATH``): the stage params.yaml would register, not registered (that run only)."""
    from pipelines.registry import make_stage

    return make_stage(_source_fn(source), **_source_stage_spec(source, path))


def _register_sources() -> None:
    """One ``ingest_<source>`` stage for each real source configured in params.yaml ``sources``."""
    sources = (load_params().get("sources") or {})
    for source, path in sources.items():
        if not path:
            continue
        stage(**_source_stage_spec(source, path))(_source_fn(source))


_register_sources()
