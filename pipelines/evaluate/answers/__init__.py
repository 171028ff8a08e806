"""Answer-level evaluation: a language model answers from each memory, judges score the answers.

- ``types``: AnswerItem (what a reader is asked), Verdict, AnswerRecord (one line of reports/queries.jsonl);
- ``readers``: the questions of a suite (the same for every reader), the protocol's request for the strategies'
  contexts, the reference readers (``full_history``, ``oracle``);
- ``prompts``: the benchmarks' reader prompts; ``judges`` and ``lexical``: the official judges and metrics;
- ``run``: :func:`~pipelines.evaluate.answers.run.answer_suite` -> AnswerRun (one suite answered and judged);
- ``aggregate`` and ``section``: the figures and the report's "Answers" part.

Nothing is imported here: importing a module of the package loads only what that module needs.
"""
