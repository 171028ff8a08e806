"""Sharded, resumable benchmark runs: a suite's episodes split into N shards, each episode's results written whole.

A suite's episodes, in the order they are loaded, are dealt round-robin into ``N`` shards: the episode at position
``p`` belongs to shard ``p mod N`` (deterministic, balanced, and the same on every machine that loads the same data).
A shard runs every strategy of the suite over its episodes **episode by episode**: for each episode a fresh memory
per strategy goes through the temporal protocol (:func:`~pipelines.evaluate.protocol.evaluate_episode`) and is
dropped before the next episode, so the memory in use is one episode's, however many episodes the data has.

Each finished episode is appended to the shard's ``episodes.jsonl`` as one line holding every strategy's scores,
exclusions, recorded reader contexts and memory size, flushed and fsynced: a process killed (SIGKILL included)
loses at most the episode it was in. Run again with the same settings, the shard reads the lines it finished
(a torn last line is cut off, the whole ones are never written again), skips those episodes and goes on; run with
other settings or other data, it starts again (the ``manifest.json`` fingerprint says which). When every episode of
the shard is done the manifest says ``complete``. A folder or file of the shard that cannot be written (a read-only
folder, a full disk) is a :class:`ShardWriteError` naming it and the cause: the episodes finished before stay, and
the same command, once the folder is writable or the disk has room, goes on after them.

:func:`merge` reads the N shard folders of one run and rebuilds each strategy's
:class:`~pipelines.evaluate.protocol.ProtocolResult` in the data's episode order: the report written from it is
the one an unsharded run writes. It refuses shards of different runs (a fingerprint of the suite, the strategies'
settings, the protocol, the answered questions and the data), a missing shard (named) and an unfinished one.

A run's fingerprint (:func:`run_fingerprint`) holds what changes the results, never where a cache lives: a strategy
setting named in :data:`CACHE_LOCATIONS` (or ending in ``_cache_dir``), at any depth of its settings, is left out
(:func:`is_cache_location`), so shards run with ``--cache-dir D`` merge with a command that names another cache or
none. The manifest keeps each value of the fingerprint beside its origin (the option or file key it came from, as
the user typed it: ``--strategies``, ``--set benchmark.strategy_settings.bm25.k1``, a suite file's key): a merge of
shards that differ names each value that differs, where it came from, and both values (:func:`differences`).

Layout (under a run's folder, e.g. the CLI's ``--out``): ``shards/<suite>/<i>-of-<N>/{manifest.json,episodes.jsonl}``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from pipelines.atomic import write_json
from pipelines.data.schema import Episode
from pipelines.digest import files_digest, sources_digest
from pipelines.errors import MnemosError, ModelNotTrained, os_cause
from pipelines.evaluate.protocol import (AnswerContext, Exclusion, ProtocolConfig, ProtocolResult, QueryScore,
                                         _writer_counts, _writer_delta, evaluate_episode)

log = logging.getLogger("mnemos")

MANIFEST, EPISODES = "manifest.json", "episodes.jsonl"
FORMAT = 1  # bump when a line's layout changes: older shard folders are then started again, never misread


class ShardError(MnemosError, ValueError):
    """A shard that cannot be run or merged as asked (index out of range, missing, unfinished, mismatched)."""

    exit_code = 8
    hint = ("shards are --shard 0 to N-1 of --shards N: run each missing or unfinished one with the same other "
            "arguments as the rest, then `merge ... --shards N`.")


class ShardWriteError(ShardError):
    """A shard's folder or file that cannot be written (a read-only folder, a full disk): the message names the path,
    the cause and the finished episodes kept."""

    hint = ("make room on that disk or make the path a writable folder, then run the same command again: the shard "
            "goes on after the episodes it finished (another --out starts it afresh).")


@dataclass(frozen=True)
class ShardSpec:
    """Shard ``index`` of ``count``: the episodes at positions p with p mod count == index."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        for name in ("index", "count"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ShardError(f"shard {name} must be an integer, got {value!r}.")
        if self.count < 1:
            raise ShardError(f"the number of shards must be at least 1, got {self.count}.")
        if not 0 <= self.index < self.count:
            raise ShardError(f"shard index {self.index} is out of range for {self.count} shard(s): "
                             f"give an index from 0 to {self.count - 1}.")

    def holds(self, position: int) -> bool:
        return position % self.count == self.index

    @property
    def label(self) -> str:
        return f"{self.index}-of-{self.count}"


def shard_dir(root: str | os.PathLike, suite: str, shard: ShardSpec) -> Path:
    """The folder of ``shard`` of ``suite`` under a run's folder ``root``."""
    return Path(root) / "shards" / suite / shard.label


# --- fingerprints ---------------------------------------------------------------------------------------------


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def data_digest(paths: Iterable[str | os.PathLike] = (), extra: Any = None) -> str:
    """sha256 over the bytes of the data files (a folder: its files, sorted by relative path) and ``extra``
    (e.g. the synthetic generator's settings when there is no file)."""
    return files_digest(paths, extra)


CODE = ("pipelines/evaluate", "pipelines/memory", "pipelines/llm", "pipelines/rerank", "pipelines/emma",
        "pipelines/glong", "pipelines/mdr", "pipelines/models")  # what computes a strategy's results

# Strategy settings that say where a cache lives, never what is computed: the embedding cache (``cache_dir``, the CLI's
# --cache-dir), the language-model layer's response cache and converted models (``llm_cache_dir``, --llm-cache-dir),
# the exported onnx/openvino encoders (``export_dir``). A cache serves what its key names, whatever its folder: these
# keys (and any other ending in ``_cache_dir``, a plugin's) are left out of a run's fingerprint, at any depth of a
# strategy's settings, and out of the models' digest (a cache fills as runs go: it is not a model). The other caches
# of a benchmark never enter the fingerprint (the validated-file cache, --validated-cache; the readers' and judges'
# response cache). Every other setting stays in.
CACHE_LOCATIONS = frozenset({"cache_dir", "llm_cache_dir", "export_dir"})


def is_cache_location(key: str) -> bool:
    """Whether a strategy setting ``key`` names where a cache lives (:data:`CACHE_LOCATIONS`, or ``*_cache_dir``)."""
    return key in CACHE_LOCATIONS or str(key).endswith("_cache_dir")


def without_cache_locations(settings: Any) -> Any:
    """``settings`` without the keys that say where a cache lives (:func:`is_cache_location`), nested mappings too."""
    if isinstance(settings, Mapping):
        return {k: without_cache_locations(v) for k, v in settings.items() if not is_cache_location(k)}
    if isinstance(settings, (list, tuple)):
        return [without_cache_locations(v) for v in settings]
    return settings


def code_digest(root: Path = Path(__file__).resolve().parents[2]) -> str:
    """sha256 of the source files that compute the results (a finished episode of older code is not reused)."""
    return sources_digest(root, CODE)


def model_digests(settings: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """``"<strategy>.<setting>"`` -> a digest of the files of the model folder or file that setting names (path,
    size, modification time), for every setting naming one that exists: a model trained again under the same path
    makes another run. Cache locations (:func:`is_cache_location`) are not models."""
    digests: dict[str, str] = {}
    for name in sorted(settings):
        for key, value in sorted(settings[name].items()):
            if is_cache_location(key) or not isinstance(value, str) or not value or "\n" in value or len(value) > 4096:
                continue
            path = Path(value)
            h = hashlib.sha256()
            try:
                if not path.exists():
                    continue
                files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
                for f in files:
                    stat = f.stat()
                    h.update(f"{name}.{key}:{f}:{stat.st_size}:{stat.st_mtime_ns}".encode("utf-8"))
            except OSError:
                continue
            digests[f"{name}.{key}"] = h.hexdigest()
    return digests


def models_digest(settings: Mapping[str, Mapping[str, Any]]) -> str:
    """One digest of :func:`model_digests`: the files of every model the strategies' settings name."""
    return _digest(model_digests(settings))


def _answers_value(request: Any) -> dict[str, Any] | None:
    """The answered questions, as a fingerprint value: how many, and a digest of which (None: no answers)."""
    if request is None:
        return None
    return {"questions": len(request["queries"]), "digest": _digest(request)}


def _plain(value: Any) -> Any:
    """``value`` as JSON gives it back (what the manifest holds, so a value read back compares equal)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def run_fingerprint(suite_header: Mapping[str, Any], settings: Mapping[str, Mapping[str, Any]],
                    config: ProtocolConfig, data: str, count: int, *, origins: Mapping[str, str] | None = None,
                    data_settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What must be equal for two shards to belong to one run: the suite, each strategy's settings (but where its
    caches live, :data:`CACHE_LOCATIONS`) and the models they name, the protocol, the answered questions, the data, the
    code and the number of shards (the shard index is not part of it).

    Besides the digests, ``values`` holds each of these as a flat key (``suite.<key>``, ``strategies`` (those that
    run), ``settings.<strategy>.<setting>``, ``models.<strategy>.<setting>``, ``protocol.<key>``, ``data``,
    ``data.<key>``, ``code``, ``shards``, ``format``) and ``origins`` where it came from, as the user typed it
    (``origins`` given by the caller, e.g. ``{"settings.bm25.k1": "--set benchmark.strategy_settings.bm25.k1"}``;
    a generic name otherwise): :func:`differences` names what differs between two runs. ``data_settings``: what made
    the data when no file did (the synthetic generator's settings), each a ``data.<key>`` value."""
    answers = config.answers
    request = None if answers is None else {
        "queries": sorted(map(list, answers.queries)), "ks": list(answers.ks),
        "probes": {e: [q.id for q in qs] for e, qs in sorted(answers.probes.items())}}
    protocol = {"ks": list(config.ks), "budget_tokens": config.budget_tokens, "depth": config.depth,
                "session_scoring": config.session_scoring, "answers": request}
    strategies = {k: without_cache_locations(dict(v)) for k, v in settings.items()}
    models = model_digests(settings)
    parts = {"suite": dict(suite_header), "strategies": strategies, "models": _digest(models), "protocol": protocol,
             "data": data, "code": code_digest(), "shards": count, "format": FORMAT}
    values: dict[str, Any] = {f"suite.{k}": v for k, v in suite_header.items()}
    values["strategies"] = list(settings)
    values.update({f"settings.{name}.{k}": v for name, s in strategies.items() for k, v in s.items()})
    values.update({f"models.{k}": v for k, v in models.items()})
    values.update({"protocol.depth": config.depth, "protocol.answers": _answers_value(request), "data": data})
    values.update({f"data.{k}": v for k, v in (data_settings or {}).items()})
    values.update({"code": parts["code"], "shards": count, "format": FORMAT})
    named = {"strategies": "the strategies that run", "protocol.depth": "the protocol's ranking depth",
             "protocol.answers": "the questions the readers answer (the suite's answers, llm.max_questions)",
             "data": "the data (its bytes, or the synthetic generator's settings)",
             "code": f"the code that computes the results ({', '.join(CODE)})", "shards": "--shards",
             "format": "the shard format (another version of mnemos)",
             **{f"models.{k}": f"the files of the model {k} ({settings[k.split('.', 1)[0]][k.split('.', 1)[1]]})"
                for k in models},
             **{k: f"{k.split('.', 1)[1]} of the suite" for k in values if k.startswith("suite.")},
             **{k: f"benchmark.strategy_settings.{k.split('.', 1)[1]}" for k in values if k.startswith("settings.")},
             **{k: f"the synthetic data's {k.split('.', 1)[1]}" for k in values if k.startswith("data.")}}
    given = dict(origins or {})
    return {"run": _digest(parts), "suite": _digest(parts["suite"]), "strategies": _digest(parts["strategies"]),
            "models": parts["models"], "protocol": _digest(protocol), "data": data, "code": parts["code"],
            "shards": count, "values": _plain(values),
            "origins": {k: given.get(k) or named.get(k, k) for k in values}}


PARTS = ("suite", "strategies", "models", "protocol", "data", "code", "shards")  # the digests, by part
_UNSET = object()


def _show(value: Any) -> str:
    """A fingerprint value as a message shows it: a digest cut to 12 characters, anything else as JSON."""
    if value is _UNSET:
        return "not set"
    if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value):
        return f"{value[:12]}..."
    if isinstance(value, dict) and "digest" in value:
        value = {**value, "digest": f"{value['digest'][:12]}..."}
    return json.dumps(value, sort_keys=True)


def differences(first: Mapping[str, Any], second: Mapping[str, Any], first_is: str, second_is: str) -> list[str]:
    """What differs between two run fingerprints, one line per value: where it came from, as the user typed it, and
    its value in each (``first_is``, ``second_is``: e.g. "shard 0-of-2", "this command"). A strategy's settings are
    compared where both run it; the data's bytes only where no setting that made them differs. The fingerprint of an
    older manifest (no values) gives the parts that differ."""
    a, b = first.get("values"), second.get("values")
    if not isinstance(a, dict) or not isinstance(b, dict):
        return [k for k in PARTS if first.get(k) != second.get(k)] or ["format"]
    both = set(a.get("strategies") or ()) & set(b.get("strategies") or ())
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k, _UNSET) != b.get(k, _UNSET)
            and not (k.startswith(("settings.", "models.")) and k.split(".")[1] not in both)]
    if any(k.startswith("data.") for k in keys):   # the settings that made the data say more than its digest
        keys = [k for k in keys if k != "data"]
    if "suite.answers" in keys:   # the answered questions follow the suite's answers (--no-answers)
        keys = [k for k in keys if k != "protocol.answers"]
    lines = []
    origins_a, origins_b = first.get("origins") or {}, second.get("origins") or {}
    for key in keys:
        va, vb = a.get(key, _UNSET), b.get(key, _UNSET)
        la = origins_a.get(key) or origins_b.get(key) or key
        lb = origins_b.get(key) or la
        if la == lb or va is _UNSET or vb is _UNSET:
            label = la if va is not _UNSET else lb
            lines.append(f"{label}: {_show(va)} in {first_is}, {_show(vb)} in {second_is}")
        else:
            lines.append(f"{la}: {_show(va)} in {first_is}; {lb}: {_show(vb)} in {second_is}")
    return lines or ["the shard format (another version of mnemos)"]


# --- one episode's results, as a line -------------------------------------------------------------------------


def _score_from(d: dict) -> QueryScore:
    return QueryScore(**d)


def episode_record(position: int, episode_id: str, per_strategy: Mapping[str, dict]) -> dict:
    """The JSON line of one finished episode."""
    return {"position": position, "episode": episode_id, "strategies": dict(per_strategy)}


class ShardStore:
    """``episodes.jsonl`` + ``manifest.json`` of one shard: what it finished, appended one episode at a time."""

    def __init__(self, folder: str | os.PathLike, fingerprint: Mapping[str, Any], shard: ShardSpec, suite: str,
                 missing: Mapping[str, str] | None = None):
        self.folder, self.shard, self.suite = Path(folder), shard, suite
        self.fingerprint = dict(fingerprint)
        self.done: dict[int, dict] = {}
        whole = 0     # bytes of episodes.jsonl up to the end of its last whole line
        old = read_manifest(self.folder)
        if old is not None and old.get("fingerprint", {}).get("run") == self.fingerprint["run"]:
            self.done, whole = _whole_records(self.folder / EPISODES)
            self.missing = dict(old.get("missing") or {})
            if self.done:
                log.info("shard %s of suite %s: resuming after %d finished episode(s)", shard.label, suite,
                         len(self.done))
        else:
            if old is not None or (self.folder / EPISODES).exists():
                log.info("shard %s of suite %s: earlier results in %s belong to another run (settings or data "
                         "changed): starting again", shard.label, suite, self.folder)
            shutil.rmtree(self.folder, ignore_errors=True)
            self.missing = dict(missing or {})
        with self._writing(self.folder):
            self.folder.mkdir(parents=True, exist_ok=True)
        with self._writing(self.folder / EPISODES):
            _cut_after(self.folder / EPISODES, whole)  # a torn last line: appends start on a fresh line
        self._write_manifest(complete=False)
        with self._writing(self.folder / EPISODES):
            self._out = (self.folder / EPISODES).open("a", encoding="utf-8")

    @contextlib.contextmanager
    def _writing(self, path: Path) -> Iterator[None]:
        """An OSError while writing ``path`` as a :class:`ShardWriteError` naming it, the cause and what is kept."""
        try:
            yield
        except OSError as exc:
            episodes = "it" if path == self.folder / EPISODES else self.folder / EPISODES
            kept = f"; its {len(self.done)} finished episode(s) stay in {episodes}" if self.done else ""
            raise ShardWriteError(f"shard {self.shard.label} of suite {self.suite!r} cannot write {path}: "
                                  f"{os_cause(exc)}{kept}.") from exc

    def _write_manifest(self, complete: bool, episodes: int | None = None) -> None:
        with self._writing(self.folder / MANIFEST):
            write_json(self.folder / MANIFEST, {
                "format": FORMAT, "suite": self.suite, "shard": self.shard.index, "shards": self.shard.count,
                "fingerprint": self.fingerprint, "missing": self.missing, "complete": complete,
                "episodes": episodes if episodes is not None else len(self.done)})

    def add_missing(self, strategy: str, why: str) -> None:
        self.missing[strategy] = why
        self._write_manifest(complete=False)

    def append(self, record: dict) -> None:
        """Write one finished episode whole (flushed and fsynced before it counts as done)."""
        with self._writing(self.folder / EPISODES):
            self._out.write(json.dumps(record) + "\n")
            self._out.flush()
            os.fsync(self._out.fileno())
        self.done[record["position"]] = record

    def complete(self) -> None:
        with self._writing(self.folder / EPISODES):
            self._out.close()
        self._write_manifest(complete=True)

    def close(self) -> None:
        """Close ``episodes.jsonl``; after a failed write too (that error was raised where it happened: what the
        file kept of the line it was writing is a torn line, which the next run cuts off)."""
        if not self._out.closed:
            with contextlib.suppress(OSError):
                self._out.close()


def read_manifest(folder: Path) -> dict | None:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("format") == FORMAT else None


def _whole_records(path: Path) -> tuple[dict[int, dict], int]:
    """(position -> record of every whole line of ``path``, the byte offset where the last of them ends): the lines
    up to the first that is not whole JSON (the torn last line of a killed writer, or of a write that failed)."""
    done: dict[int, dict] = {}
    end = 0
    if not path.is_file():
        return done, end
    with path.open("rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break
            try:
                record = json.loads(line)
            except ValueError:  # not JSON, or not UTF-8
                break
            done[int(record["position"])] = record
            end += len(line)
    return done, end


def _read_lines(path: Path) -> dict[int, dict]:
    """position -> record of every whole line (a line cut by a kill, always the last, is dropped)."""
    return _whole_records(path)[0]


def _cut_after(path: Path, whole: int) -> None:
    """Cut ``path`` after its first ``whole`` bytes (its whole lines), in place. The finished lines are never written
    again: emptied and written anew, they would be lost to a write that fails (a disk still full, a kill in the
    middle)."""
    if path.is_file() and path.stat().st_size > whole:
        with path.open("r+b") as f:
            f.truncate(whole)
            f.flush()
            os.fsync(f.fileno())


# --- running a shard ------------------------------------------------------------------------------------------


StrategyFactory = Callable[[str], Any]  # strategy name -> a fresh MemoryStrategy


def _strategy_part(strategy: Any, episode: Episode, scores: list[QueryScore], excluded: list[Exclusion],
                   contexts: list[AnswerContext], writers: list[dict]) -> dict:
    return {"scores": [dataclasses.asdict(s) for s in scores], "excluded": [dataclasses.asdict(e) for e in excluded],
            "contexts": [dataclasses.asdict(c) for c in contexts],
            "memory": [episode.id, len(episode.sessions), len(strategy)], "index_bytes": strategy.index_bytes(),
            "writers": writers}


def run_shard(episodes: Iterable[Episode], strategies: Sequence[str], build: StrategyFactory,
              config: ProtocolConfig, shard: ShardSpec = ShardSpec(), store: ShardStore | None = None,
              prepare_block: int | None = None, progress: Callable[[int], None] | None = None,
              missing: dict[str, str] | None = None) -> dict[int, dict]:
    """Every strategy over the episodes of ``shard`` (positions in ``episodes`` order), episode by episode.

    ``build(name)`` makes a fresh strategy. Each strategy's batched pure work (``prepare``: embedding every text,
    one length-sorted pass) runs before the episodes it serves: over all the shard's unfinished episodes at once
    (``prepare_block`` None: ``episodes`` is read into a list), or over blocks of ``prepare_block`` episodes, read
    one block at a time from ``episodes`` (a streamed dataset: only one block is in memory). A strategy whose model
    turns out not trained (:class:`ModelNotTrained`) is dropped from the run and recorded in ``store.missing`` (and
    in ``missing``, when given).
    Returns position -> episode record (those finished earlier included, from ``store``).
    """
    if prepare_block is not None and prepare_block < 1:
        raise ValueError(f"prepare_block must be None or at least 1, got {prepare_block}.")
    done = dict(store.done) if store is not None else {}
    running = [s for s in strategies if store is None or s not in store.missing]
    pending = ((p, e) for p, e in enumerate(episodes) if shard.holds(p) and p not in done)
    for block in _blocks(pending, prepare_block):
        for name in list(running):
            _prepare(build, name, [e for _, e in block], running, store, missing)
        for position, episode in block:
            parts = {}
            for name in list(running):
                try:
                    memory = build(name)
                    before = _writer_counts(start=True)
                    contexts: list[AnswerContext] = []
                    scores, excluded = evaluate_episode(episode, memory, config, name=name, contexts=contexts)
                    parts[name] = _strategy_part(memory, episode, scores, excluded, contexts,
                                                 _writer_delta(before, _writer_counts()))
                    del memory  # this episode's memory is released before the next episode
                except ModelNotTrained as exc:
                    _drop(name, str(exc), running, store, missing)
            record = episode_record(position, episode.id, parts)
            if store is not None:
                store.append(record)
            done[position] = record
            if progress is not None:
                progress(1)
        block.clear()  # the block's episodes are released before the next block is read
        episode = None  # noqa: F841 - nor does the loop variable keep the block's last one
    if store is not None:
        store.complete()
    return done


def _blocks(items: Iterator, size: int | None) -> Iterator[list]:
    if size is None:
        yield list(items)
        return
    block: list = []
    for item in items:
        block.append(item)
        if len(block) == size:
            yield block
            block = []
    if block:
        yield block


def _prepare(build: StrategyFactory, name: str, episodes: list[Episode], running: list[str],
             store: ShardStore | None, missing: dict[str, str] | None = None) -> None:
    try:
        build(name).prepare(episodes)  # pure, batched (embeddings); adds nothing to memory
    except ModelNotTrained as exc:
        _drop(name, str(exc), running, store, missing)


def _drop(name: str, why: str, running: list[str], store: ShardStore | None,
          missing: dict[str, str] | None = None) -> None:
    if name in running:
        running.remove(name)
    if store is not None:
        store.add_missing(name, why)
    if missing is not None:
        missing[name] = why


# --- merging --------------------------------------------------------------------------------------------------


def results_from_records(records: Iterable[dict], strategies: Sequence[str],
                         missing: Mapping[str, str] = ()) -> dict[str, ProtocolResult]:
    """Each strategy's ProtocolResult from episode records, in position order (the unsharded run's order)."""
    ordered = sorted(records, key=lambda r: r["position"])
    results: dict[str, ProtocolResult] = {}
    for name in strategies:
        if name in missing:
            continue
        result = ProtocolResult(name, 0, [], [])
        writers: list[dict] = []
        for record in ordered:
            part = record["strategies"].get(name)
            if part is None:
                continue
            result.episodes += 1
            result.scores.extend(_score_from(s) for s in part["scores"])
            result.excluded.extend(Exclusion(**e) for e in part["excluded"])
            result.contexts.extend(AnswerContext(**c) for c in part["contexts"])
            result.memory.append(tuple(part["memory"]))
            if part["index_bytes"] is not None:
                result.index_bytes.append(part["index_bytes"])
            writers = _sum_writers(writers, part["writers"])
        result.writers = writers
        results[name] = result
    return results


def _sum_writers(total: list[dict], more: list[dict]) -> list[dict]:
    """Writer reports (pipelines.memory.writers: role, model and counts) added up per (role, model); a peak
    (:data:`~pipelines.memory.writers.PEAKS`) is the larger of the two."""
    from pipelines.memory.writers import PEAKS

    def plus(a: Any, b: Any) -> Any:
        if isinstance(a, dict) and isinstance(b, dict):
            return {k: (max(a[k], b[k]) if k in PEAKS else plus(a[k], b[k])) if k in a and k in b
                    else (a[k] if k in a else b[k]) for k in dict.fromkeys([*a, *b])}
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            return a + b
        return a

    by_key = {(w.get("role"), w.get("model")): w for w in total}
    for w in more:
        key = (w.get("role"), w.get("model"))
        by_key[key] = plus(by_key[key], w) if key in by_key else w
    return list(by_key.values())


@dataclass
class Merged:
    """The shards of one run, put back together."""

    suite: str
    fingerprint: dict[str, Any]
    records: list[dict]            # every episode's record, in position order
    missing: dict[str, str]        # strategy -> why it did not run (any shard's reason)
    shards: int


def merge(folders: Sequence[str | os.PathLike]) -> Merged:
    """The shard folders of one run of one suite, checked and joined (ShardError naming what is wrong)."""
    if not folders:
        raise ShardError("no shard folder to merge: give the folders the shards wrote (shards/<suite>/<i>-of-<N>).")
    manifests = []
    for folder in folders:
        manifest = read_manifest(Path(folder))
        if manifest is None:
            raise ShardError(f"{folder} holds no readable shard manifest ({MANIFEST}, format {FORMAT}).")
        manifests.append((Path(folder), manifest))
    suites = sorted({m["suite"] for _, m in manifests})
    if len(suites) > 1:
        raise ShardError(f"the shards belong to different suites ({', '.join(suites)}): merge one suite at a time.")
    first_folder, first = manifests[0]
    for folder, m in manifests[1:]:
        if m["fingerprint"]["run"] != first["fingerprint"]["run"]:
            differ = differences(first["fingerprint"], m["fingerprint"], f"shard {first['shard']}-of-{first['shards']}",
                                 f"shard {m['shard']}-of-{m['shards']}")
            raise ShardError(f"shards {first_folder} and {folder} come from different runs (they differ in: "
                             f"{'; '.join(differ)}): merge only the shards of one run, or rerun the odd ones with "
                             f"the same settings and data.")
    count = first["shards"]
    indices: dict[int, Path] = {}
    for folder, m in manifests:
        if m["shard"] in indices:
            raise ShardError(f"shard {m['shard']}-of-{count} is given twice: {indices[m['shard']]} and {folder}.")
        indices[m["shard"]] = folder
    absent = [f"{i}-of-{count}" for i in range(count) if i not in indices]
    if absent:
        raise ShardError(f"cannot merge suite {first['suite']!r}: missing shard(s) {', '.join(absent)} of {count} "
                         f"(run them with `benchmark ... --shards {count} --shard <i>`).")
    unfinished = [f"{m['shard']}-of-{count} ({m['episodes']} episode(s) done)" for _, m in manifests
                  if not m.get("complete")]
    if unfinished:
        raise ShardError(f"cannot merge suite {first['suite']!r}: shard(s) {', '.join(sorted(unfinished))} did not "
                         f"finish; run them again with the same command (they resume where they stopped).")
    records: list[dict] = []
    missing: dict[str, str] = {}
    for folder, m in sorted(manifests, key=lambda fm: fm[1]["shard"]):
        records.extend(_read_lines(folder / EPISODES).values())
        for name, why in (m.get("missing") or {}).items():
            missing.setdefault(name, why)
    records.sort(key=lambda r: r["position"])
    for record in records:  # a strategy dropped in one shard is dropped everywhere (never half a strategy)
        for name in missing:
            record["strategies"].pop(name, None)
    return Merged(first["suite"], first["fingerprint"], records, missing, count)
