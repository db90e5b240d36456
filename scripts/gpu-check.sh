#!/usr/bin/env bash
# The GPU checks, on a machine with an NVIDIA GPU, PyTorch and no Rust toolchain.
#
#   scripts/gpu-check.sh [--dry-run] BUNDLE_DIR [OUT_DIR]
#
# BUNDLE_DIR holds the binaries `cargo xtask gpu-bundle` builds on any Linux x86-64 machine
# (xz-compressed; gzipped or plain also work): homeadam (the host with its `cuda` feature) and the test binaries cuda-gpu and
# jetson-gpu (homeadam-cuda's kernels and the Jetson path against the core), candle-gpu
# (VarOptimizer on CUDA against the CPU), host-gpu (the host's device code against the CPU),
# host-resume (kill and resume) and cuda-bench (homeadam-cuda's step benchmark); optionally
# homeadam-before, an earlier build of the host (`gpu-bundle --before REV`), timed beside it. Python packages in it
# (`*.tar.xz`: bitsandbytes, the 8-bit AdamW that cuda-bench times beside its q8 rows, which
# needs numpy and packaging from the machine's environment; homeadam, the PyTorch package with
# its CUDA step; pytest, which runs the package's CUDA tests) are unpacked onto PYTHONPATH. The CUDA 13 libraries and cuDNN 9 come from
# LD_LIBRARY_PATH, or else from the Python environment's `nvidia` packages (PyTorch's CUDA
# wheels: `nvidia/cu13/lib`, `nvidia/cudnn/lib`).
#
# In this order, each check with a time limit, so that the whole script stays within BUDGET
# seconds (default 480; a check that would start after it is reported as not run):
#   1. training speed: `homeadam bench-train` and host/benches/torch_train.py on VGG16 (batch
#      64 and 128), ResNet34 and the paper's WikiText-2 Transformer (5 warm-up steps, then STEPS
#      timed steps, default 20; all of it ROUNDS times, default 1, each side's best run compared),
#      then their tables (host/benches/compare.py: the speeds, and each phase's host time
#      beside its device time) in OUT_DIR/bench.md; with homeadam-before in the bundle, its
#      AdamW rows too, each run beside the current build's, in OUT_DIR/bench-before.md; then
#      homeadam.torch's step on 256 M CUDA parameters against torch's fused AdamW and a
#      plain-PyTorch HomeAdamW in its home and srf branches (backends/torch/benches/step.py),
#      its table printed;
#   2. the GPU test binaries, then homeadam.torch's CUDA tests (backends/torch/tests/test_cuda.py);
#   3. short training runs of each experiment on the device;
#   4. compute-sanitizer's memcheck over a short training run of each model;
#   5. the kernel time per step of the Transformer, ResNet34 and VGG16, per kernel (Nsight Compute, one
#      warm-up and one timed step; scripts/kernel_times.py) in OUT_DIR/kernels-E.md.
# CHECKS picks the sections (default "speed tests train"; "speed tests train memcheck profile"
# for all).
# Each check prints its exit status and wall time; the script fails when any check failed.
# --dry-run prints the checks' commands instead of running them (no GPU needed).
set -uo pipefail
dry=0
if [[ ${1:-} == --dry-run ]]; then
    dry=1
    shift
fi
bundle=${1:?usage: gpu-check.sh [--dry-run] BUNDLE_DIR [OUT_DIR]}
out=${2:-$(mktemp -d)}
budget=${BUDGET:-480}
steps=${STEPS:-20}
rounds=${ROUNDS:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
bin="$out/bin"
bench="$out/bench"
before="$out/bench-before"
mkdir -p "$bin" "$bench" "$before"
if [[ $dry -eq 0 ]]; then
    for f in "$bundle"/*; do
        name=$(basename "$(basename "$f" .gz)" .xz)
        case $f in
            *.tar.xz)
                python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$f" "$out/python"
                export PYTHONPATH="$out/python${PYTHONPATH:+:$PYTHONPATH}"
                continue ;;
            # Python's lzma: the GPU machine may have no xz tool.
            *.xz) python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$f" "$bin/$name" ;;
            *.gz) gunzip -c "$f" >"$bin/$name" ;;
            *) cp "$f" "$bin/$name" ;;
        esac
        chmod +x "$bin/$name"
    done
    lib=$(python3 -c 'import nvidia, os; print(":".join(d for p in nvidia.__path__ for d in (os.path.join(p, "cu13", "lib"), os.path.join(p, "cudnn", "lib")) if os.path.isdir(d)))' 2>/dev/null)
    if [[ -n $lib ]]; then
        export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())'
fi

checks=" ${CHECKS:-speed tests train} "
failed=0
started=$SECONDS
# check NAME LIMIT COMMAND…: runs COMMAND for at most LIMIT seconds (never past the budget).
check() {
    local what=$1 limit=$2
    shift 2
    local left=$((budget - (SECONDS - started)))
    if [[ $dry -eq 1 ]]; then
        echo "== $what (≤ ${limit} s): $*"
        return
    fi
    if ((left < 10)); then
        echo "== $what: not run (the budget of $budget s is spent)"
        failed=1
        return
    fi
    ((limit > left)) && limit=$left
    echo "== $what"
    local start=$EPOCHREALTIME
    timeout "$limit" "$@"
    local rc=$?
    echo "== $what: exit $rc, $(python3 -c "print(f'{$EPOCHREALTIME - $start:.1f}')") s"
    [[ $rc -eq 0 ]] || failed=1
}

# 1. Training speed, ours and PyTorch's on the same card, in one run.
speed() {
    local experiment=$1 batch=$2 optimizer=$3 round=$4
    local tag="$experiment-b$batch-r$round"
    check "bench-train $tag $optimizer" 120 "$bin/homeadam" bench-train --experiment "$experiment" \
        --batch-size "$batch" --optimizer "$optimizer" --steps "$steps" --device cuda \
        --json "$bench/ours-$tag-$optimizer.json"
    if [[ $optimizer == adamw && ($dry -eq 1 || -x $bin/homeadam-before) ]]; then
        check "bench-train $tag $optimizer (the earlier build, if bundled)" 120 "$bin/homeadam-before" \
            bench-train --experiment "$experiment" --batch-size "$batch" --optimizer "$optimizer" \
            --steps "$steps" --device cuda --json "$before/ours-$tag-$optimizer.json"
    fi
    if [[ $optimizer == adamw ]]; then
        check "torch_train.py $tag" 120 python3 "$here/host/benches/torch_train.py" --experiment "$experiment" \
            --batch-size "$batch" --steps "$steps" --device cuda --json "$bench/torch-$tag.json"
    fi
}
if [[ $checks == *" speed "* ]]; then
    for ((round = 1; round <= rounds; round++)); do
        speed cifar10-vgg16 64 adamw "$round"
        speed cifar10-vgg16 128 adamw "$round"
        speed tinyimagenet-resnet34 64 adamw "$round"
        speed wikitext2-transformer 32 adamw "$round"
        speed cifar10-vgg16 64 homeadamw "$round"
        speed wikitext2-transformer 32 homeadamw "$round"
    done
    if [[ $dry -eq 0 ]]; then
        python3 "$here/host/benches/compare.py" "$bench" | tee "$out/bench.md"
        if compgen -G "$before/*.json" >/dev/null; then
            cp "$bench"/torch-*.json "$before/"
            echo "The earlier build:"
            python3 "$here/host/benches/compare.py" "$before" | tee "$out/bench-before.md"
        fi
    fi
    check "homeadam.torch: a step of 256 M CUDA parameters, ours / torch's fused AdamW and a plain-PyTorch HomeAdamW / ours" 150 \
        python3 "$here/backends/torch/benches/step.py" --device cuda
fi

# 2. The GPU test binaries.
if [[ $checks == *" tests "* ]]; then
check "homeadam-host: the host's device ops (cuDNN convolutions and batch norm, dropout, pooling, the loss, the layers' fused ops) and training steps = the CPU's; freed memory kept in the pool, no events per buffer; page-locked minibatches = direct uploads, also behind a lagging device" 90 "$bin/host-gpu" --test-threads 1 --nocapture
check "homeadam-cuda: every rule and q8 state = the core's scalar reference" 150 "$bin/cuda-gpu" --test-threads 1
check "homeadam-jetson: mapped memory = the core" 60 "$bin/jetson-gpu" --test-threads 1
check "homeadam-cuda: step times (q8 and global rows included) and clipping's exact norm against a plain sum" 120 \
    "$bin/cuda-bench" $((128 << 20))
check "homeadam-candle: VarOptimizer on CUDA = on the CPU" 150 "$bin/candle-gpu" --test-threads 1
check "kill and resume on the GPU" 120 env HOMEADAM_TEST_BIN="$bin/homeadam" HOMEADAM_TEST_DEVICE=cuda \
    "$bin/host-resume" --test-threads 1
check "homeadam.torch on CUDA: every rule × storage = the CPU step, AdamW = torch's fused AdamW, state dicts across devices, GradScaler, one NCCL process" 300 \
    python3 -m pytest -q -rs -p no:cacheprovider "$here/backends/torch/tests/test_cuda.py"
fi

# 3. Short training runs. Stand-ins for the datasets these machines cannot download:
# WikiText-2 trains on its valid split (tests on test); CIFAR-10-shaped random images.
wt2="$out/data/wikitext-2"
cifar="$out/data/cifar-10"
if [[ $dry -eq 0 && $checks == *" train "* ]]; then
    mkdir -p "$wt2" "$cifar"
    cp "$here/data/wikitext-2/valid.txt" "$wt2/train.txt"
    cp "$here/data/wikitext-2/test.txt" "$wt2/test.txt"
    python3 - "$cifar" <<'PY'
import os, sys
def batch(path, n):
    with open(path, "wb") as f:
        for i in range(n):
            f.write(bytes([i % 10]) + os.urandom(3072))
for k in range(1, 6):
    batch(os.path.join(sys.argv[1], f"data_batch_{k}.bin"), 1000)
batch(os.path.join(sys.argv[1], "test_batch.bin"), 1000)
PY
fi
train() {
    local name=$1
    shift
    check "train $name" 90 "$bin/homeadam" train "$@" --device cuda --quiet --out "$out/runs/$name"
    [[ $dry -eq 1 ]] || tail -n 2 "$out/runs/$name"/*/metrics.csv 2>/dev/null
}
if [[ $checks == *" train "* ]]; then
    train digits-mlp digits-mlp --optimizers adamw-srf,homeadamw-ew --epochs 3
    train wikitext2-quick wikitext2-quick --optimizers adamw,homeadamw-ew-q8 --epochs 1
    train wikitext2-transformer wikitext2-transformer --optimizers homeadamw --data-dir "$wt2" \
        --epochs 1 --max-batches 50
    train cifar10-vgg16 cifar10-vgg16 --optimizers homeadamw --data-dir "$cifar" --epochs 1 --max-batches 20
fi

# 4. Memory errors in a short training run of each model.
if [[ $checks == *" memcheck "* ]]; then
    for e in cifar10-vgg16 tinyimagenet-resnet34 wikitext2-transformer; do
        check "memcheck bench-train $e" 120 compute-sanitizer --tool memcheck --error-exitcode 1 \
            "$bin/homeadam" bench-train --experiment "$e" --batch-size 8 --warmup 0 --steps 2 --device cuda
    done
fi
# 5. Per-kernel times.
if [[ $checks == *" profile "* ]]; then
    for run in "wikitext2-transformer 32" "tinyimagenet-resnet34 64" "cifar10-vgg16 64"; do
        read -r e b <<<"$run"
        check "kernel times $e-b$b" 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
            --page raw --log-file "$out/ncu-$e.csv" "$bin/homeadam" bench-train --experiment "$e" \
            --batch-size "$b" --warmup 1 --steps 1 --device cuda
        [[ $dry -eq 1 ]] || python3 "$here/scripts/kernel_times.py" "$out/ncu-$e.csv" 2 40 | tee "$out/kernels-$e.md"
    done
fi
echo "== gpu-check: $((SECONDS - started)) s, $([[ $failed -eq 0 ]] && echo passed || echo FAILED)"
exit $failed
