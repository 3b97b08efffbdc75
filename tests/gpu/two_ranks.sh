#!/bin/bash
# tests/gpu/two_ranks.sh: two glmchat processes on one GPU (a CUDA head and a CUDA worker over TCP
# loopback) against one CUDA rank, on tiny-A and a quantized EXL3 mkmodel model (tiny-exl3-tp):
# logits of a prefill, decode steps and a 48-token greedy generation (glmchat logits --greedy),
# the worker's logits bit for bit the head's, a greedy chat reply, a refused cache-format
# mismatch, on CUDA a 1,100-token prefill at chunks of 512 rows (each run as two halves whose
# exchanges overlap the other half's work) against chunks of 256 (whole), every row's logits the
# same bits, then bench/bench_tp (one 16 KiB exchange on loopback); the table comes last.
# Usage: tests/gpu/two_ranks.sh [OUT_DIR]   (from the source root). Builds only glmchat and
# bench_tp (CUDA_ARCHS, default 90) unless GLMCHAT_PREBUILT=DIR holds both. TINY_A=DIR names the
# fixture; TP_BACKEND=cpu runs the same checks on the CPU backend (a dry run without a GPU);
# GPU_BENCH=0 skips bench_tp. One suite of tests/gpu/run.sh, which runs them all.
set -u
. "$(dirname "$0")/lib.sh"
backend=${TP_BACKEND:-cuda}
gpu_start two-ranks "${1:-}" glmchat bench/bench_tp || exit 1
G=$(gpu_bin glmchat)
BT=$(gpu_bin bench/bench_tp)
tp_start || exit 1
"$G" mkmodel --out "$models/exl3-src" --preset tiny-exl3-tp --seed 11 >/dev/null &&
    "$G" quantize --in "$models/exl3-src" --out "$models/tiny-exl3-tp" --threads 4 >/dev/null ||
    { echo "FAIL: mkmodel/quantize"; exit 1; }

worker_pid=
start_worker() { # MODEL LOG [ARGS...]: a worker on a free port; sets worker_pid and port
    local model=$1 log=$2 t0=$SECONDS
    shift 2
    rm -f "$build/worker.port"
    "$G" --backend "$backend" worker --listen 127.0.0.1:0 --port-file "$build/worker.port" \
        --model "$model" "$@" 2>"$log" &
    worker_pid=$!
    port=
    while [ -z "$port" ] && [ $((SECONDS - t0)) -lt 120 ] && kill -0 $worker_pid 2>/dev/null; do
        [ -s "$build/worker.port" ] && port=$(cat "$build/worker.port") || sleep 0.05
    done
    [ -n "$port" ] && return 0
    echo "FAIL: the worker did not start in $((SECONDS - t0)) s: $(cat "$log")"
    status=1
    return 1
}
stop_worker() {
    kill -TERM $worker_pid 2>/dev/null
    wait $worker_pid 2>/dev/null
}

# check_model DIR LABEL: one rank and two, logits and greedy ids
check_model() {
    local m=$1 label=$2 d="$build/$2"
    mkdir -p "$d"
    echo "1 5 9 200 17 33 2 7 100 45 3 8 11 64 300 12" >"$d/tokens"
    echo "== $label: one $backend rank"
    "$G" --backend "$backend" logits --model "$m" --tokens-file "$d/tokens" --prefill 9 --greedy 48 \
        --out "$d/one.f32" >"$d/one.ids" 2>"$d/one.err" || { echo "FAIL: $(cat "$d/one.err")"; status=1; return; }
    echo "== $label: a $backend head and a $backend worker over TCP loopback"
    start_worker "$m" "$d/worker.err" --dump-logits "$d/worker.f32" || return
    "$G" --backend "$backend" --peer 127.0.0.1:$port logits --model "$m" --tokens-file "$d/tokens" \
        --prefill 9 --greedy 48 --out "$d/two.f32" >"$d/two.ids" 2>"$d/two.err" ||
        { echo "FAIL: the head: $(cat "$d/two.err")"; status=1; }
    stop_worker
    python3 - "$d" "$label" <<'PY' | tee -a "$table" || status=1
import struct, sys
d, label = sys.argv[1], sys.argv[2]
def f32(name):
    b = open(d + "/" + name, "rb").read()
    return struct.unpack("<%df" % (len(b) // 4), b)
one, two = f32("one.f32"), f32("two.f32")
wb, hb = open(d + "/worker.f32", "rb").read(), open(d + "/two.f32", "rb").read()
ids1, ids2 = open(d + "/one.ids").read().split(), open(d + "/two.ids").read().split()
ok = len(one) == len(two) > 0 and len(ids1) == 48
scale = max(abs(x) for x in one) if one else 1.0
diff = max(abs(x - y) for x, y in zip(one, two)) if ok else float("inf")
ok = ok and diff <= 1e-4 * scale and wb == hb and ids1 == ids2
same = next((i for i, (a, b) in enumerate(zip(ids1, ids2)) if a != b), min(len(ids1), len(ids2)))
print("%-14s 2 ranks vs 1: max|diff| %.3e (rel %.2e) over 64 rows; worker bits %s; greedy %d/48 %s"
      % (label, diff, diff / scale, "equal" if wb == hb else "DIFFER", same, "PASS" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
}

# check_halves DIR LABEL: two CUDA ranks prefill 1,100 tokens in one call at chunks of 512 rows
# (two halves a chunk, their exchanges overlapping the other half's work) and of 256 (whole
# chunks): every row's logits the same bits (a row does not depend on its chunk); against one rank
# within the tolerance above
check_halves() {
    local m=$1 label=$2 d="$build/$2-halves" chunk
    mkdir -p "$d"
    python3 - "$m/config.json" >"$d/tokens" <<'PY'
import json, random, sys
c = json.load(open(sys.argv[1]))
vocab = c.get("text_config", c)["vocab_size"]
r = random.Random(5)
print(" ".join(str(r.randrange(1, vocab)) for _ in range(1100)))
PY
    echo "== $label: 1,100 tokens on two ranks at chunks of 512 (halves) and 256 (whole)"
    GLMCHAT_CUDA_CHUNK=512 "$G" --backend "$backend" logits --model "$m" --tokens-file "$d/tokens" \
        --prefill 1100 --out "$d/one.f32" >/dev/null 2>"$d/one.err" ||
        { echo "FAIL: one rank: $(cat "$d/one.err")"; status=1; return; }
    for chunk in 512 256; do
        export GLMCHAT_CUDA_CHUNK=$chunk
        if start_worker "$m" "$d/worker-$chunk.err"; then
            local t0=$EPOCHREALTIME
            "$G" --backend "$backend" --peer 127.0.0.1:$port logits --model "$m" --tokens-file "$d/tokens" \
                --prefill 1100 --out "$d/c$chunk.f32" >/dev/null 2>"$d/head-$chunk.err" ||
                { echo "FAIL: the head at chunks of $chunk: $(cat "$d/head-$chunk.err")"; status=1; }
            awk "BEGIN { printf \"%.2f\", $EPOCHREALTIME - $t0 }" >"$d/s$chunk"
            stop_worker
        fi
        unset GLMCHAT_CUDA_CHUNK
    done
    python3 - "$d" "$label" <<'PY' | tee -a "$table" || status=1
import os, struct, sys
d, label = sys.argv[1], sys.argv[2]
def f32(name):
    p = os.path.join(d, name)
    b = open(p, "rb").read() if os.path.exists(p) else b""
    return b, struct.unpack("<%df" % (len(b) // 4), b)
(hb, halves), (wb, whole), (_, one) = f32("c512.f32"), f32("c256.f32"), f32("one.f32")
ok = len(halves) == len(whole) == len(one) > 0 and len(one) % 1100 == 0
scale = max(abs(x) for x in one) if one else 1.0
diff = max(abs(x - y) for x, y in zip(one, halves)) if ok else float("inf")
first = next((i // (len(one) // 1100) for i in range(len(halves)) if halves[i] != whole[i]), None) if ok else 0
ok = ok and hb == wb and diff <= 1e-4 * scale
secs = lambda c: open(os.path.join(d, "s%d" % c)).read().strip() if os.path.exists(os.path.join(d, "s%d" % c)) else "?"
print("%-14s 1,100 rows on 2 ranks: halves (chunks of 512) vs whole chunks of 256: %s; vs 1 rank "
      "max|diff| %.3e (rel %.2e); head %s s / %s s %s"
      % (label, "every row the same bits" if hb == wb and hb else "rows differ from row %s" % first,
         diff, diff / scale, secs(512), secs(256), "PASS" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
}

tiny_a=${TINY_A:-$(pwd)/tests/fixtures/models/tiny-A}
[ -d "$tiny_a" ] || { echo "FAIL: no tiny-A at $tiny_a (set TINY_A)"; exit 1; }
check_model "$tiny_a" tiny-A
check_model "$models/tiny-exl3-tp" tiny-exl3-tp
if [ "$backend" = cuda ] || [ -n "${TP_HALVES:-}" ]; then
    check_halves "$tiny_a" tiny-A
    check_halves "$models/tiny-exl3-tp" tiny-exl3-tp
fi

echo "== tiny-exl3-tp: a greedy chat reply, one $backend rank and two"
export XDG_CONFIG_HOME="$build/xdg" XDG_DATA_HOME="$build/xdg-data"
mkdir -p "$XDG_CONFIG_HOME/glmchat"
printf 'temperature = 0\n' >"$XDG_CONFIG_HOME/glmchat/config"
m="$models/tiny-exl3-tp"
"$G" --backend "$backend" --model "$m" chat --no-save --output-format jsonl --max-tokens 40 --think off \
    --prompt "Tell me a story." >"$build/chat1.jsonl" 2>"$build/chat1.err" || { echo "FAIL: $(cat "$build/chat1.err")"; status=1; }
if start_worker "$m" "$build/chat-worker.err"; then
    "$G" --backend "$backend" --model "$m" --peer 127.0.0.1:$port chat --no-save --output-format jsonl \
        --max-tokens 40 --think off --prompt "Tell me a story." >"$build/chat2.jsonl" 2>"$build/chat2.err" ||
        { echo "FAIL: $(cat "$build/chat2.err")"; status=1; }
    stop_worker
fi
python3 - "$build/chat1.jsonl" "$build/chat2.jsonl" <<'PY' | tee -a "$table" || status=1
import json, sys
def reply(p):
    try:
        ev = [json.loads(l) for l in open(p)]
    except (OSError, ValueError):
        return ""
    return "".join(e.get("text", "") for e in ev if e.get("type") in ("content", "reasoning"))
a, b = reply(sys.argv[1]), reply(sys.argv[2])
print("tiny-exl3-tp   chat, 40 greedy tokens: two ranks' reply %s one rank's (%d chars) %s"
      % ("equals" if a == b and a else "DIFFERS FROM", len(a), "PASS" if a == b and a else "FAIL"))
sys.exit(0 if a == b and a else 1)
PY

if [ "$backend" = cuda ]; then
    echo "== a head whose cache format differs from its worker's is refused at bootstrap"
    if start_worker "$tiny_a" "$build/refuse-worker.err"; then
        GLMCHAT_CUDA_KV=fp8 "$G" --backend cuda --peer 127.0.0.1:$port logits --model "$tiny_a" \
            --tokens-file "$build/tiny-A/tokens" --out "$build/refused.f32" >/dev/null 2>"$build/refuse.err"
        rc=$?
        stop_worker
        if [ $rc -ne 0 ] && grep -Eq 'cache and weight formats differ: fp8, bf16 dense weights, one fp16 part of each input, prefill chunks of [0-9]+ rows here, f32, bf16 dense weights, one fp16 part of each input, prefill chunks of [0-9]+ rows on the worker' "$build/refuse.err"; then
            say "refusal       fp8 head, f32 worker: refused PASS ($(head -c 160 "$build/refuse.err"))"
        else
            say "refusal       fp8 head, f32 worker: exit $rc FAIL ($(cat "$build/refuse.err"))"
            status=1
        fi
    fi
fi

if [ "${GPU_BENCH:-1}" = 0 ]; then
    echo "== bench_tp: skipped (GPU_BENCH=0)"
else
    echo "== bench_tp: one 16 KiB exchange over loopback on this host"
    timeout 120 "$BT" 20000 2>&1 | tee "$out/bench_tp.txt" || status=1
    tail -3 "$out/bench_tp.txt" >>"$table"
fi
gpu_finish "table ($backend)" "$table"
