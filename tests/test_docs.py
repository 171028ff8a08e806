"""The documentation site (mkdocs.yml, docs/): it builds with --strict, its generated reference names every stage,
strategy, suite and config key of the code, and the README stays a short page that links into it."""

from __future__ import annotations

import html
import inspect
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs"))
import gen_reference  # noqa: E402  (docs/gen_reference.py: the hook that writes the reference pages)

REFERENCE = ("stages", "config", "strategies", "suites", "cli")


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner about its successor
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _text(page: Path) -> str:
    """The text a reader sees on a built page, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", page.read_text())).split())


def _shown(docstring: str) -> str:
    """A docstring as the page shows it: roles and backticks gone, whitespace collapsed."""
    return " ".join(re.sub(r":\w+:`~?", "", inspect.cleandoc(docstring)).replace("`", "").split())


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = _build(ROOT / "mkdocs.yml", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    return out


def test_every_nav_page_is_built_and_the_reference_is_generated_not_committed(site):
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]

    def pages(entries):
        for entry in entries:
            for value in (entry.values() if isinstance(entry, dict) else [entry]):
                yield from (pages(value) if isinstance(value, list) else [value])

    for page in pages(nav):
        built = site / ("index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html")
        assert built.is_file(), page
        if not page.startswith("reference/"):
            assert (ROOT / "docs" / page).is_file(), page
    for name in REFERENCE:
        assert (site / "reference" / name / "index.html").is_file()
        assert not (ROOT / "docs" / "reference" / f"{name}.md").exists(), "generated pages are never committed"
    assert not (site / "gen_reference.py").exists()
    assert (site / "screenshots" / "dagster-asset-graph.png").is_file()
    assert "fonts.googleapis.com" not in (site / "index.html").read_text()  # theme.font: false, nothing fetched


def test_the_reference_names_every_stage_strategy_suite_and_config_key(site):
    from pipelines.config_schema import declared
    from pipelines.evaluate.suite import list_suites
    from pipelines.memory import STRATEGIES
    from pipelines.stages import STAGES

    stages = _text(site / "reference" / "stages" / "index.html")
    for stage in STAGES.values():
        assert stage.name in stages
        assert _shown(stage.description) in stages, stage.name  # whole: no formula read as HTML or emphasis
        for path in (*stage.inputs, *stage.outputs):
            assert path in stages, (stage.name, path)
    strategies = _text(site / "reference" / "strategies" / "index.html")
    for name, cls in STRATEGIES.items():
        assert name in strategies and cls.config_class.__name__ in strategies
        assert _shown(inspect.getdoc(cls) or "") in strategies, name
    suites = _text(site / "reference" / "suites" / "index.html")
    assert all(name in suites for name in list_suites())
    config = _text(site / "reference" / "config" / "index.html")

    def walk(section, dotted=""):
        yield dotted, section
        for key, sub in section.sections.items():
            if key != "strategy_settings":  # its keys are the strategies' (checked above)
                yield from walk(sub, f"{dotted}.{key}" if dotted else key)

    for dotted, section in walk(declared()):
        assert not dotted or dotted in config, dotted
        for key in section.hints():
            assert key in config, f"{dotted}.{key}"
    cli = _text(site / "reference" / "cli" / "index.html")
    assert all(command in cli for command in ("run", "ingest", "benchmark", "merge", "suites", "dvc-yaml"))


def test_field_comments_are_read_from_the_source():
    from pipelines.data.ingest import IngestSettings
    from pipelines.glong.config import GLongStageSettings
    from pipelines.memory.fusion import FusionTimeConfig

    rows = {r["name"]: r for r in gen_reference.config_fields(GLongStageSettings)}
    assert rows["valid_share"]["comment"].startswith("of a dataset split by utterance")   # trailing
    assert rows["valid_share"]["type"] == "float" and rows["valid_share"]["default"] == "0.05"
    assert rows["eval_examples"]["comment"].endswith("fine-tuned and zero-shot")          # continued below it
    assert rows["sources"]["comment"].startswith("the extractor's datasets")               # the lines above
    assert rows["max_train_examples"]["type"] == "int | None" and rows["max_train_examples"]["default"] == "null"
    ingest = gen_reference.config_fields(IngestSettings)
    assert ingest[0]["comment"].startswith("a load that drops more than this share")
    fusion = {r["name"]: r for r in gen_reference.config_fields(FusionTimeConfig)}
    assert fusion["index"]["default"] == "hnsw" and fusion["index"]["declared_in"] == "FusionConfig"  # redeclared
    assert fusion["context_k"]["declared_in"] == "StrategyConfig"                                   # inherited


def test_a_broken_link_fails_the_strict_build(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("__pycache__", "screenshots"))
    shutil.copytree(ROOT / "docs" / "screenshots", docs / "screenshots")
    page = docs / "explanation" / "architecture.md"
    page.write_text(page.read_text() + "\nSee [a page that does not exist](no-such-page.md).\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config.update(docs_dir=str(docs), hooks=[str(ROOT / "docs" / "gen_reference.py")])
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    result = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr


def test_readme_is_short_and_links_into_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "make run" in readme and "make test" in readme
    links = re.findall(r"\]\(((?:docs/)[^)#\s]+)(?:#[^)\s]*)?\)", readme)
    targets = {link for link in links if link.endswith(".md")}
    assert {"docs/index.md", "docs/getting-started.md"} <= targets
    assert any(t.startswith("docs/tutorials/") for t in targets) and any(t.startswith("docs/explanation/")
                                                                         for t in targets)
    for link in links:
        assert (ROOT / link).is_file(), f"README links to {link}, which does not exist"
    for picture in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme):
        assert (ROOT / picture).is_file(), picture


def test_the_tutorial_strategy_passes_the_conformance_kit():
    """docs/tutorials/your-own-strategy.md: its strategy, as printed, registers and passes the kit as it says (in a
    subprocess: registering ``overlap`` here would add a strategy to every other test's registry)."""
    text = (ROOT / "docs" / "tutorials" / "your-own-strategy.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    script = code + textwrap.dedent('''
        from pipelines.memory import build_strategy
        from pipelines.memory.conformance import check_strategy
        check_strategy(lambda: build_strategy("overlap", min_length=4))
        print("conforms")
    ''')
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and done.stdout.strip().endswith("conforms"), done.stderr[-3000:]
