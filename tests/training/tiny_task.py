"""A tiny training task for the engine's tests, and a script that trains it (possibly under a launcher).

The language: sequences x_1..x_T over V tokens with x_{t+1} = (3 x_t + 1) mod V from a
random start, so a 1-layer GPT-2 learns it in a few dozen steps. Dropout stays on so
that resuming must restore (re-seed) the RNG to reproduce the loss curve.

    python tests/training/tiny_task.py --out DIR --max-steps 20 [--sleep 0.05] [--deepspeed FILE] [--track EXP]
                                       [--pretrained FOLDER]

writes DIR/summary.json (rank 0: the losses, the processes, the distributed type, backend and
device accelerate chose, and the class of the model a training step called, e.g.
DistributedDataParallel) and DIR/params-rank<r>.sha256 (every rank: a hash of the rank's own
final weights); with ``--track`` rank 0 logs to MLflow (MLFLOW_TRACKING_URI)
through pipelines.tracking, in experiment EXP. ``--pretrained FOLDER`` starts from a saved
GPT-2 (``from_pretrained``) instead of a random one. Under DeepSpeed ZeRO-3 the hash is of the
gathered weights (the same on every rank), and every rank writes DIR/partition-rank<r>.json:
what it held of the model right after it was built (:func:`partition_report`).
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
                 sleep: float = 0.0, dropout: float = 0.1, n_embd: int = 32, pretrained: str | None = None):
        self.n_train, self.n_valid, self.seq_len, self.vocab = n_train, n_valid, seq_len, vocab
        self.sleep, self.dropout, self.n_embd, self.pretrained = sleep, dropout, n_embd, pretrained
        self.model = None       # the model the engine trains (the first one built)
        self.partition = None   # partition_report of that model, right after it was built
        self.step_model_class = None  # class of the model the first eager step called (DDP wrapper or not)

    def build_model(self):
        if self.pretrained is not None:  # from_pretrained: loads straight into the partitions under ZeRO-3
            model = build_gpt2(Path(self.pretrained))
        else:
            spec = GPT2Spec(n_layer=1, n_head=2, n_embd=self.n_embd, n_positions=self.seq_len, dropout=self.dropout)
            model = build_gpt2(spec, self.vocab)
        if self.model is None:  # under ZeRO-3 rank 0 builds a second, whole model for the final folder
            self.model, self.partition = model, partition_report(model)
        return model

    def train_dataset(self):
        return make_sequences(self.n_train, self.seq_len, self.vocab, seed=1)

    def valid_dataset(self):
        return make_sequences(self.n_valid, self.seq_len, self.vocab, seed=2) if self.n_valid else None

    def collate(self, items):
        return {"input_ids": torch.stack(items)}  # (B, T)

    def compute_loss(self, model, batch):
        if self.sleep:
            time.sleep(self.sleep)
        if self.step_model_class is None and not torch.compiler.is_compiling():
            self.step_model_class = type(model).__name__
        ids = batch["input_ids"]
        out = model(input_ids=ids, labels=ids)
        return out.loss, ids.shape[0] * (ids.shape[1] - 1)

    def save_final(self, model, out_dir):
        model.save_pretrained(out_dir)


class VarLenLMTask(TinyLMTask):
    """TinyLMTask over sequences cut to random lengths in [min_len, seq_len]: padded batches (attention mask,
    labels IGNORE on padding), packed rows (TrainConfig.pack) or bucket-padded ones (length_buckets).
    Pad id 0; the loss is the token mean of pipelines.training.packing.causal_lm_loss."""

    def __init__(self, min_len: int = 3, **kwargs):
        super().__init__(**kwargs)
        self.min_len = min_len

    def _cut(self, seqs: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        lengths = torch.randint(self.min_len, self.seq_len + 1, (len(seqs),), generator=g).tolist()
        return [s[:n] for s, n in zip(seqs, lengths)]

    def train_dataset(self):
        return self._cut(super().train_dataset(), seed=3)

    def valid_dataset(self):
        valid = super().valid_dataset()
        return self._cut(valid, seed=4) if valid else None

    def collate(self, items):
        from pipelines.training.packing import pad_causal_lm
        return pad_causal_lm(items, pad_id=0)                                  # (B, T) each

    def pack_collate(self, items, row_tokens):
        from pipelines.training.packing import pack_causal_lm
        return pack_causal_lm(items, row_tokens, pad_id=0)                     # (R, row_tokens) each

    def sequence_pad_values(self):
        from pipelines.training.packing import causal_lm_pad_values
        return causal_lm_pad_values(pad_id=0)

    def compute_loss(self, model, batch):
        from pipelines.training.packing import causal_lm_loss
        return causal_lm_loss(model, batch)


def _partitioned(model: torch.nn.Module) -> bool:
    return any(hasattr(p, "ds_id") for p in model.parameters())


def params_hash(model: torch.nn.Module) -> str:
    """sha256 of the model's state dict; a ZeRO-3 model's partitions are gathered first (every rank must call)."""
    if _partitioned(model):
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(model.parameters())):
            return params_hash_of(model.state_dict())
    return params_hash_of(model.state_dict())


def params_hash_of(state_dict: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name, p in sorted(state_dict.items()):
        h.update(name.encode())
        h.update(p.detach().cpu().float().numpy().tobytes())
    return h.hexdigest()


def partition_report(model: torch.nn.Module) -> dict[str, int | str] | None:
    """What this rank holds of a model built under ZeRO-3's zero.Init (None for a model built whole): ``full``,
    the elements of every parameter (ds_numel); ``partition``, this rank's shards (ds_tensor); ``materialised``,
    the elements held as whole tensors (numel, 0 when everything is partitioned); ``hash``, of the gathered
    weights."""
    if not _partitioned(model):
        return None
    params = list(model.parameters())
    return {"full": sum(getattr(p, "ds_numel", p.numel()) for p in params),
            "partition": sum(p.ds_tensor.numel() if hasattr(p, "ds_id") else p.numel() for p in params),
            "materialised": sum(p.numel() for p in params), "hash": params_hash(model)}


def main(argv=None) -> int:
    from accelerate.state import PartialState

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
    ap.add_argument("--pretrained", default=None, help="start from this saved GPT-2 folder (from_pretrained)")
    ap.add_argument("--compile-backend", default=None, help="compile the step with this torch.compile backend")
    ap.add_argument("--track", metavar="EXPERIMENT", help="log to MLflow through pipelines.tracking, in EXPERIMENT")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    task = TinyLMTask(sleep=args.sleep, pretrained=args.pretrained)
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
    if task.partition is not None:
        (out / f"partition-rank{rank}.json").write_text(json.dumps(task.partition))
    if rank == 0:
        (out / "summary.json").write_text(json.dumps({
            "final_step": summary.final_step, "train_losses": summary.train_losses,
            "valid_losses": summary.valid_losses, "num_processes": summary.num_processes,
            "resumed_from_step": summary.resumed_from_step, "model_class": task.step_model_class,
            "distributed_type": PartialState().distributed_type.value, "device": PartialState().device.type,
            "backend": torch.distributed.get_backend() if torch.distributed.is_initialized() else None}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
