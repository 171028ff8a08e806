"""Which folders count as checkpoints, rotation, and the trainer state's round trip."""

from __future__ import annotations

from pipelines.training.checkpoint import (STATE_FILE, TrainerState, complete_checkpoints, latest_checkpoint,
                                           prune_checkpoints, read_state, remove_partial, step_of)


def _make(root, name, with_state=True, step=0):
    d = root / name
    d.mkdir(parents=True)
    if with_state:
        (d / STATE_FILE).write_text(TrainerState(step=step).to_json())
    return d


def test_only_complete_step_folders_count(tmp_path):
    root = tmp_path / "checkpoints"
    _make(root, "step-2", step=2)
    _make(root, "step-10", step=10)
    _make(root, "step-12", with_state=False)      # interrupted before its state file: ignored
    _make(root, ".tmp-step-14", step=14)          # a save in progress: ignored
    _make(root, "best", step=3)                   # not a step folder
    assert [p.name for p in complete_checkpoints(root)] == ["step-2", "step-10"]  # numeric, not lexical order
    assert latest_checkpoint(root).name == "step-10"
    assert latest_checkpoint(tmp_path / "missing") is None


def test_remove_partial_deletes_only_temporary_folders(tmp_path):
    root = tmp_path / "checkpoints"
    _make(root, "step-4", step=4)
    _make(root, ".tmp-step-6", with_state=False)
    remove_partial(root)
    assert sorted(p.name for p in root.iterdir()) == ["step-4"]


def test_prune_keeps_newest_and_the_protected_best(tmp_path):
    root = tmp_path / "checkpoints"
    for s in (2, 4, 6, 8, 10):
        _make(root, f"step-{s}", step=s)
    removed = prune_checkpoints(root, keep=2, protect=4)
    assert sorted(step_of(p) for p in removed) == [2, 6]
    assert [p.name for p in complete_checkpoints(root)] == ["step-4", "step-8", "step-10"]


def test_trainer_state_round_trip(tmp_path):
    state = TrainerState(step=7, epoch=1, batches_in_epoch=3, total_steps=20, world_size=2, tokens_seen=99,
                         train_losses=[[1, 2.5], [2, 2.25]], valid_losses=[[2, 2.0]], best_valid_loss=2.0,
                         best_step=2, bad_evals=1, stopped_early=False, finished=False)
    d = _make(tmp_path, "step-7", with_state=False)
    (d / STATE_FILE).write_text(state.to_json())
    assert read_state(d) == state
