#!/usr/bin/env bash
# The GPU figures of issue #29 point 2 (encoders and cross-encoder on the GPU) and issue #30 point 1 (the MDR
# stages, the lm shape and EMMA's QLoRA module against the Hugging Face trainers, implicit syncs per step), in one
# call on one GPU. Each part runs under its own time cap and keeps its log (and JSON) in $OUT as it finishes, so a
# call cut short still returns the parts it finished.
#
#     OUT=gpu-figures bash benchmarks/gpu_figures.sh [PART ...]
#
# Parts: embeddings (35 s on an H200), mdr (teacher and lm: ~290 s), mdr2 (decoder and student: ~300 s), emma
# (~200 s: the engine, then Seq2SeqTrainer), nocompile (the teacher's engine without torch.compile: ~60 s). Each
# MDR contender compiles in a fresh process, so one 10-minute call holds about two of them: run
# `embeddings mdr` in one call and `mdr2 emma nocompile` in another. launchers (issue #30 point 4, ~60 s): the
# tiny task under each launcher of deploy/README.md with one process (accelerate gpu_1.yaml, gpu_multi.yaml
# --num_processes 1, torchrun --nproc_per_node 1, DeepSpeed's runner if carried), checking the data-parallel
# path (MULTI_GPU, NCCL, cuda:LOCAL_RANK; benchmarks/launchers_gpu.py says why DDP itself needs 2 GPUs).
# Issue #30 point 2, the levers for the launch-bound MDR shapes (batch 32, texts of random lengths up to the
# paper's maxima: --varlen), each an engine contender beside the plain engine, not in the default list and not
# yet timed on a GPU (each compiles in a fresh process: run each part in a call of its own; each contender's line
# is logged as it finishes, the likeliest winners first): levers (the teacher: CUDA graphs over length buckets,
# buckets alone, CUDA graphs alone, batch 64 x 1 against 32 x 2, AdamW unfused; 7 compiles, capped at 560 s) and
# levers-lm (lm at 64-128 tokens: packing into rows of 256 and 512 tokens, CUDA graphs over buckets or packed
# rows; 5 compiles, capped at 420 s).
# With a lent GPU's 15 minutes (start-up included) the order is: one call of `mdr emma` (issue #30 point 1's
# headline ratios, MFU and syncs; ~520 s), then `levers` with CAP_LEVERS set to what is left; the other parts wait
# for a later task's GPU.
# Needs torch with CUDA, transformers, peft, sentence-transformers and bitsandbytes (emma); caps in seconds from
# CAP_<PART>.
set -u
OUT=${OUT:-gpu-figures}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

part() {  # part NAME CAP COMMAND...: run COMMAND under CAP seconds, log in $OUT/NAME.log
  local name=$1 cap=$2 t0
  shift 2
  t0=$(date +%s)
  echo "== $name (cap ${cap} s): $*"
  timeout "$cap" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc $rc after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/$name.log"
  grep -E '^\{|^RESULT|texts/s|ms/query|^(torch|cuda)' "$OUT/$name.log" | cut -c1-400
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'

for p in "${@:-embeddings mdr mdr2 emma nocompile launchers}"; do
  for name in $p; do
    case $name in
      embeddings) part embeddings "${CAP_EMBEDDINGS:-70}" "$PY" benchmarks/embedding_backends.py --device cuda \
          --n 1024 --variants torch:none:fp32,torch:none:bf16,torch:none:fp16 --batch-sizes 64,256,512 \
          --queries 10 --repeat 2 --out "$OUT/embeddings.json" ;;
      mdr) part mdr "${CAP_MDR:-300}" "$PY" benchmarks/train_throughput.py --stages teacher,lm \
          --count-syncs --out "$OUT/mdr.json" ;;
      mdr2) part mdr2 "${CAP_MDR2:-320}" "$PY" benchmarks/train_throughput.py --stages decoder,student \
          --count-syncs --out "$OUT/mdr2.json" ;;
      emma) part emma "${CAP_EMMA:-220}" "$PY" benchmarks/emma_throughput.py --steps 30 --skip 10 \
          --out "$OUT/emma.json" ;;
      nocompile) part nocompile "${CAP_NOCOMPILE:-90}" "$PY" benchmarks/train_throughput.py --stages teacher \
          --compile false --out "$OUT/nocompile.json" ;;
      launchers) part launchers "${CAP_LAUNCHERS:-150}" "$PY" benchmarks/launchers_gpu.py \
          --out "$OUT/launchers" ;;
      levers) part levers "${CAP_LEVERS:-560}" "$PY" benchmarks/train_throughput.py --stages teacher --varlen \
          --batch-size 32 --steps 120 --skip 20 --contenders engine --lever mode=reduce-overhead+buckets=72:104:136 \
          --lever buckets=72:104:136 --lever mode=reduce-overhead --lever micro=64x1 --lever micro=32x2 \
          --lever fused=false --out "$OUT/levers.json" ;;
      levers-lm) part levers-lm "${CAP_LEVERS_LM:-420}" "$PY" benchmarks/train_throughput.py --stages lm --varlen \
          --seq-len 128 --batch-size 32 --steps 120 --skip 20 --contenders engine --lever pack=256 \
          --lever pack=512 --lever mode=reduce-overhead+buckets=72:104:136 \
          --lever mode=reduce-overhead+pack=512 --out "$OUT/levers-lm.json" ;;
      *) echo "unknown part $name (embeddings, mdr, mdr2, emma, nocompile, launchers, levers, levers-lm)"; exit 2 ;;
    esac
  done
done
