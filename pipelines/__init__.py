"""mnemos: training and benchmarking long-term-memory dialogue models.

`pipelines/` holds the pure ML code of every stage; it never imports dagster.
"""

__version__ = "0.1.0"
