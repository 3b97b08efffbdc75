#!/bin/bash
# tests/gpu/spec.sh: builds glmchat with CUDA on a GPU machine, checks prompt reuse and drafted
# decoding on the CUDA backend (tests/gpu/test_cuda_spec.c) on the fixture models and mkmodel
# models, then runs bench/bench_cuda_spec (time to first token of a new turn after a long
# conversation with and without reuse; the cost of a verification window; decode with copy,
# MTP and all-right drafts against plain decode on prose and code; it fails when a drafted reply
# differs from the plain one).
# Usage: tests/gpu/spec.sh [OUT_DIR]   (from the source root). BENCH_CONTEXT (32768),
# BENCH_MODEL (the mkmodel preset, small-mtp), BENCH_DECODE (256 tokens), BENCH_ROUNDS (3),
# CUDA_ARCHS (90), SPEC_BENCH=0 or GPU_BENCH=0 (checks only: no bench), SPEC_CHECKS=0 (the bench
# only). One suite of tests/gpu/run.sh, which runs them all.
# A model with an MTP layer (mkmodel tiny-mtp) also checks draft = mtp; mkmodel small runs once
# more with GLMCHAT_CUDA_DENSE=q4; mkmodel small-exl3 (quantized here) reaches the fused EXL3
# expert kernels. GLMCHAT_PREBUILT=DIR takes glmchat,
# test_cuda_spec and bench_cuda_spec from DIR instead of building (a machine without the -dev
# packages; put their libraries on LD_LIBRARY_PATH).
set -u
. "$(dirname "$0")/lib.sh"
gpu_start spec "${1:-}" glmchat tests/gpu/test_cuda_spec bench/bench_cuda_spec || exit 1
G=$(gpu_bin glmchat)
T=$(gpu_bin tests/gpu/test_cuda_spec)
B=$(gpu_bin bench/bench_cuda_spec)
gpu_version "$G" || exit 1
models="$build/models"
mkdir -p "$models"
"$G" mkmodel --out "$models/tiny" --preset tiny --seed 11 >/dev/null || exit 1
"$G" mkmodel --out "$models/small" --preset small --seed 3 >/dev/null || exit 1
"$G" mkmodel --out "$models/tiny-mtp" --preset tiny-mtp --seed 13 >/dev/null || exit 1
# the smallest model the fused EXL3 expert kernels (decode and grouped prefill) take
"$G" mkmodel --out "$models/exl3-src" --preset small-exl3 --seed 7 >/dev/null &&
    "$G" quantize --in "$models/exl3-src" --out "$models/small-exl3" --bits 4 \
        --threads "$(nproc)" >/dev/null || exit 1
status=0
: >"$out/checks.txt"
check() { # DIR LABEL [KV] [DENSE]
    echo "== checks: $2"
    GLMCHAT_CUDA_KV=${3:-fp8} GLMCHAT_CUDA_DENSE=${4:-bf16} timeout 90 "$T" "$1" "$2" \
        >"$build/check.log" 2>&1 || status=1
    cat "$build/check.log"
    grep -v '^FAIL' "$build/check.log" | grep -E 'verify|reuse|drafted|MTP|passed|FAILED' >>"$out/checks.txt"
}
if [ "${SPEC_CHECKS:-1}" != 0 ]; then
for d in "$src"/tests/fixtures/models/*/; do check "$d" "$(basename "$d")"; done
check "$models/tiny" mkmodel-tiny
check "$models/tiny" mkmodel-tiny-f32kv f32
check "$models/small" mkmodel-small-bf16
check "$models/small" mkmodel-small-q4dense fp8 q4 # the Q4 products in windows and steps
check "$models/tiny-mtp" mkmodel-tiny-mtp
check "$models/small-exl3" mkmodel-small-exl3 # the fused EXL3 experts in windows, steps, resumes
check "$models/tiny-mtp" mkmodel-tiny-mtp-f32kv f32
fi
if [ "${SPEC_BENCH:-1}" = 0 ] || [ "${GPU_BENCH:-1}" = 0 ]; then
    echo "== check table"
    cat "$out/checks.txt"
    echo "RESULT: $([ $status = 0 ] && echo PASS || echo FAIL) (checks only, SPEC_BENCH=0), total $(( $(date +%s) - start )) s"
    exit $status
fi
preset=${BENCH_MODEL:-small-mtp}
echo "== bench (mkmodel $preset)"
bm="$models/small"
if [ "$preset" != small ]; then
    bm="$models/bench-$preset"
    "$G" mkmodel --out "$bm" --preset "$preset" --seed 3 >/dev/null || exit 1
fi
ctx=${BENCH_CONTEXT:-32768}
GLMCHAT_CUDA_CONTEXT=$((ctx + 1024)) timeout 110 "$B" "$bm" "$ctx" 64 "${BENCH_DECODE:-256}" \
    "${BENCH_ROUNDS:-3}" 2>&1 | tee "$out/bench.txt"
bench_rc=${PIPESTATUS[0]}
if [ "$bench_rc" != 0 ]; then
    echo "FAIL: bench_cuda_spec exited with $bench_rc (a drafted reply differed, a run failed or it timed out)"
    status=1
fi
echo "== check table"
cat "$out/checks.txt"
echo "RESULT: $([ $status = 0 ] && echo PASS || echo FAIL), status $status, total $(( $(date +%s) - start )) s"
exit $status
