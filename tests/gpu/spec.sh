#!/bin/bash
# tests/gpu/spec.sh: builds glmchat with CUDA on a GPU machine, checks prompt reuse and drafted
# decoding on the CUDA backend (tests/gpu/test_cuda_spec.c) on the fixture models and mkmodel
# models, then runs bench/bench_cuda_spec (time to first token of a new turn after a long
# conversation with and without reuse; decode with copy drafts against plain decode).
# Usage: tests/gpu/spec.sh [OUT_DIR]   (from the source root). BENCH_CONTEXT (32768),
# BENCH_MODEL (the mkmodel preset, small), CUDA_ARCHS (90), SPEC_BENCH=0 (checks only: no bench).
# A model with an MTP layer (mkmodel tiny-mtp) also checks draft = mtp; mkmodel small runs once
# more with GLMCHAT_CUDA_DENSE=q4. GLMCHAT_PREBUILT=DIR takes glmchat,
# test_cuda_spec and bench_cuda_spec from DIR instead of building (a machine without the -dev
# packages; put their libraries on LD_LIBRARY_PATH).
set -u
src=$(pwd)
build=${BUILD_DIR:-"$src/build-gpu-spec"}
out=${1:-"$build/out"}
mkdir -p "$build" "$out"
archs=${CUDA_ARCHS:-90}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64
echo "== machine"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader || true
date -u
start=$(date +%s)
if [ -n "${GLMCHAT_PREBUILT:-}" ]; then
    G="$GLMCHAT_PREBUILT/glmchat"
    T="$GLMCHAT_PREBUILT/test_cuda_spec"
    B="$GLMCHAT_PREBUILT/bench_cuda_spec"
else
    echo "== build: ./configure CUDA_ARCHS=\"$archs\""
    (autoreconf -fi && cd "$build" && "$src/configure" -q CUDA_ARCHS="$archs" &&
        make -j"$(nproc)" glmchat tests/gpu/test_cuda_spec bench/bench_cuda_spec) >"$build/build.log" 2>&1 ||
        { tail -40 "$build/build.log"; exit 1; }
    echo "build took $(( $(date +%s) - start )) s"
    G="$build/glmchat"
    T="$build/tests/gpu/test_cuda_spec"
    B="$build/bench/bench_cuda_spec"
fi
"$G" --version | head -1 || exit 1
models="$build/models"
mkdir -p "$models"
"$G" mkmodel --out "$models/tiny" --preset tiny --seed 11 >/dev/null || exit 1
"$G" mkmodel --out "$models/small" --preset small --seed 3 >/dev/null || exit 1
"$G" mkmodel --out "$models/tiny-mtp" --preset tiny-mtp --seed 13 >/dev/null || exit 1
status=0
: >"$out/checks.txt"
check() { # DIR LABEL [KV] [DENSE]
    echo "== checks: $2"
    GLMCHAT_CUDA_KV=${3:-fp8} GLMCHAT_CUDA_DENSE=${4:-bf16} timeout 90 "$T" "$1" "$2" \
        >"$build/check.log" 2>&1 || status=1
    cat "$build/check.log"
    grep -v '^FAIL' "$build/check.log" | grep -E 'verify|reuse|drafted|MTP|passed|FAILED' >>"$out/checks.txt"
}
for d in "$src"/tests/fixtures/models/*/; do check "$d" "$(basename "$d")"; done
check "$models/tiny" mkmodel-tiny
check "$models/tiny" mkmodel-tiny-f32kv f32
check "$models/small" mkmodel-small-bf16
check "$models/small" mkmodel-small-q4dense fp8 q4 # the Q4 products in windows and steps
check "$models/tiny-mtp" mkmodel-tiny-mtp
check "$models/tiny-mtp" mkmodel-tiny-mtp-f32kv f32
if [ "${SPEC_BENCH:-1}" = 0 ]; then
    echo "== check table"
    cat "$out/checks.txt"
    echo "RESULT: $([ $status = 0 ] && echo PASS || echo FAIL) (checks only, SPEC_BENCH=0), total $(( $(date +%s) - start )) s"
    exit $status
fi
echo "== bench (mkmodel ${BENCH_MODEL:-small})"
bm="$models/small"
if [ "${BENCH_MODEL:-small}" != small ]; then
    bm="$models/bench"
    "$G" mkmodel --out "$bm" --preset "$BENCH_MODEL" --seed 3 >/dev/null || exit 1
fi
ctx=${BENCH_CONTEXT:-32768}
GLMCHAT_CUDA_CONTEXT=$((ctx + 1024)) timeout 150 "$B" "$bm" "$ctx" 64 "${BENCH_DECODE:-256}" 2>&1 |
    tee "$out/bench.txt" || status=1
echo "== check table"
cat "$out/checks.txt"
echo "RESULT: $([ $status = 0 ] && echo PASS || echo FAIL), status $status, total $(( $(date +%s) - start )) s"
exit $status
