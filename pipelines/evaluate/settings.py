"""params.yaml ``benchmark``: which suites the benchmark runs, in how many shards, with what encoder batch
(declared in the registry by pipelines/evaluate/stage.py with the strategies' settings beside it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.config_schema import positive_int
from pipelines.evaluate.suite import load_suite


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
        for name in self.suites or ():
            load_suite(name)  # ConfigError naming the shipped suites
        if self.embedding_batch_size is not None:
            positive_int("benchmark.embedding_batch_size", self.embedding_batch_size)
        positive_int("benchmark.shards", self.shards)
