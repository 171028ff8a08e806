"""The layers of the code (pyproject.toml ``[tool.importlinter]``; docs/explanation/architecture.md, "Layers").

import-linter reads every import of ``pipelines`` and ``assets``, wherever it stands (module top, function body), so
an import hidden in a function counts like any other. The contracts: the layers, from the Dagster assets and the CLI
down to errors, with no import from a lower layer to a higher one (directly or through others); ``pipelines/`` never
imports dagster. Beside them: no import cycle at all, also between modules of one layer, and every module belongs to
a layer of the contract (a new package must be placed in the picture, not left outside it).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def _layers() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["type"] == "layers")
    return [[m.strip() for m in layer.replace(":", "|").split("|")] for layer in contract["layers"]]


def _graph():
    return grimp.build_graph("pipelines", "assets", cache_dir=None)


def test_the_import_contracts_hold():
    done = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def _cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_import_cycle_anywhere():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_one(tmp_path, monkeypatch):
    pkg = tmp_path / "cyclic"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from cyclic import b  # hidden in a function: still an import\n")
    (pkg / "b.py").write_text("from cyclic import a\n")
    (pkg / "c.py").write_text("from cyclic import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cycles(grimp.build_graph("cyclic", cache_dir=None)) == [["cyclic.a", "cyclic.b"]]


def test_every_module_sits_in_a_layer():
    """Outside the layers only packages that import nothing of the project (``pipelines/data/__init__.py``: a
    docstring over the layers of its modules)."""
    layers = [m for layer in _layers() for m in layer]
    graph = _graph()
    outside = sorted(m for m in graph.modules
                     if not any(m == top or m.startswith(top + ".") for top in layers)
                     and graph.find_modules_directly_imported_by(m))
    assert outside == [], f"modules in no layer of pyproject.toml's contract: {outside}"
