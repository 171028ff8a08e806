"""The reference pages of the documentation site, generated from the code at every build (a MkDocs hook).

``mkdocs.yml`` names this file under ``hooks:``. Nothing it writes is committed, so the reference cannot drift
from the code:

- ``reference/stages.md``: every stage of ``pipelines.stages.STAGES`` (name, group, description, inputs,
  outputs, params, checks, what it runs after);
- ``reference/config.md``: every key of the resolved config, walked from ``pipelines.config_schema.declared()``:
  each config class's fields with their type, default and the ``# comment`` the code gives them;
- ``reference/strategies.md``: every memory strategy of ``pipelines.memory.STRATEGIES`` with its config class;
- ``reference/suites.md``: every shipped suite of ``pipelines/evaluate/suites`` (``list_suites()``);
- ``reference/cli.md``: ``python -m pipelines --help`` and each command's help (``pipelines.cli.build_parser``).

A hand-written page can also pull a module's docstring in: a line ``<!-- docstring: pipelines.evaluate.protocol -->``
is replaced by that module's docstring (reStructuredText roles turned into code spans), so explanations quote
the code's own words. ``python docs/gen_reference.py OUT_DIR`` writes the generated pages to a folder instead.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import io
import re
import sys
import textwrap
import tokenize
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `mkdocs build` from the repository root: the project imports as it does in tests
    sys.path.insert(0, str(ROOT))

GENERATED_NOTE = ("!!! note \"Generated from the code\"\n    This page is written by `docs/gen_reference.py` at every "
                  "build of the site from {what}; it is not committed, so it cannot drift from the code.\n")


# --- small helpers ---------------------------------------------------------------------------------------------

def _escape(text: str) -> str:
    """Plain text (a comment, a docstring line) as markdown shows it literally: outside code spans, ``<`` is not
    the start of an HTML tag and ``*`` no emphasis (a list marker at the start of a line stays one)."""
    parts = re.split(r"(`[^`]*`)", text)
    for i in range(0, len(parts), 2):
        part = parts[i].replace("&", "&amp;").replace("<", "&lt;")
        lead = re.match(r"^\s*\* ", part) if i == 0 else None
        head, rest = (part[:lead.end()], part[lead.end():]) if lead else ("", part)
        parts[i] = head + rest.replace("*", "\\*")
    return "".join(parts)


def _cell(text: Any) -> str:
    """Text safe inside a markdown table cell (one line, pipes escaped)."""
    return _escape(re.sub(r"\s+", " ", str(text)).replace("|", "\\|").strip())


def _code(text: Any) -> str:
    """A code span in a table cell (the tables extension splits no cell inside a code span), backticks kept out."""
    text = re.sub(r"\s+", " ", str(text).replace("`", "'")).strip()
    return f"`{text}`" if text else ""


def _value(value: Any) -> str:
    """A default as YAML would write it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value) if not isinstance(value, str) else (value if value and re.fullmatch(r"[\w./:@+-]+", value)
                                                          else repr(value))


def rst_to_md(text: str) -> str:
    """A docstring's reStructuredText, as markdown: roles and double backticks become code spans, ``::`` blocks
    code blocks, and a list gets the blank line markdown wants before it."""
    text = inspect.cleandoc(text)
    text = re.sub(r":(?:func|class|meth|mod|data|attr|exc|obj):`~?([^`]+)`", r"`\1`", text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    out: list[str] = []
    lines = text.splitlines()
    in_block = False
    for i, line in enumerate(lines):
        if in_block:
            if line.strip() and not line.startswith("    "):
                in_block = False
            else:
                out.append(line)
                continue
        if line.rstrip().endswith("::") and not line.strip().startswith("|"):
            out.append(line.rstrip()[:-1])
            out.append("")
            in_block = True
            # the indented block that follows is a code block once it starts after a blank line
            if i + 1 < len(lines) and lines[i + 1].strip() == "":
                continue
            continue
        if re.match(r"^\s*[-*] ", line) and out and out[-1].strip() and not re.match(r"^\s", out[-1]) \
                and not re.match(r"^[-*] ", out[-1]):
            out.append("")
        if line.startswith("|") and out and out[-1].strip() and not out[-1].startswith("|"):
            out.append("")
        out.append(_escape(line))
    return "\n".join(out).strip() + "\n"


# --- the fields of a config dataclass, with their comments -------------------------------------------------------

def _class_fields(cls: type) -> dict[str, tuple[str, str]]:
    """Field name -> (annotation as written, its comment) for the fields ``cls`` declares in its own body.

    The comment is the trailing ``# ...`` of the field's line(s), the comment lines continuing it at the same
    column, and the comment lines right above the field (not already a continuation of the field before)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    comments: dict[int, tuple[int, str]] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = (tok.start[1], tok.string.lstrip("#").strip())
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.ClassDef)

    def comment_only(lineno: int) -> bool:
        return 1 <= lineno <= len(lines) and lines[lineno - 1].strip().startswith("#")

    consumed: set[int] = set()
    found: dict[str, tuple[str, str]] = {}
    for item in node.body:
        if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
            continue
        trailing = [(ln, comments[ln]) for ln in range(item.lineno, item.end_lineno + 1)
                    if ln in comments and not comment_only(ln)]
        parts = [c[1] for _, c in trailing]
        if trailing:
            column = trailing[-1][1][0]
            ln = item.end_lineno + 1
            while comment_only(ln) and ln in comments and abs(comments[ln][0] - column) <= 1:
                parts.append(comments[ln][1])
                consumed.add(ln)
                ln += 1
        above = []
        ln = item.lineno - 1
        while comment_only(ln) and ln in comments and ln not in consumed:
            above.insert(0, comments[ln][1])
            ln -= 1
        found[item.target.id] = (ast.unparse(item.annotation), " ".join(above + parts))
    return found


def config_fields(cls: type, skip: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """Every dataclass field of ``cls`` (inherited ones included): name, type, default, comment, declaring class."""
    own: dict[str, tuple[type, str, str]] = {}
    for klass in reversed(cls.__mro__):  # base classes first, so a subclass's redeclaration wins
        if dataclasses.is_dataclass(klass):
            for name, (annotation, comment) in _class_fields(klass).items():
                previous = own.get(name)
                own[name] = (klass, annotation, comment or (previous[2] if previous else ""))
    rows = []
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default = _value(f.default)
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = _value(f.default_factory())  # type: ignore[misc]
        else:
            default = "(required)"
        klass, annotation, comment = own.get(f.name, (cls, str(f.type), ""))
        rows.append({"name": f.name, "type": annotation, "default": default, "comment": comment,
                     "declared_in": klass.__name__})
    return rows


def fields_table(cls: type, prefix: str = "", skip: tuple[str, ...] = (), show_origin: bool = False) -> str:
    rows = config_fields(cls, skip)
    if not rows:
        return "_No keys._\n"
    head = "| key | type | default | what it is |" + (" declared in |" if show_origin else "")
    sep = "| --- | --- | --- | --- |" + (" --- |" if show_origin else "")
    out = [head, sep]
    for r in rows:
        line = f"| {_code(prefix + r['name'])} | {_code(r['type'])} | {_code(r['default'])} | {_cell(r['comment'])} |"
        if show_origin:
            line += f" {_code(r['declared_in'])} |"
        out.append(line)
    return "\n".join(out) + "\n"


def _where(cls: type) -> str:
    return f"`{cls.__module__}.{cls.__qualname__}`"


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return rst_to_md(doc) if doc else ""


# --- the pages ---------------------------------------------------------------------------------------------------

def stages_page() -> str:
    from pipelines.stages import STAGES, upstream

    out = ["# Stages\n", GENERATED_NOTE.format(what="the stage registry, `pipelines.stages.STAGES`"),
           "Every stage is one record of the registry; Dagster's assets, `dvc.yaml` and `python -m pipelines run "
           "STAGE` are derived from it ([architecture](../explanation/architecture.md)). The stages, in pipeline "
           "order:\n",
           "| stage | group | runs after | params sections |", "| --- | --- | --- | --- |"]
    for stage in STAGES.values():
        after = ", ".join(f"`{u}`" for u in upstream(stage)) or "-"
        out.append(f"| [`{stage.name}`](#{stage.name.replace('_', '-')}) | {stage.group} | {after} | "
                   f"{', '.join(f'`{p}`' for p in stage.params) or '-'} |")
    out.append("")
    for stage in STAGES.values():
        out.append(f"## `{stage.name}` {{#{stage.name.replace('_', '-')}}}\n")
        out.append(f"**Group** `{stage.group}` · **launcher** `{stage.launcher}` · **MLflow experiment** "
                   f"`{stage.mlflow_experiment}`\n")
        out.append(rst_to_md(stage.description))
        rows = [("inputs", stage.inputs), ("outputs", stage.outputs), ("params", stage.params),
                ("DVC metrics", stage.metrics),
                ("DVC plots", [p if isinstance(p, str) else next(iter(p)) for p in stage.plots]),
                ("code (re-runs under DVC when changed)", stage.code), ("partitions", stage.partitions),
                ("runs after", upstream(stage))]
        out.append("| | |\n| --- | --- |")
        for label, values in rows:
            if values:
                out.append(f"| {label} | {', '.join(_code(v) for v in values)} |")
        out.append("")
        if stage.checks:
            out.append("Validation rules (Dagster asset checks; a failed blocking rule stops everything downstream):\n")
            out.append("| check | blocking | what it checks |\n| --- | --- | --- |")
            for check in stage.checks:
                out.append(f"| {_code(check.name)} | {'yes' if check.blocking else 'no'} | {_cell(check.description)} |")
            out.append("")
    return "\n".join(out) + "\n"


def _config_sections(section, dotted: str, out: list[str], level: int) -> None:
    from pipelines.config_schema import Section

    title = f"`{dotted}`" if dotted else "Top-level keys"
    out.append(f"{'#' * level} {title}\n")
    if section.nullable:
        out.append(f"`{dotted}` may also be `null`.\n")
    for cls in section.configs:
        doc = _doc(cls)
        out.append(f"From {_where(cls)}" + (":\n\n" + doc if doc else ".\n"))
        out.append(fields_table(cls, skip=section.internal))
    if section.leaves:
        out.append("| key | type |\n| --- | --- |")
        for key, hint in section.leaves.items():
            out.append(f"| {_code(key)} | {_code(_hint(hint))} |")
        out.append("")
    for key, sub in section.sections.items():
        path = f"{dotted}.{key}" if dotted else key
        if key == "strategy_settings":
            out.append(f"{'#' * (level + 1)} `{path}`\n")
            out.append(f"One mapping per memory strategy, `{path}.<strategy>`, whose keys are the fields of that "
                       "strategy's config class: see [Memory strategies](strategies.md).\n")
            continue
        _config_sections(sub, path, out, min(level + 1, 4))


def _hint(hint: Any) -> str:
    from pipelines.config_schema import _describe

    try:
        return _describe(hint)
    except Exception:  # noqa: BLE001 - a type the describer does not know
        return str(hint)


def config_page() -> str:
    import pipelines.stages  # noqa: F401  (the stage packages declare the config sections)
    from pipelines.config_schema import declared

    out = ["# Configuration keys\n",
           GENERATED_NOTE.format(what="the declaration of the config, `pipelines.config_schema.declared()`, and the "
                                      "config classes it names (their fields, types, defaults and comments)"),
           "Every key below can be set in `params.yaml`, with `--set section.key=value` on the command line, or in "
           "the Dagster launchpad (`overrides: [...]`). A key that is not listed here is refused before any stage "
           "runs, naming the closest known key; the defaults are the code's, which the profiles "
           "(`pipelines/config.py`: tiny, small, paper) and `params.yaml` override.\n"]
    _config_sections(declared(), "", out, 2)
    return "\n".join(out) + "\n"


def strategies_page() -> str:
    from pipelines.memory import STRATEGIES

    out = ["# Memory strategies\n",
           GENERATED_NOTE.format(what="the strategy registry, `pipelines.memory.STRATEGIES`, and each strategy's "
                                      "config class"),
           "A suite names its strategies in `strategies:`; each one's settings go under `strategy_settings.<name>` "
           "in the suite file or in `params.yaml` `benchmark.strategy_settings` (the keys below). "
           "[Your own memory strategy](../tutorials/your-own-strategy.md) adds one.\n",
           "| strategy | class | what it is |", "| --- | --- | --- |"]
    for name, cls in STRATEGIES.items():
        what = cls.ingredient or (inspect.getdoc(cls) or "").split("\n\n")[0]
        out.append(f"| [`{name}`](#{name.replace('_', '-')}) | `{cls.__name__}` | {_cell(what)} |")
    out.append("")
    for name, cls in STRATEGIES.items():
        out.append(f"## `{name}` {{#{name.replace('_', '-')}}}\n")
        out.append(f"{_where(cls)}\n")
        doc = _doc(cls)
        if doc:
            out.append(doc)
        facts = [f"granularities: {', '.join(f'`{g}`' for g in cls.granularities)}"]
        if cls.model_settings:
            facts.append("trained models: " + ", ".join(f"`{k}` (stage `{v}`)" for k, v in cls.model_settings.items()))
        if cls.oracle:
            facts.append(f"oracle: {cls.oracle}")
        out.append("\n".join(f"- {f}" for f in facts) + "\n")
        out.append(f"Settings (`strategy_settings.{name}`), from {_where(cls.config_class)}:\n")
        out.append(fields_table(cls.config_class, show_origin=True))
    return "\n".join(out) + "\n"


def suites_page() -> str:
    import pipelines.evaluate.suite as suite_module
    from pipelines.evaluate.suite import SUITES_DIR, list_suites, load_suite

    out = ["# Benchmark suites\n",
           GENERATED_NOTE.format(what="the suite files of `pipelines/evaluate/suites/` (`list_suites()`, "
                                      "`load_suite()`)"),
           "`python -m pipelines suites` lists them; `python -m pipelines benchmark --suite NAME --path FILE --out "
           "DIR` runs one ([benchmarking your data](../tutorials/your-own-data.md#benchmarking-your-data)).\n",
           "| suite | version | source | what it is |", "| --- | ---: | --- | --- |"]
    suites = [load_suite(name) for name in list_suites()]
    for s in suites:
        out.append(f"| [`{s.name}`](#{s.name.replace('_', '-')}) | {s.version} | `{s.source}` | "
                   f"{_cell(s.description)} |")
    out.append("")
    for s in suites:
        out.append(f"## `{s.name}` {{#{s.name.replace('_', '-')}}}\n")
        out.append(f"`{(SUITES_DIR / (s.name + '.yaml')).relative_to(ROOT)}` · version {s.version}\n")
        if s.description:
            out.append(_cell(s.description) + "\n")
        rows = [("source", s.source), ("path", s.path), ("split", s.split), ("max_episodes", s.max_episodes),
                ("strategies", list(s.strategies)), ("strategy_settings", s.strategy_settings or None),
                ("metrics", list(s.metrics)), ("ks", list(s.ks)), ("budget_tokens", s.budget_tokens),
                ("corpus", s.corpus), ("session_scoring", s.session_scoring), ("queries", s.queries),
                ("ablation", s.ablation or None), ("generation", list(s.generation) or None),
                ("stream", s.stream)]
        if s.answers is not None:
            a = s.answers
            rows += [("answers.task", a.task), ("answers.reader_prompt", a.reader_prompt),
                     ("answers.judges", list(a.judges)), ("answers.accuracy_ks", list(a.accuracy_ks)),
                     ("answers.references", list(a.references))]
        else:
            rows.append(("answers", None))
        out.append("| key | value |\n| --- | --- |")
        for key, value in rows:
            out.append(f"| `{key}` | {_code(_value(value))} |")
        out.append("")
        if s.reference.get("source"):
            out.append(f"Published figures beside ours: {_cell(s.reference['source'])} "
                       f"({'comparable' if s.reference.get('comparable') else 'not comparable'}).\n")
    out.append("## The keys of a suite file\n")
    out.append(rst_to_md(suite_module.__doc__ or ""))
    return "\n".join(out) + "\n"


def cli_page() -> str:
    import argparse

    from pipelines.cli import build_parser

    parser = build_parser()
    out = ["# Command line\n", GENERATED_NOTE.format(what="the parser of `pipelines/cli.py` (`build_parser()`)"),
           "`python -m pipelines` (also installed as `mnemos`); in this project `.venv/bin/python -m pipelines`.\n",
           "```text\n" + parser.format_help().rstrip() + "\n```\n"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append(f"## `{name}`\n")
                out.append("```text\n" + sub.format_help().rstrip() + "\n```\n")
    return "\n".join(out) + "\n"


PAGES = {
    "reference/stages.md": stages_page,
    "reference/config.md": config_page,
    "reference/strategies.md": strategies_page,
    "reference/suites.md": suites_page,
    "reference/cli.md": cli_page,
}


def render_all() -> dict[str, str]:
    return {path: make() for path, make in PAGES.items()}


def expand_docstrings(markdown: str) -> str:
    """``<!-- docstring: module.path -->`` lines replaced by that module's docstring."""
    def repl(match: re.Match) -> str:
        module = importlib.import_module(match.group(1))
        return rst_to_md(module.__doc__ or "")
    return re.sub(r"^<!-- docstring: ([\w.]+) -->$", repl, markdown, flags=re.MULTILINE)


# --- the MkDocs hook ---------------------------------------------------------------------------------------------

def on_files(files, config):
    """Add the generated pages to the build (never to docs/)."""
    from mkdocs.structure.files import File

    for path, content in render_all().items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=content))
    return files


def on_page_markdown(markdown, page, config, files):
    return expand_docstrings(markdown)


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "site-reference")
    for rel, text in render_all().items():
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        (target / rel).write_text(text)
        print(target / rel)
