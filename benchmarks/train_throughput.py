"""Training throughput: mnemos' engine vs a plain Hugging Face Trainer on GPT-2-124M, same batch and length.

    python benchmarks/train_throughput.py                  # GPU: GPT-2 124M, seq 512, batch 16, bf16
    python benchmarks/train_throughput.py --compile        # engine with torch.compile (TrainConfig.compile)
    python benchmarks/train_throughput.py --tiny           # CPU smoke run: tiny GPT-2, seq 64, batch 8

Each contender runs in its own subprocess on random token ids (throughput does not depend on
the text). Tokens/s counts predicted tokens, B x (T - 1) per step, over the steps after
``--skip`` warm-up steps (compilation, allocator warm-up). Model FLOPs utilisation follows
PaLM / nanoGPT: FLOPs per token = 6 N + 12 L H Q T (N parameters, L layers, H heads, Q head
size, T sequence length), MFU = tokens/s x FLOPs per token / peak bf16 FLOP/s of the device.
Prints one JSON line per contender, then the ratio engine / HF Trainer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Dense bf16 peak (vendor data sheets), for MFU.
PEAK_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0, "L40S": 362.1, "A40": 149.7}


def _spec(args):
    from pipelines.models.gpt2 import GPT2_SPECS, GPT2Spec

    if args.tiny:
        return GPT2Spec(n_layer=2, n_head=2, n_embd=64, n_positions=args.seq_len, dropout=0.0)
    paper = GPT2_SPECS["paper"]
    return GPT2Spec(n_layer=paper.n_layer, n_head=paper.n_head, n_embd=paper.n_embd, n_positions=1024, dropout=0.0)


class RandomTokens:
    """(n, T) random token ids; items are dicts so both the engine and HF Trainer can read them."""

    def __init__(self, n: int, seq_len: int, vocab: int, seed: int = 0):
        import torch

        self.ids = torch.randint(0, vocab, (n, seq_len), generator=torch.Generator().manual_seed(seed))

    def __len__(self):
        return self.ids.shape[0]

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class LMTask:
    paper = "throughput benchmark (GPT-2 124M, Radford et al. 2019)"

    def __init__(self, args):
        self.args = args

    def build_model(self):
        from pipelines.models.gpt2 import build_gpt2

        return build_gpt2(_spec(self.args), self.args.vocab)

    def train_dataset(self):
        return RandomTokens(self.args.batch_size * self.args.steps, self.args.seq_len, self.args.vocab)

    def valid_dataset(self):
        return None

    def collate(self, items):
        import torch

        return {"input_ids": torch.stack([it["input_ids"] for it in items])}  # (B, T)

    def compute_loss(self, model, batch):
        ids = batch["input_ids"]
        return model(input_ids=ids, labels=ids).loss, ids.shape[0] * (ids.shape[1] - 1)

    def save_final(self, model, out_dir):
        model.config.save_pretrained(out_dir)  # weights are not needed for a throughput number


def run_engine(args) -> dict:
    from pipelines.training.engine import TrainConfig, train

    windows: list[float] = []

    def record(step, metrics):
        if "train/tokens_per_s" in metrics and step > args.skip:
            windows.append(metrics["train/tokens_per_s"])

    with tempfile.TemporaryDirectory() as out:
        cfg = TrainConfig(output_dir=out, lr=1e-4, warmup_steps=0, max_steps=args.steps, batch_size=args.batch_size,
                          save_every=10**9, eval_every=10**9, log_every=args.log_every, early_stopping_patience=None,
                          compile=args.compile, keep_checkpoints=1)
        summary = train(LMTask(args), cfg, progress=False, callback=record)
    # windows hold equal token counts, so the steady-state rate is their harmonic mean
    return {"tokens_per_s": statistics.harmonic_mean(windows), "peak_memory_bytes": summary.peak_memory_bytes}


def run_hf_trainer(args) -> dict:
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from pipelines.models.gpt2 import build_gpt2

    cuda = torch.cuda.is_available()
    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_end(self, targs, state, control, **kw):
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(output_dir=out, per_device_train_batch_size=args.batch_size, max_steps=args.steps,
                                  learning_rate=1e-4, bf16=cuda, use_cpu=not cuda, report_to="none",
                                  save_strategy="no", logging_strategy="no", dataloader_drop_last=True, seed=2022)
        model = build_gpt2(_spec(args), args.vocab)
        trainer = Trainer(model=model, args=targs, callbacks=[StepTimer()],
                          train_dataset=RandomTokens(args.batch_size * args.steps, args.seq_len, args.vocab))
        trainer.train()
    steady = times[args.skip:]
    per_step = (steady[-1] - steady[0]) / (len(steady) - 1)
    peak = torch.cuda.max_memory_allocated() if cuda else 0
    return {"tokens_per_s": args.batch_size * (args.seq_len - 1) / per_step, "peak_memory_bytes": int(peak)}


def flops_per_token(args) -> float:
    spec = _spec(args)
    n_params = 12 * spec.n_layer * spec.n_embd ** 2 + args.vocab * spec.n_embd + spec.n_positions * spec.n_embd
    q = spec.n_embd // spec.n_head
    return 6 * n_params + 12 * spec.n_layer * spec.n_head * q * args.seq_len


def child(args) -> int:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    result = run_engine(args) if args.only == "engine" else run_hf_trainer(args)
    result["contender"] = args.only
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="CPU smoke run: tiny GPT-2, seq 64, batch 8")
    ap.add_argument("--seq-len", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps per contender")
    ap.add_argument("--skip", type=int, default=None, help="warm-up steps left out of the timing")
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--compile", action="store_true", help="engine with torch.compile")
    ap.add_argument("--log-every", type=int, default=1, help="engine: steps per logged window (each log syncs)")
    ap.add_argument("--peak-tflops", type=float, default=None, help="device bf16 peak for MFU (default: by name)")
    ap.add_argument("--only", choices=["engine", "hf"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    defaults = (64, 8, 12, 3) if args.tiny else (512, 16, 60, 10)
    args.seq_len = args.seq_len or defaults[0]
    args.batch_size = args.batch_size or defaults[1]
    args.steps = args.steps or defaults[2]
    args.skip = args.skip if args.skip is not None else defaults[3]
    if args.tiny:
        args.vocab = min(args.vocab, 512)
    if args.only:
        return child(args)

    results = {}
    for contender in ("engine", "hf"):
        cmd = [sys.executable, __file__, "--only", contender, "--seq-len", str(args.seq_len), "--batch-size",
               str(args.batch_size), "--steps", str(args.steps), "--skip", str(args.skip), "--vocab", str(args.vocab),
               "--log-every", str(args.log_every)]
        cmd += ["--tiny"] if args.tiny else []
        cmd += ["--compile"] if args.compile and contender == "engine" else []
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
        if done.returncode != 0 or not lines:
            sys.stderr.write(done.stderr[-4000:])
            return 1
        results[contender] = json.loads(lines[-1][len("RESULT "):])

    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    peak = args.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in device), None)
    fpt = flops_per_token(args)
    for name, res in results.items():
        res.update(device=device, seq_len=args.seq_len, batch_size=args.batch_size,
                   compile=args.compile and name == "engine")
        if peak and device != "cpu":
            res["mfu"] = res["tokens_per_s"] * fpt / (peak * 1e12)
        print(json.dumps({name: res}))
    print(json.dumps({"ratio_engine_over_hf": results["engine"]["tokens_per_s"] / results["hf"]["tokens_per_s"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
