#!/bin/bash
# tests/gpu/same_bits.sh: this tree's CUDA forward against a baseline glmchat binary (e.g. one built
# from the commit before a refactor of engine/cuda), logits bit for bit: a prefill (the general
# forms) then one-token steps through the decode graph and greedy steps (the decode forms), on
# tiny-A and mkmodel models that reach each form: bf16 dense, q4 dense, EXL3 (the general forms
# at one row, the fused experts).
# Usage: GLMCHAT_BASELINE=OLD_GLMCHAT tests/gpu/same_bits.sh [OUT_DIR]   (from the source root).
# GLMCHAT_PREBUILT=DIR takes this tree's glmchat from DIR; TINY_A=DIR names the fixture;
# BITS_BACKEND=cpu runs the same comparison on the CPU backend (a dry run without a GPU). One suite
# of tests/gpu/run.sh (it runs it when GLMCHAT_BASELINE is set). A baseline built before 2791f80
# ran the exact prefill products by default: set GLMCHAT_CUDA_GEMM=fixed for both to compare with
# one.
set -u
. "$(dirname "$0")/lib.sh"
if [ ! -x "${GLMCHAT_BASELINE:-}" ]; then
    echo "FAIL: GLMCHAT_BASELINE='${GLMCHAT_BASELINE:-}' names no executable glmchat to compare" \
        "with"
    exit 1
fi
gpu_start bits "${1:-}" glmchat || exit 1
G=$(gpu_bin glmchat)
OLD=$GLMCHAT_BASELINE
gpu_version "$G" || exit 1
gpu_version "$OLD" || exit 1
models="$build/models"
mkdir -p "$models"
"$G" mkmodel --out "$models/small" --preset small --seed 3 >/dev/null || exit 1
"$G" mkmodel --out "$models/exl3-src" --preset small-exl3 --seed 7 >/dev/null &&
    "$G" quantize --in "$models/exl3-src" --out "$models/small-exl3" --bits 4 \
        --threads "$(nproc)" >/dev/null || exit 1
# 48 ids: 40 in one prefill, 8 one at a time, then 24 greedy steps
awk 'BEGIN { for (i = 0; i < 48; i++) printf "%d ", (i * 37 + 5) % 300 + 1; print "" }' \
    >"$build/tokens"
status=0
table="$out/bits.txt"
: >"$table"
# compare DIR LABEL [ENV=VALUE ...]: both binaries' logits of the same run, byte for byte
compare() {
    local m=$1 label=$2
    shift 2
    local d="$build/$label"
    mkdir -p "$d"
    for side in old new; do
        local bin=$G
        [ $side = old ] && bin=$OLD
        env "$@" "$bin" --backend "${BITS_BACKEND:-cuda}" logits --model "$m" \
            --tokens-file "$build/tokens" --prefill 40 --greedy 24 --out "$d/$side.f32" \
            >"$d/$side.ids" 2>"$d/$side.err" || {
            echo "FAIL $label: the $side binary: $(tail -3 "$d/$side.err")" | tee -a "$table"
            status=1
            return
        }
    done
    if cmp -s "$d/old.f32" "$d/new.f32" && cmp -s "$d/old.ids" "$d/new.ids"; then
        echo "PASS $label: $(( $(stat -c %s "$d/new.f32") / 4 )) logits and 24 greedy ids bit for" \
            "bit" | tee -a "$table"
    else
        echo "FAIL $label: the logits or ids differ from the baseline's" \
            "($(cmp "$d/old.f32" "$d/new.f32" 2>&1 | head -1); $(how_far "$d"))" | tee -a "$table"
        status=1
    fi
    rm -f "$d/old.f32" "$d/new.f32"
}
# how_far DIR: how far new is from old where they differ: the largest |logit difference| over
# the largest |logit|, and how many greedy ids agree before the first that does not.
how_far() {
    python3 - "$1" <<'PY' 2>/dev/null || echo "no measure"
import struct, sys
d = sys.argv[1]
def f32(n):
    b = open(d + "/" + n, "rb").read()
    return struct.unpack("<%df" % (len(b) // 4), b)
o, n = f32("old.f32"), f32("new.f32")
ids_o, ids_n = open(d + "/old.ids").read().split(), open(d + "/new.ids").read().split()
same = next((i for i, (a, b) in enumerate(zip(ids_o, ids_n)) if a != b), min(len(ids_o), len(ids_n)))
if len(o) != len(n):
    print("%d logits against %d; greedy ids equal for %d" % (len(n), len(o), same))
else:
    scale = max(abs(x) for x in o) or 1.0
    diff = max(abs(x - y) for x, y in zip(o, n))
    print("max |diff| %.3e = %.2e of the largest logit; greedy ids equal for %d of %d"
          % (diff, diff / scale, same, len(ids_o)))
PY
}
compare "${TINY_A:-$src/tests/fixtures/models/tiny-A}" tiny-A
compare "$models/small" small-bf16
compare "$models/small" small-q4 GLMCHAT_CUDA_DENSE=q4
compare "$models/small" small-bf16-kv-f32 GLMCHAT_CUDA_KV=f32
compare "$models/small-exl3" small-exl3-4bit
gpu_finish "same bits: table" "$table"
