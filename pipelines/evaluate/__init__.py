"""Evaluation: retrieval metrics, RealMem's temporal protocol, the suites, the answers and the benchmark report.

- :mod:`pipelines.evaluate.metrics`: recall@k, recall_any/all@k, ndcg_any@k (LongMemEval), MRR.
- :mod:`pipelines.evaluate.protocol`: the temporal loop over episodes (``run_protocol``).
- :mod:`pipelines.evaluate.suite`: benchmark suites (shipped YAML files and installed packages'), their episodes.
- :mod:`pipelines.evaluate.suite_run`: a suite run over its strategies, whole or in shards (``evaluate_suite``).
- :mod:`pipelines.evaluate.shards`: the shards' files, their fingerprints, the merge.
- :mod:`pipelines.evaluate.answers`: readers answering the suites' questions from each strategy's context, judges.
- :mod:`pipelines.evaluate.tables` / :mod:`~pipelines.evaluate.plots`: the report's markdown tables and figures.
- :mod:`pipelines.evaluate.report`: ``write_report`` / ``run_benchmark`` write benchmark.md, metrics.json, plots.
- :mod:`pipelines.evaluate.stage`: the benchmark stages (``benchmark_shard``, ``benchmark``).
"""
