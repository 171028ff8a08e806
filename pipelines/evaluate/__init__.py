"""Evaluation: retrieval metrics, RealMem's temporal protocol, the benchmark report.

- :mod:`pipelines.evaluate.metrics`: recall@k, recall_any/all@k, ndcg_any@k (LongMemEval), MRR.
- :mod:`pipelines.evaluate.protocol`: the temporal loop over episodes (``run_protocol``).
- :mod:`pipelines.evaluate.report`: ``run_benchmark`` writes benchmark.md, metrics.json and plots.
"""
