#!/bin/bash
# tests/gpu/engine.sh: builds glmchat with CUDA on a GPU machine and checks the CUDA backend
# against the CPU backend (tests/gpu/test_cuda_engine.c) on the fixture models, mkmodel models
# (BF16 and EXL3) and two ranks in one process (two processes: tests/gpu/two_ranks.sh), checks
# the prefill attention kernels against the scalar ones (tests/gpu/test_mla_gpu.c), the indexer's
# top-k and scores against CPU and fp64 references (tests/gpu/test_index_gpu.c), the dense
# prefill products across chunk sizes (tests/gpu/test_gemm_rows.c), the decode step's kernels
# (tests/gpu/test_decode_gpu.c), the KDA prefill kernels (tests/gpu/test_kda_gpu.c), the
# prefill path's fused HC kernels (tests/gpu/test_hc_gpu.c) and the device-dependent launches
# from two threads a device on every device (tests/gpu/test_devices_gpu.c), then runs
# bench/bench_cuda_engine; the parity table and the bench log come last.
# Usage: tests/gpu/engine.sh [OUT_DIR]   (from the source root). GLMCHAT_PREBUILT=DIR takes
# glmchat, test_cuda_engine, bench_cuda_engine, test_cuda_emulate, test_mla_gpu, test_index_gpu,
# test_gemm_rows, test_decode_gpu, test_kda_gpu, test_hc_gpu and test_devices_gpu from DIR instead
# of building (a machine without the -dev packages; put their libraries on LD_LIBRARY_PATH);
# TINY_A=DIR and FIXTURE_MODELS=DIR name the fixtures; BENCH_LAYERS (16), BENCH_PREFILL
# (8192,65536), BENCH_CHUNKS (0: the plan's chunk; sizes such as 1024,4096 time each) and
# BENCH_POSITIONS (1024,65536,262144: the decode step's context positions) are the bench's
# arguments, GPU_BENCH=0 skips it. One suite of tests/gpu/run.sh, which runs them all.
set -u
. "$(dirname "$0")/lib.sh"
gpu_start engine "${1:-}" glmchat tests/gpu/test_cuda_engine bench/bench_cuda_engine \
    tests/gpu/test_cuda_emulate tests/gpu/test_mla_gpu tests/gpu/test_index_gpu tests/gpu/test_gemm_rows \
    tests/gpu/test_decode_gpu tests/gpu/test_kda_gpu tests/gpu/test_hc_gpu tests/gpu/test_devices_gpu || exit 1
G=$(gpu_bin glmchat)
T=$(gpu_bin tests/gpu/test_cuda_engine)
B=$(gpu_bin bench/bench_cuda_engine)
EMU=$(gpu_bin tests/gpu/test_cuda_emulate)
MLA=$(gpu_bin tests/gpu/test_mla_gpu)
IDX=$(gpu_bin tests/gpu/test_index_gpu)
GEMM=$(gpu_bin tests/gpu/test_gemm_rows)
DEC=$(gpu_bin tests/gpu/test_decode_gpu)
KDA=$(gpu_bin tests/gpu/test_kda_gpu)
HCK=$(gpu_bin tests/gpu/test_hc_gpu)
DEVS=$(gpu_bin tests/gpu/test_devices_gpu)
"$G" --version || exit 1
tiny_a=${TINY_A:-$(pwd)/tests/fixtures/models/tiny-A}
fixtures=${FIXTURE_MODELS:-"$src/tests/fixtures/models"}
models="$build/models"
mkdir -p "$models"
"$G" mkmodel --out "$models/small-bf16" --preset small --seed 3 >/dev/null || exit 1
"$G" mkmodel --out "$models/tiny" --preset tiny --seed 11 >/dev/null || exit 1
"$G" mkmodel --out "$models/exl3-src" --preset tiny-exl3 --seed 5 >/dev/null || exit 1
"$G" quantize --in "$models/exl3-src" --out "$models/tiny-exl3" --bits 4 >/dev/null || exit 1
"$G" mkmodel --out "$models/exl3s-src" --preset small-exl3 --seed 7 >/dev/null || exit 1
"$G" quantize --in "$models/exl3s-src" --out "$models/small-exl3" --bits 4 --threads "$(nproc)" \
    >/dev/null || exit 1
status=0
: >"$out/parity.txt"
# kernel_test BIN NAME SECONDS PATTERN TITLE: a kernel test program under its time limit, its
# output kept in $out/NAME.txt and shown, the lines PATTERN picks added to the parity table.
kernel_test() {
    local bin=$1 name=$2 secs=$3 pattern=$4 prog
    prog=$(basename "$bin")
    echo "== $5"
    if [ -x "$bin" ]; then
        timeout "$secs" "$bin" >"$out/$name.txt" 2>&1 || status=1
        cat "$out/$name.txt"
        grep -E "$pattern" "$out/$name.txt" | sed "s/^/$prog: /" >>"$out/parity.txt"
    else
        echo "no $prog"
    fi
}
kernel_test "$MLA" mla 180 'FAIL|PASS' "the prefill latent attention and its products against the scalar kernels"
kernel_test "$IDX" index 120 'FAIL|PASS' \
    "the indexer: top-k against the CPU's rule, scores against fp64, times against the previous one"
kernel_test "$GEMM" gemm 240 'FAIL|PASS' \
    "the dense prefill products: row bits across chunk sizes, values, time against cuBLAS's default"
kernel_test "$DEC" decode 120 '^(FAIL|PASS)' \
    "the decode step's kernels at the real shapes (references, rows bit-equal alone, times)"
kernel_test "$KDA" kda 180 '^(FAIL|PASS)' \
    "the KDA prefill kernels bit for bit (C references, the decode path a token at a time), times"
kernel_test "$HCK" hc 120 '^(FAIL|PASS)' \
    "the prefill path's fused HC kernels against double sums, row bits across chunks, times"
kernel_test "$DEVS" devices 120 '^(FAIL|PASS)' \
    "the device-dependent launches from two threads a device on every device: none refused, same bits"
run_parity() { # DIR LABEL [PROMPT] [GREEDY]
    echo "== parity: $2"
    timeout 300 "$T" "$1" "${3:-40}" "${4:-200}" "$2" >"$build/parity.log" 2>&1 || status=1
    cat "$build/parity.log"
    grep -E ' (f32|bf16|fp8)/(f32|bf16|fp8) | 2 ranks | q4 dense | chunks | in-graph profile: ' "$build/parity.log" >>"$out/parity.txt"
}
run_parity "$tiny_a" tiny-A 300
run_parity "$tiny_a" tiny-A-long 1300 100 # more than one prefill chunk of 1024 rows
for d in "$fixtures"/*/; do run_parity "$d" "$(basename "$d")"; done
run_parity "$models/tiny" mkmodel-tiny 300
run_parity "$models/small-bf16" mkmodel-small-bf16 300
run_parity "$models/tiny-exl3" mkmodel-tiny-exl3-4bit 64
run_parity "$models/small-exl3" mkmodel-small-exl3-4bit 300 # the fused EXL3 expert kernels
echo "== the lossy modes (fp8/bf16 caches, q4 dense, their pairings) against the CPU's emulation"
run_emulate() { # DIR LABEL [PROMPT] [DECODE] [--trace]
    if [ -x "$EMU" ]; then
        timeout 500 "$EMU" ${5:-} "$1" "${3:-40}" "${4:-24}" "$2" >"$build/emulate.log" 2>&1 || status=1
        cat "$build/emulate.log"
        grep -E '^(PASS|FAIL|OVER|NOT JUDGED)' "$build/emulate.log" >>"$out/parity.txt"
    else
        echo "no test_cuda_emulate"; status=1
    fi
}
run_emulate "$tiny_a" tiny-A 300 40
for d in "$fixtures"/*/; do run_emulate "$d" "$(basename "$d")"; done
run_emulate "$models/small-bf16" mkmodel-small-bf16 300 40 # q4 reaches its 256-wide linears
run_emulate "$models/tiny-exl3" mkmodel-tiny-exl3-4bit 64 24
run_emulate "$models/small-exl3" mkmodel-small-exl3-4bit 300 40 --trace # its near ties, traced

# Two processes (a CUDA head and a CUDA worker over TCP loopback): tests/gpu/two_ranks.sh.
echo "1 5 9 200 17 33 2 7 100 45 3 8 11 64 300 12" >"$build/tokens"

echo "== chat: --backend cuda replies as --backend cpu (greedy, f32 cache): exact products"
echo "   (cuda_gemm = fixed on CUDA), and CUDA's default (onepart) as the CPU's emulation of it"
export XDG_CONFIG_HOME="$build/xdg" XDG_DATA_HOME="$build/xdg-data"
mkdir -p "$XDG_CONFIG_HOME/glmchat"; printf 'temperature = 0\n' >"$XDG_CONFIG_HOME/glmchat/config"
# chat_on NAME BACKEND GEMM: a greedy reply into $build/chat-NAME.jsonl (GEMM: cuda_gemm, or "")
chat_on() {
    local gemm=()
    [ -n "$3" ] && gemm=("GLMCHAT_CUDA_GEMM=$3")
    env GLMCHAT_CUDA_KV=f32 "${gemm[@]}" "$G" --backend "$2" --model "$models/tiny" chat --no-save \
        --output-format jsonl --max-tokens 60 --think off --prompt "Tell me a story." \
        >"$build/chat-$1.jsonl" 2>"$build/chat-$1.err" ||
        { echo "FAIL: chat $1: $(cat "$build/chat-$1.err")"; status=1; }
}
chat_on cpu cpu ""
chat_on cuda-fixed cuda fixed
chat_on cpu-onepart cpu onepart
chat_on cuda cuda ""
python3 - "$build" <<'PY' | tee -a "$out/parity.txt" || status=1
import json, sys
def reply(name):
    ev = [json.loads(l) for l in open(sys.argv[1] + "/chat-" + name + ".jsonl")]
    return "".join(e.get("text", "") for e in ev if e.get("type") in ("content", "reasoning"))
ok = True
for a, b, what in (("cpu", "cuda-fixed", "exact products"), ("cpu-onepart", "cuda", "onepart, CUDA's default")):
    x, y = reply(a), reply(b)
    same = x == y and x
    ok = ok and same
    print("chat --backend cuda vs cpu, %s (mkmodel tiny, 60 tokens): %s (%d chars)"
          % (what, "equal" if same else "DIFFERENT", len(x)))
sys.exit(0 if ok else 1)
PY

echo "== the memory plan at open, and a refusal"
GLMCHAT_CUDA_VERBOSE=1 "$G" --backend cuda logits --model "$tiny_a" --tokens-file "$build/tokens" \
    --out "$build/plan.f32" 2>&1 >/dev/null | tee -a "$out/parity.txt"
if GLMCHAT_CUDA_CONTEXT=1000000000 "$G" --backend cuda logits --model "$tiny_a" --tokens-file "$build/tokens" \
    --out "$build/plan.f32" >/dev/null 2>"$build/refuse.err"; then
    echo "FAIL: a billion-token context was not refused"; status=1
else
    cat "$build/refuse.err" | tee -a "$out/parity.txt"
fi

if [ "${GPU_BENCH:-1}" = 0 ]; then
    echo "== bench: skipped (GPU_BENCH=0)"
else
    echo "== bench"
    timeout 420 "$B" "${BENCH_LAYERS:-16}" "${BENCH_PREFILL:-8192,65536}" "${BENCH_CHUNKS:-0}" \
        "${BENCH_POSITIONS:-1024,65536,262144}" 2>&1 | tee "$out/bench.txt"
    bench_rc=${PIPESTATUS[0]}
    [ "$bench_rc" = 0 ] || { echo "FAIL: bench_cuda_engine exited with $bench_rc"; status=1; }
fi
gpu_finish "parity table" "$out/parity.txt"
