"""Plugins from installed packages (pipelines/plugins.py): a strategy, a loader and a suite of an external package,
found through its entry points, used exactly like the built-ins; broken ones left out with one clear error.

The package is real: its module and its ``*.dist-info`` (METADATA, entry_points.txt) are written into a folder that
the CLI subprocess gets on its PYTHONPATH, which is how an installed distribution is found
(:func:`importlib.metadata.entry_points` reads the dist-info folders of ``sys.path``).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests._cli import LOCOMO_FIXTURE, run_cli, tmp_project

PLUGIN = '''
"""A minimal external memory strategy: the most recent turns first."""
from dataclasses import dataclass
from pathlib import Path

from pipelines.data.loaders.base import LoadResult
from pipelines.data.loaders.locomo import load as load_locomo
from pipelines.memory.base import MemoryStrategy, Retrieved, StrategyConfig, check_k, session_participants


@dataclass(frozen=True)
class RecencyConfig(StrategyConfig):
    window: int = 1000   # the most recent turns kept


class Recency(MemoryStrategy):
    """The most recent turns, newest first (a floor any retriever should beat)."""

    config_class = RecencyConfig
    granularities = ("turn", "session")

    def __init__(self, config=None, counter=None):
        super().__init__(config, counter)
        self.reset()

    def _empty_scope(self):
        return {"_items": []}

    def observe(self, episode, session):
        self.enter(episode)
        people = session_participants(episode, session)
        for turn in session.turns:
            self._items.append((Retrieved(0.0, turn.text, session.id, turn.id, speaker=turn.speaker,
                                          timestamp=session.timestamp, order=len(self._items)), people))
        del self._items[:-self.config.window]

    def retrieve(self, query, k):
        check_k(k)
        newest = list(reversed(self._items))[:k]
        return [Retrieved(float(-n), item.text, item.session_id, item.turn_id, speaker=item.speaker,
                          timestamp=item.timestamp, order=item.order) for n, (item, _) in enumerate(newest)]

    def forget(self, selector):
        keep = [(i, p) for i, p in self._items
                if not selector.matches(turn_id=i.turn_id, session_id=i.session_id, speakers=[i.speaker],
                                        participants=p, text=i.text)]
        gone = len(self._items) - len(keep)
        self._items = keep
        return gone

    def __len__(self):
        return len(self._items)


class NotAStrategy:
    pass


def load_locomo_copy(path) -> LoadResult:
    """LoCoMo's published file, under this package's own source name."""
    result = load_locomo(path)
    for episode in result.episodes:
        episode.source = "locomo_copy"
    return result


SUITE_FILE = Path(__file__).with_name("recency_suite.yaml")
'''

SUITE = '''
name: recency_suite
version: 1
description: The synthetic episodes, the plugin's strategy beside a built-in.
source: synthetic
split: test
max_episodes: 2
strategies: [recency, bm25]
metrics: [recall, ndcg_any]
ks: [1, 5]
'''

ENTRY_POINTS = '''
[mnemos.strategies]
recency = mnemos_demo_plugin:Recency
broken_import = mnemos_demo_missing_module:Anything
bm25 = mnemos_demo_plugin:Recency
not_a_strategy = mnemos_demo_plugin:NotAStrategy

[mnemos.loaders]
locomo_copy = mnemos_demo_plugin:load_locomo_copy

[mnemos.suites]
recency_suite = mnemos_demo_plugin:SUITE_FILE
'''


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> Path:
    """A folder holding the package ``mnemos-demo-plugin`` 0.1, as pip installs one (module + dist-info)."""
    site = tmp_path_factory.mktemp("site")
    pkg = site / "mnemos_demo_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    (pkg / "recency_suite.yaml").write_text(textwrap.dedent(SUITE))
    info = site / "mnemos_demo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mnemos-demo-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(ENTRY_POINTS))
    return site


def _cli(args, root, plugin_path):
    return run_cli(args, root, extra_path=[plugin_path])


def test_the_plugins_are_listed_with_their_package_and_the_broken_ones_with_why(tmp_path, plugin_path):
    root = tmp_project(tmp_path / "p")
    proc = _cli(["strategies"], root, plugin_path)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    assert "mnemos-demo-plugin 0.1" in lines["recency"] and "built-in" in lines["bm25"]   # the built-in kept
    broken = proc.stdout[proc.stdout.index("left out"):]
    assert "broken_import" in broken and "ModuleNotFoundError" in broken
    assert "not_a_strategy" in broken and "not a MemoryStrategy" in broken
    assert "'bm25' is already taken by a built-in" in broken
    assert "Traceback" not in proc.stderr
    suites = _cli(["suites"], root, plugin_path)
    assert "recency_suite" in suites.stdout and "mnemos-demo-plugin 0.1" in suites.stdout


def test_a_plugin_strategy_and_suite_run_in_the_benchmark_beside_the_built_ins(tmp_path, plugin_path):
    root = tmp_project(tmp_path / "p")
    out = tmp_path / "report"
    proc = _cli(["benchmark", "--suite", "recency_suite", "--out", str(out), "--no-answers", "-q",
                 "--set", "benchmark.strategy_settings.recency.window=500"], root, plugin_path)  # params.yaml keys too
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["recency_suite"]) == {"recency", "bm25"}     # scored side by side
    assert all(isinstance(v, float) for v in metrics["recency_suite"]["recency"].values())
    report = (out / "benchmark.md").read_text()
    assert "recency" in report and "bm25" in report


def test_asking_for_a_broken_plugin_is_one_error_naming_its_package(tmp_path, plugin_path):
    root = tmp_project(tmp_path / "p")
    typo = _cli(["benchmark", "--suite", "recency_suite", "--out", str(tmp_path / "r"), "--no-answers",
                 "--set", "benchmark.strategy_settings.recency.windw=5"], root, plugin_path)
    assert typo.returncode == 2 and "did you mean benchmark.strategy_settings.recency.window?" in typo.stderr
    proc = _cli(["benchmark", "--suite", "synthetic", "--strategies", "broken_import", "--out", str(tmp_path / "r"),
                 "--no-answers"], root, plugin_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    error = proc.stderr.strip().splitlines()
    assert error[-2].startswith("error: memory strategy 'broken_import' comes from package mnemos-demo-plugin 0.1")
    assert "ModuleNotFoundError" in error[-2] and error[-1].startswith("hint: fix the package")


def test_a_plugin_loader_ingests_under_its_own_source_name(tmp_path, plugin_path):
    root = tmp_project(tmp_path / "p")
    out = tmp_path / "canonical"
    proc = _cli(["ingest", "--source", "locomo_copy", "--path", str(LOCOMO_FIXTURE), "--out", str(out)], root,
                plugin_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = json.loads((out / "test.jsonl").read_text().splitlines()[1])
    assert first["source"] == "locomo_copy"


def test_the_plugin_strategy_passes_the_conformance_kit(plugin_path, monkeypatch):
    """What a plugin author's own test does, in one line (pipelines/memory/conformance.py)."""
    import importlib

    from pipelines.memory.conformance import check_strategy

    monkeypatch.syspath_prepend(str(plugin_path))
    plugin = importlib.import_module("mnemos_demo_plugin")
    check_strategy(plugin.Recency)
