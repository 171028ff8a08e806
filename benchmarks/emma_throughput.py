"""Training throughput of EMMA's QLoRA dialogue module: the project's engine vs HF Seq2SeqTrainer.

    python benchmarks/emma_throughput.py                        # GPU: FLAN-T5-Large size, batch 32, checkpointing
    python benchmarks/emma_throughput.py --no-gradient-checkpointing --batch-size 8
    python benchmarks/emma_throughput.py --contenders engine,hf,hf-grouped --engine-compile true
    python benchmarks/emma_throughput.py --spec tiny --steps 6 --skip 2 --batch-size 4 --max-source 128  # CPU smoke

Both sides train the same model, built by ``pipelines.emma.dialogue_model.build_dialogue_model``: a T5 of
FLAN-T5-Large's architecture (spec "flan-t5-large", random init: no hub), frozen base in 4-bit NF4
with double quantisation (bitsandbytes), LoRA r=32, alpha=32, dropout 0.1 on every linear layer
(peft), inputs up to 1024 and targets up to 64 tokens, lr 1e-3 (seed 000, Appendix E.1), bf16
autocast on CUDA, gradient checkpointing on both sides unless ``--no-gradient-checkpointing``
(the issue's peer: batch 32 with checkpointing, 12.4k tokens/s at 13.8 GiB on an H100).

- ``engine``: ``pipelines.training.train`` as the emma_dialogue stage runs it: micro-batches of
  similar lengths (``TrainConfig.group_by_length``, the stage's default), the step free of host
  synchronisation;
- ``hf``: ``transformers.Seq2SeqTrainer`` with its defaults (random batches), the peer of the issue;
- ``hf-grouped`` (optional): the same with its ``group_by_length`` sampler, for reference.

Examples are random token ids whose lengths follow EMMA's three tasks mixed in training (seeded;
an assumption written here, since MiSC is not shipped): generation 60 % (source 128-1024, target
8-48 tokens), summarisation 10 % (source 256-1024, target 16-64), linking 30 % (source 32-96,
target 1-2), 5 x batch x steps of them by default, so that the length-grouped order works on
mega-batches of 50 batches as on the stage's real data (each contender's steps cover a random
part of an epoch). Each contender runs in its own subprocess over the same examples; its collate
records the real (non-pad) source + target tokens of every batch it builds, in order, and the
device is synchronised only at the edges of the timed window (the steps after ``--skip``).
Reported: tokens/s (real tokens), the share of padding, steps/s, peak GPU memory, and the ratio
of each contender's tokens/s to ``hf``'s, with its peak memory beside.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._contenders import edge_stamps, emit, run_contender  # noqa: E402

MIX = (("generation", 0.6, (128, 1024), (8, 48)), ("summarize", 0.1, (256, 1024), (16, 64)),
       ("link", 0.3, (32, 96), (1, 2)))
VOCAB = 32128  # FLAN-T5's vocabulary
CONTENDERS = ("engine", "hf", "hf-grouped")
COMPILE = {"auto": "auto", "true": True, "false": False}   # --engine-compile -> TrainConfig.compile


@dataclass(frozen=True)
class Vocab:
    """What the model factories need of a tokenizer when the examples are already ids."""

    size: int = VOCAB
    pad_token_id: int = 0
    eos_token_id: int = 1

    def __len__(self) -> int:
        return self.size


def make_examples(n: int, max_source: int, max_target: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """``n`` (source ids, target ids) pairs with EMMA-like lengths, each ending in EOS (id 1)."""
    rng = random.Random(seed)
    names, weights = [m[0] for m in MIX], [m[1] for m in MIX]
    spans = {m[0]: (m[2], m[3]) for m in MIX}
    out = []
    for _ in range(n):
        (s_lo, s_hi), (t_lo, t_hi) = spans[rng.choices(names, weights)[0]]
        s = min(rng.randint(s_lo, s_hi), max_source)
        t = min(rng.randint(t_lo, t_hi), max_target)
        source = [rng.randrange(2, VOCAB) for _ in range(s - 1)] + [1]
        target = [rng.randrange(2, VOCAB) for _ in range(t - 1)] + [1]
        out.append((source, target))
    return out


class RecordingCollate:
    """Pads (source, target) pairs to a batch and records (real tokens, padded positions) per batch."""

    def __init__(self):
        self.batches: list[tuple[int, int]] = []

    def __call__(self, pairs) -> dict:
        import torch

        pairs = [(p["input_ids"], p["labels"]) if isinstance(p, dict) else p for p in pairs]
        s_len, t_len = max(len(s) for s, _ in pairs), max(len(t) for _, t in pairs)
        input_ids = torch.zeros((len(pairs), s_len), dtype=torch.long)
        labels = torch.full((len(pairs), t_len), -100, dtype=torch.long)
        for b, (s, t) in enumerate(pairs):
            input_ids[b, : len(s)], labels[b, : len(t)] = torch.tensor(s), torch.tensor(t)
        self.batches.append((sum(len(s) + len(t) for s, t in pairs), len(pairs) * (s_len + t_len)))
        return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long(), "labels": labels}


class IdsTask:
    """The emma_dialogue task's model and loss over examples that are already token ids."""

    paper = "EMMA (arXiv 2410.02503), Appendix E.1: QLoRA FLAN-T5-Large (throughput benchmark)"

    def __init__(self, cfg, examples, base_dir: str, collate: RecordingCollate):
        self.cfg, self.examples, self.base_dir, self.collate = cfg, examples, base_dir, collate

    def build_model(self):
        from pipelines.emma.dialogue_model import build_dialogue_model

        return build_dialogue_model(self.cfg, Vocab(), self.base_dir)

    def train_dataset(self):
        return self.examples

    def valid_dataset(self):
        return None

    def train_lengths(self):
        return [len(s) + len(t) for s, t in self.examples]

    def compute_loss(self, model, batch):
        from pipelines.emma.dialogue_training import seq2seq_loss

        return seq2seq_loss(model, batch)

    def save_final(self, model, out_dir):
        model.save_pretrained(out_dir)


def run_engine(task, cfg, args, workdir: str) -> tuple[float, float]:
    """(start, end) of the timed window: the engine synchronises the device at each logged window."""
    from pipelines.training.engine import train

    stamps: list[float] = []
    tc = cfg.train_config(workdir, batch_size=args.batch_size, max_steps=args.steps, epochs=10**6,
                          log_every=args.skip, save_every=10**9, early_stopping_patience=None, warmup_steps=0,
                          schedule="constant", compile=COMPILE[args.engine_compile])
    train(task, tc, progress=False, callback=lambda step, metrics: stamps.append(time.perf_counter()))
    return stamps[0], stamps[-1]


def run_hf(task, cfg, args, workdir: str, grouped: bool) -> tuple[float, float]:
    import dataclasses

    import torch
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    stamps: dict[int, float] = {}
    fields = {f.name for f in dataclasses.fields(Seq2SeqTrainingArguments)}
    grouping = ({"train_sampling_strategy": "group_by_length" if grouped else "random"}
                if "train_sampling_strategy" in fields else {"group_by_length": grouped})
    targs = Seq2SeqTrainingArguments(
        output_dir=workdir, per_device_train_batch_size=args.batch_size, max_steps=args.steps, learning_rate=cfg.lr,
        lr_scheduler_type="constant", bf16=torch.cuda.is_available(), use_cpu=not torch.cuda.is_available(),
        save_strategy="no", report_to=[], logging_strategy="no", remove_unused_columns=False,
        dataloader_num_workers=0, max_grad_norm=1.0, seed=cfg.seed, **grouping)
    examples = [{"input_ids": s, "labels": t} for s, t in task.examples]
    trainer = Seq2SeqTrainer(model=task.build_model(), args=targs, train_dataset=examples,
                             data_collator=task.collate,
                             callbacks=[edge_stamps(args.skip, args.steps, stamps)])
    trainer.train()
    return stamps[args.skip], stamps[args.steps]


def child(args) -> int:
    import torch

    from pipelines.emma.dialogue_config import EMMADialogueConfig
    from pipelines.emma.dialogue_model import save_random_base

    cfg = EMMADialogueConfig(model=args.spec, max_source_length=args.max_source, max_target_length=args.max_target,
                             gradient_checkpointing=args.gradient_checkpointing, seed=args.seed)
    examples = make_examples(args.examples or 5 * args.batch_size * args.steps, args.max_source, args.max_target,
                             args.seed)
    collate = RecordingCollate()
    with tempfile.TemporaryDirectory() as work:
        task = IdsTask(cfg, examples, str(save_random_base(cfg, Vocab(), Path(work) / "base")), collate)
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        if args.only == "engine":
            start, end = run_engine(task, cfg, args, str(Path(work) / "run"))
        else:
            start, end = run_hf(task, cfg, args, str(Path(work) / "run"), grouped=args.only == "hf-grouped")
    timed = collate.batches[args.skip: args.steps]     # batch i is built for step i + 1 (in order)
    real, padded = sum(r for r, _ in timed), sum(p for _, p in timed)
    seconds = end - start
    result = {"contender": args.only, "steps_timed": len(timed), "seconds": seconds, "tokens_per_s": real / seconds,
              "steps_per_s": len(timed) / seconds, "padding_share": 1 - real / padded,
              "peak_gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None}
    emit(result)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--spec", default="flan-t5-large", help="T5 spec of pipelines.models.t5 (random init)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=40, help="optimizer steps per contender (a multiple of --skip)")
    p.add_argument("--skip", type=int, default=10, help="warm-up steps left out of the timing")
    p.add_argument("--max-source", type=int, default=1024)
    p.add_argument("--max-target", type=int, default=64)
    p.add_argument("--examples", type=int, default=None,
                   help="training examples (default 5 x batch x steps: enough for HF's mega-batches of 50 batches, "
                        "as the stage's real data gives them; each contender trains on a random part of them)")
    p.add_argument("--no-gradient-checkpointing", dest="gradient_checkpointing", action="store_false")
    p.add_argument("--contenders", default="engine,hf", help=f"comma-separated, of {', '.join(CONTENDERS)}")
    p.add_argument("--engine-compile", choices=["auto", "true", "false"], default="auto",
                   help="engine: TrainConfig.compile (auto leaves 4-bit models eager)")
    p.add_argument("--seed", type=int, default=2024)
    p.add_argument("--out", type=Path, default=None, help="JSON file for the results")
    p.add_argument("--only", choices=CONTENDERS, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.steps % a.skip or a.steps <= a.skip:
        p.error("--steps must be a multiple of --skip and larger than it (the engine times whole windows)")
    if a.only:
        return child(a)
    contenders = [c.strip() for c in a.contenders.split(",") if c.strip()]
    if "hf" not in contenders or set(contenders) - set(CONTENDERS):
        p.error(f"--contenders must include hf and name only {', '.join(CONTENDERS)}")

    import torch

    report: dict = {"spec": a.spec, "batch_size": a.batch_size, "max_source": a.max_source,
                    "max_target": a.max_target, "gradient_checkpointing": a.gradient_checkpointing,
                    "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                    "lora_r": 32, "quant": "nf4+double", "runs": {}}
    for name in contenders:
        cmd = [sys.executable, __file__, "--only", name, "--spec", a.spec, "--batch-size", str(a.batch_size),
               "--steps", str(a.steps), "--skip", str(a.skip), "--max-source", str(a.max_source), "--max-target",
               str(a.max_target), "--engine-compile", a.engine_compile, "--seed", str(a.seed)]
        cmd += ["--examples", str(a.examples)] if a.examples else []
        cmd += [] if a.gradient_checkpointing else ["--no-gradient-checkpointing"]
        result = run_contender(cmd)
        if result is None:
            return 1
        report["runs"][name] = result
        print(json.dumps(report["runs"][name]), flush=True)
    peer = report["runs"]["hf"]
    for name, run in report["runs"].items():
        if name != "hf":
            report[f"{name}_over_hf"] = {"tokens_per_s": run["tokens_per_s"] / peer["tokens_per_s"],
                                         "peak_gpu_memory_gib": [run["peak_gpu_memory_gib"],
                                                                 peer["peak_gpu_memory_gib"]]}
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
