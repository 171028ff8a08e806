"""The emma_retriever stage's non-blocking check: does the trained dual encoder beat the encoder it starts from?

Issue #47, point 4: a model that makes retrieval worse is said to (the CLI's ``failed_checks``, MLflow's
``mnemos.checks`` tag, Dagster's asset check, the benchmark report), as the re-ranker's ``beats_first_stage``.
Imports no torch: the report reads it too.
"""

from __future__ import annotations

from pipelines.registry import CheckOutcome

BEATS = "beats_untrained"
BEATS_RULE = ("on queries it never trained on (the test split's, else those each fold model held out), the trained "
              "retriever puts the evidence first at least as often as the untrained encoder it starts from, for every "
              "kind of query scored (tagged turns, each kind of question of emma.retriever.pairs)")


def beats_untrained(metadata: dict, sources: list[str]) -> CheckOutcome:
    """The non-blocking check :data:`BEATS` over the stage's held-out figures (issue #47, point 4: a model that
    makes retrieval worse is said to, as the re-ranker's ``beats_first_stage``): recall@1 of the trained encoder
    against the untrained one, per kind of query (``test_trained_recall@1``, ``test_trained_questions/recall@1``,
    ...; the test split first, else the fold models' pooled figures). Passed, ``measured_on: none``, when nothing
    was scored."""
    for prefix, where in (("test_", "the test split"), ("folds_", "the episodes each fold model held out")):
        kinds = sorted(k.removeprefix(f"{prefix}trained_").removesuffix("recall@1") for k in metadata
                       if k.startswith(f"{prefix}trained_") and k.endswith("recall@1")
                       and f"{prefix}untrained_{k.removeprefix(prefix + 'trained_')}" in metadata)
        if not kinds:
            continue
        figures: dict = {"measured_on": where, "trained_on": list(sources)}
        lost = []
        for kind in kinds:                                   # "": the tagged turns; "questions/" ...
            name = kind.rstrip("/") or "tagged turns"
            model = float(metadata[f"{prefix}trained_{kind}recall@1"])
            untrained = float(metadata[f"{prefix}untrained_{kind}recall@1"])
            figures.update({f"{name}: recall@1": model, f"{name}: untrained recall@1": untrained})
            if model < untrained:
                lost.append(f"{name} {model:.1%} against {untrained:.1%}")
        if not lost:
            return CheckOutcome(BEATS, True, BEATS_RULE, blocking=False, metadata=figures)
        message = (f"on {where}, the trained retriever puts the evidence first less often than the untrained encoder "
                   f"it starts from ({'; '.join(lost)}): it learnt from {', '.join(sources)} and retrieving with it "
                   f"makes such retrieval worse; train it on data like what it will retrieve from (emma.sources, "
                   f"emma.retriever.pairs)")
        return CheckOutcome(BEATS, False, BEATS_RULE, blocking=False, count=len(lost), examples=[message],
                            metadata=figures)
    return CheckOutcome(BEATS, True, BEATS_RULE, blocking=False, metadata={"measured_on": "none"})
