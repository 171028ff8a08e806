"""What every product adapter shares (pipelines/memory/peers/common.py), checked on each product: a package that
is not installed makes the strategy unavailable naming its extra; a prompt over the model's window is refused and
counted, never cut; a server that cannot be reached stops the run."""

from __future__ import annotations

import importlib.util

import pytest

from pipelines.memory import build_strategy, writers
from pipelines.memory.base import STRATEGIES
from tests.memory.peers.test_mem0 import episode, observe, settings
from tests.memory.test_conformance import facts_of, graph_of, langmem_of

PRODUCTS = {"mem0": ("mem0", "mem0"), "mem0_raw": ("mem0", "mem0"), "graphiti": ("graphiti_core", "graphiti"),
            "langmem": ("langmem", "langmem")}   # strategy -> (its package, the extra that installs it)


@pytest.mark.parametrize("product", sorted(PRODUCTS))
def test_without_the_package_the_strategy_is_unavailable_naming_the_extra(product, monkeypatch):
    package, extra = PRODUCTS[product]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    assert f"pip install -e '.[{extra}]'" in STRATEGIES[product].unavailable([], {})


@pytest.mark.parametrize("product, answers, window", [
    ("mem0", facts_of, 8192),          # SmolLM2-135M's window: mem0's prompt is longer
    ("graphiti", graph_of, 1024), ("langmem", langmem_of, 1024)])
def test_a_prompt_over_the_models_window_is_refused_and_counted_never_cut(product, answers, window, fake, tmp_path):
    llm = fake(answers, window=window)
    memory = build_strategy(product, **settings(tmp_path))
    observe(memory, episode())
    assert llm.calls == 0 and len(memory) == 0
    report = memory.chat.report()
    assert report["refused_too_long"] == 2 and report["longest_prompt"] > window - 512
    assert "product_errors" not in report


@pytest.mark.parametrize("product", ["mem0", "graphiti", "langmem"])
def test_a_server_that_cannot_be_reached_stops_the_run_as_for_the_reader(product, tmp_path, monkeypatch):
    """A server that cannot be reached is the run's error (as for the reader), not a product's."""
    from pipelines.llm.base import LLMError
    from pipelines.llm.serve import free_port

    monkeypatch.setattr(writers, "_SHARED", {})
    closed = {"backend": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1", "model": "m", "max_retries": 0}
    memory = build_strategy(product, **settings(tmp_path, llm=closed))
    ep = episode()
    with pytest.raises(LLMError, match="cannot reach the OpenAI-compatible server"):
        memory.observe(ep, ep.sessions[0])
