"""A tiny training task for the engine's tests, and a script that trains it (possibly under a launcher).

The language: sequences x_1..x_T over V tokens with x_{t+1} = (3 x_t + 1) mod V from a
random start, so a 1-layer GPT-2 learns it in a few dozen steps. Dropout stays on so
that resuming must restore (re-seed) the RNG to reproduce the loss curve.

    python tests/training/tiny_task.py --out DIR --max-steps 20 [--sleep 0.05] [--deepspeed FILE] [--track EXP]

writes DIR/summary.json (rank 0) and DIR/params-rank<r>.sha256 (every rank: a hash of
the rank's own final weights); with ``--track`` rank 0 logs to MLflow (MLFLOW_TRACKING_URI)
through pipelines.tracking, in experiment EXP.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipelines.models.gpt2 import GPT2Spec, build_gpt2  # noqa: E402


def make_sequences(n: int, seq_len: int, vocab: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, vocab, (n,), generator=g)
    seqs = []
    for s in starts.tolist():
        seq = [s]
        for _ in range(seq_len - 1):
            seq.append((3 * seq[-1] + 1) % vocab)
        seqs.append(torch.tensor(seq))
    return seqs


class TinyLMTask:
    """TrainTask of a 1-layer GPT-2 on the synthetic language above."""

    paper = "engine test task (tiny GPT-2 on a synthetic language)"

    def __init__(self, n_train: int = 48, n_valid: int = 16, seq_len: int = 12, vocab: int = 31,
                 sleep: float = 0.0, dropout: float = 0.1, n_embd: int = 32):
        self.n_train, self.n_valid, self.seq_len, self.vocab = n_train, n_valid, seq_len, vocab
        self.sleep, self.dropout, self.n_embd = sleep, dropout, n_embd
        self.model = None

    def build_model(self):
        spec = GPT2Spec(n_layer=1, n_head=2, n_embd=self.n_embd, n_positions=self.seq_len, dropout=self.dropout)
        self.model = build_gpt2(spec, self.vocab)
        return self.model

    def train_dataset(self):
        return make_sequences(self.n_train, self.seq_len, self.vocab, seed=1)

    def valid_dataset(self):
        return make_sequences(self.n_valid, self.seq_len, self.vocab, seed=2) if self.n_valid else None

    def collate(self, items):
        return {"input_ids": torch.stack(items)}  # (B, T)

    def compute_loss(self, model, batch):
        if self.sleep:
            time.sleep(self.sleep)
        ids = batch["input_ids"]
        out = model(input_ids=ids, labels=ids)
        return out.loss, ids.shape[0] * (ids.shape[1] - 1)

    def save_final(self, model, out_dir):
        model.save_pretrained(out_dir)


def params_hash(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().float().numpy().tobytes())
    return h.hexdigest()


def main(argv=None) -> int:
    from pipelines.training.engine import TrainConfig, train

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--save-every", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--deepspeed", default=None)
    ap.add_argument("--compile-backend", default=None, help="compile the step with this torch.compile backend")
    ap.add_argument("--track", metavar="EXPERIMENT", help="log to MLflow through pipelines.tracking, in EXPERIMENT")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    task = TinyLMTask(sleep=args.sleep)
    config = TrainConfig(output_dir=args.out, lr=3e-3, warmup_steps=3, max_steps=args.max_steps,
                         batch_size=args.batch_size, grad_accum=args.grad_accum, save_every=args.save_every,
                         eval_every=args.eval_every, early_stopping_patience=None, deepspeed=args.deepspeed,
                         compile=args.compile_backend is not None,
                         compile_backend=args.compile_backend or "inductor")
    if args.track and int(os.environ.get("RANK", "0")) == 0:
        from pipelines import tracking

        with tracking.stage_run("tiny", args.track, {"profile": "tiny"}, deferred=True) as tracker:
            summary = train(task, config, tracker=tracker, progress=False)
    else:
        summary = train(task, config, progress=False)
    rank = int(os.environ.get("RANK", "0"))
    out = Path(args.out)
    (out / f"params-rank{rank}.sha256").write_text(params_hash(task.model))
    if rank == 0:
        (out / "summary.json").write_text(json.dumps({
            "final_step": summary.final_step, "train_losses": summary.train_losses,
            "valid_losses": summary.valid_losses, "num_processes": summary.num_processes,
            "resumed_from_step": summary.resumed_from_step}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
