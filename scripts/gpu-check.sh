#!/usr/bin/env bash
# The GPU checks of the host, on a machine with an NVIDIA GPU and no Rust toolchain.
#
#   scripts/gpu-check.sh BUNDLE_DIR [OUT_DIR]
#
# BUNDLE_DIR holds the binaries `cargo xtask gpu-bundle` builds on any Linux x86-64 machine
# (gzipped): homeadam (the host with its `cuda` feature) and the test binaries cuda-gpu
# (homeadam-cuda's kernels against the core), candle-gpu (VarOptimizer on CUDA against the
# CPU) and host-resume (kill and resume). The CUDA 13 libraries come from LD_LIBRARY_PATH, or
# else from the Python environment's `nvidia` packages (PyTorch's CUDA wheels). Each check
# prints its exit status and wall time; the script fails when any check failed.
set -uo pipefail
bundle=${1:?usage: gpu-check.sh BUNDLE_DIR [OUT_DIR]}
out=${2:-$(mktemp -d)}
bin="$out/bin"
mkdir -p "$bin"
for f in "$bundle"/*; do
    name=$(basename "$f" .gz)
    if [[ $f == *.gz ]]; then gunzip -c "$f" >"$bin/$name"; else cp "$f" "$bin/$name"; fi
    chmod +x "$bin/$name"
done
lib=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null)
if [[ -n $lib && -d $lib ]]; then
    export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

failed=0
check() {
    local what=$1
    shift
    echo "== $what"
    local start=$EPOCHREALTIME
    "$@"
    local rc=$?
    echo "== $what: exit $rc, $(python3 -c "print(f'{$EPOCHREALTIME - $start:.1f}')") s"
    [[ $rc -eq 0 ]] || failed=1
}

# Stand-ins for the datasets these machines cannot download: WikiText-2 trains on its
# valid split (tests on test); CIFAR-10-shaped random images for speed only.
wt2="$out/data/wikitext-2"
mkdir -p "$wt2"
cp data/wikitext-2/valid.txt "$wt2/train.txt"
cp data/wikitext-2/test.txt "$wt2/test.txt"
cifar="$out/data/cifar-10"
mkdir -p "$cifar"
python3 - "$cifar" <<'PY'
import os, random, sys
random.seed(0)
def batch(path, n):
    with open(path, "wb") as f:
        for i in range(n):
            f.write(bytes([i % 10]) + os.urandom(3072))
for k in range(1, 6):
    batch(os.path.join(sys.argv[1], f"data_batch_{k}.bin"), 1000)
batch(os.path.join(sys.argv[1], "test_batch.bin"), 1000)
PY

if [[ -x $bin/cuda-gpu ]]; then
    check "homeadam-cuda: every rule = the core's scalar reference" "$bin/cuda-gpu" --test-threads 1
fi
check "homeadam-candle: VarOptimizer on CUDA = on the CPU" timeout 200 "$bin/candle-gpu" --nocapture --test-threads 1
check "kill and resume on the GPU" timeout 200 env HOMEADAM_TEST_BIN="$bin/homeadam" HOMEADAM_TEST_DEVICE=cuda \
    "$bin/host-resume" --test-threads 1
run() {
    local name=$1
    shift
    check "$name" timeout 150 "$bin/homeadam" train "$@" --device cuda --quiet --out "$out/runs/$name"
    tail -n 3 "$out/runs/$name"/*/metrics.csv 2>/dev/null
}
run digits-mlp digits-mlp --optimizers adamw-srf,homeadamw-ew --epochs 5
run wikitext2-quick wikitext2-quick --optimizers adamw,homeadamw-ew --epochs 1
run wikitext2-transformer wikitext2-transformer --optimizers homeadamw --data-dir "$wt2" \
    --epochs 1 --max-batches 100
run cifar10-vgg16 cifar10-vgg16 --optimizers homeadamw --data-dir "$cifar" --epochs 1 --max-batches 20
exit $failed
