#!/bin/bash
# tests/gpu/nranks.sh: N CUDA ranks over NCCL (a head and N-1 workers, one process per GPU by
# CUDA_VISIBLE_DEVICES) against one CUDA rank, on tiny-A and mkmodel's tiny-tp4: logits of a
# prefill and 48 greedy decode steps within the two-rank tolerance (1e-4 of the largest), every
# worker's logits bit for bit the head's, greedy ids and a greedy chat reply identical; the same
# N ranks over --transport tcp beside them; the decode step (chat's decode_tok_s) of one GPU, N
# over nccl and N over tcp; bench/bench_tp_nccl's all-gather of one row (4096 floats) per GPU.
# Usage: tests/gpu/nranks.sh [OUT_DIR]   (from the source root). NRANKS=N (default: every GPU,
# at most 4). Fewer than 2 GPUs: prints "SKIP: needs 2 GPUs, found M" and exits 77 (not run).
# Builds glmchat and bench_tp_nccl (CUDA_ARCHS, default 90) unless GLMCHAT_PREBUILT=DIR holds
# both. GLMCHAT_GPU_COUNT=M stands in for nvidia-smi's count (tests/e2e/gpu_run_cli.sh).
# NRANKS_ONE_GPU=1: every rank on GPU 0 over tcp only (NCCL refuses two ranks on one GPU), so
# the N-rank CUDA split runs for real on a one-GPU machine (NRANKS default 3, no bench).
# TP_BACKEND=cpu: a dry run of the same checks with CPU ranks over tcp only (no GPU, no NCCL,
# NRANKS default 3, no bench), to try the script itself. One suite of tests/gpu/run.sh.
set -u
. "$(dirname "$0")/lib.sh"
backend=${TP_BACKEND:-cuda}
transports="nccl tcp"
gpus=${GLMCHAT_GPU_COUNT:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
if [ "$backend" = cpu ]; then
    transports=tcp gpus=${NRANKS:-3} GPU_BENCH=0
fi
if [ "${NRANKS_ONE_GPU:-0}" = 1 ] && [ "$backend" = cuda ]; then
    transports=tcp GPU_BENCH=0
    [ "$gpus" -ge 1 ] || { echo "SKIP: no GPU"; exit 77; }
    n=${NRANKS:-3}
    [ "$n" -ge 2 ] || { echo "FAIL: NRANKS=$n: at least 2 ranks"; exit 1; }
    gpus=$n # every rank's CUDA_VISIBLE_DEVICES is 0 (gpu_of below)
fi
n=${n:-${NRANKS:-$(( gpus < 4 ? gpus : 4 ))}}
if [ "$gpus" -lt 2 ] || [ "$n" -lt 2 ]; then
    echo "SKIP: needs 2 GPUs, found $gpus (one process per GPU; NRANKS=$n)"
    exit 77
fi
if [ "$n" -gt "$gpus" ]; then
    echo "SKIP: needs $n GPUs (NRANKS), found $gpus"
    exit 77
fi
if [ "$backend" = cpu ] && [ -z "${GLMCHAT_PREBUILT:-}" ]; then
    echo "FAIL: TP_BACKEND=cpu takes its glmchat from GLMCHAT_PREBUILT=DIR"
    exit 1
fi
echo "== $gpus GPUs, $n ranks"
gpu_start nranks "${1:-}" glmchat bench/bench_tp_nccl || exit 1
nvidia-smi topo -m 2>/dev/null | head -12
G=$(gpu_bin glmchat)
BN=$(gpu_bin bench/bench_tp_nccl)
tp_start || exit 1
"$G" mkmodel --out "$models/tiny-tp4" --preset tiny-tp4 --seed 3 >/dev/null ||
    { echo "FAIL: mkmodel tiny-tp4"; exit 1; }

pids=()
PEERS=
# gpu_of K: rank K's GPU (all 0 with NRANKS_ONE_GPU=1)
gpu_of() { if [ "${NRANKS_ONE_GPU:-0}" = 1 ]; then echo 0; else echo "$1"; fi; }
# start_workers MODEL DIR TRANSPORT: workers 1..n-1, worker k on GPU k; sets PEERS (a,b,...)
start_workers() {
    local m=$1 d=$2 transport=$3 k t0=$SECONDS port
    pids=()
    PEERS=
    for k in $(seq 1 $((n - 1))); do
        rm -f "$d/w$k.port"
        CUDA_VISIBLE_DEVICES=$(gpu_of $k) "$G" --backend "$backend" worker --listen 127.0.0.1:0 --port-file "$d/w$k.port" \
            --transport "$transport" --model "$m" --dump-logits "$d/w$k-$transport.f32" 2>"$d/w$k-$transport.err" &
        pids+=($!)
    done
    for k in $(seq 1 $((n - 1))); do
        port=
        while [ -z "$port" ] && [ $((SECONDS - t0)) -lt 180 ] && kill -0 ${pids[$((k - 1))]} 2>/dev/null; do
            [ -s "$d/w$k.port" ] && port=$(cat "$d/w$k.port") || sleep 0.05
        done
        [ -n "$port" ] || { echo "FAIL: worker $k did not start: $(cat "$d/w$k-$transport.err")"; status=1; return 1; }
        PEERS="${PEERS:+$PEERS,}127.0.0.1:$port"
    done
}
stop_workers() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    pids=()
}
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done' EXIT

# check_model DIR LABEL: one rank, then n over nccl and n over tcp: logits, worker bits, greedy ids
check_model() {
    local m=$1 label=$2 d="$build/$2" transport
    mkdir -p "$d"
    echo "1 5 9 200 17 33 2 7 100 45 3 8 11 64 300 12" >"$d/tokens"
    echo "== $label: one $backend rank (GPU 0)"
    CUDA_VISIBLE_DEVICES=0 "$G" --backend "$backend" logits --model "$m" --tokens-file "$d/tokens" --prefill 9 \
        --greedy 48 --out "$d/one.f32" >"$d/one.ids" 2>"$d/one.err" || { echo "FAIL: $(cat "$d/one.err")"; status=1; return; }
    for transport in $transports; do
        echo "== $label: $n $backend ranks over $transport, one GPU each"
        start_workers "$m" "$d" $transport || { stop_workers; continue; }
        CUDA_VISIBLE_DEVICES=0 "$G" --backend "$backend" --transport $transport --peer "$PEERS" logits --model "$m" \
            --tokens-file "$d/tokens" --prefill 9 --greedy 48 --out "$d/n-$transport.f32" \
            >"$d/n-$transport.ids" 2>"$d/n-$transport.err" ||
            { echo "FAIL: the head over $transport: $(cat "$d/n-$transport.err")"; status=1; }
        stop_workers
        python3 - "$d" "$label" "$n" "$transport" <<'PY' | tee -a "$table" || status=1
import struct, sys
d, label, n, tr = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def raw(name):
    try:
        return open(d + "/" + name, "rb").read()
    except OSError:
        return b""
def f32(name):
    b = raw(name)
    return struct.unpack("<%df" % (len(b) // 4), b)
one, many = f32("one.f32"), f32("n-%s.f32" % tr)
head = raw("n-%s.f32" % tr)
workers_equal = all(raw("w%d-%s.f32" % (k, tr)) == head for k in range(1, n))
ids1, idsn = open(d + "/one.ids").read().split(), open(d + "/n-%s.ids" % tr).read().split()
ok = len(one) == len(many) > 0 and len(ids1) == 48
scale = max(abs(x) for x in one) if one else 1.0
diff = max(abs(x - y) for x, y in zip(one, many)) if ok else float("inf")
ok = ok and diff <= 1e-4 * scale and workers_equal and ids1 == idsn
same = next((i for i, (a, b) in enumerate(zip(ids1, idsn)) if a != b), min(len(ids1), len(idsn)))
print("%-10s %d ranks (%s) vs 1: max|diff| %.3e (rel %.2e); workers' bits %s; greedy %d/48 %s"
      % (label, n, tr, diff, diff / scale, "equal" if workers_equal else "DIFFER", same,
         "PASS" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
    done
}

tiny_a=${TINY_A:-$(pwd)/tests/fixtures/models/tiny-A}
[ -d "$tiny_a" ] || { echo "FAIL: no tiny-A at $tiny_a (set TINY_A)"; exit 1; }
check_model "$tiny_a" tiny-A
check_model "$models/tiny-tp4" tiny-tp4

echo "== tiny-tp4: a greedy chat reply and its decode step: one GPU, $n over nccl, $n over tcp"
export XDG_CONFIG_HOME="$build/xdg" XDG_DATA_HOME="$build/xdg-data"
mkdir -p "$XDG_CONFIG_HOME/glmchat"
printf 'temperature = 0\n' >"$XDG_CONFIG_HOME/glmchat/config"
m="$models/tiny-tp4"
d="$build/chat"
mkdir -p "$d"
chat_args=(chat --no-save --output-format jsonl --max-tokens 64 --think off --prompt "Tell me a story.")
CUDA_VISIBLE_DEVICES=0 "$G" --backend "$backend" --model "$m" "${chat_args[@]}" >"$d/one.jsonl" 2>"$d/one.err" ||
    { echo "FAIL: $(cat "$d/one.err")"; status=1; }
for transport in $transports; do
    if start_workers "$m" "$d" $transport; then
        CUDA_VISIBLE_DEVICES=0 "$G" --backend "$backend" --transport $transport --peer "$PEERS" --model "$m" \
            "${chat_args[@]}" >"$d/$transport.jsonl" 2>"$d/$transport.err" ||
            { echo "FAIL: the $transport chat: $(cat "$d/$transport.err")"; status=1; }
    fi
    stop_workers
done
python3 - "$d" "$n" $transports <<'PY' | tee -a "$table" || status=1
import json, sys
d, n, transports = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def events(name):
    try:
        return [json.loads(l) for l in open(d + "/" + name)]
    except (OSError, ValueError):
        return []
def reply(ev):
    return "".join(e.get("text", "") for e in ev if e.get("type") in ("content", "reasoning"))
def decode_tok_s(x):
    if isinstance(x, dict):
        if isinstance(x.get("decode_tok_s"), (int, float)):
            return x["decode_tok_s"]
        for v in x.values():
            r = decode_tok_s(v)
            if r:
                return r
    if isinstance(x, list):
        for v in x:
            r = decode_tok_s(v)
            if r:
                return r
    return 0
one = events("one.jsonl")
ok = bool(reply(one))
for tr in transports:
    ev = events(tr + ".jsonl")
    same = reply(ev) == reply(one) and reply(one)
    ok = ok and bool(same)
    print("tiny-tp4   chat, 64 greedy tokens, %d ranks over %s: reply %s one GPU's %s"
          % (n, tr, "equals" if same else "DIFFERS FROM", "PASS" if same else "FAIL"))
def step_ms(ev):
    t = decode_tok_s(ev)
    return 1000.0 / t if t else float("nan")
print("decode step (tiny-tp4, chat's decode_tok_s): one rank %.3f ms; %s" % (step_ms(one), "; ".join(
    "%d ranks over %s %.3f ms" % (n, tr, step_ms(events(tr + ".jsonl"))) for tr in transports)))
sys.exit(0 if ok else 1)
PY

if [ "${GPU_BENCH:-1}" = 0 ]; then
    echo "== bench_tp_nccl: skipped (GPU_BENCH=0)"
else
    echo "== bench_tp_nccl: one row (4096 floats) gathered among $n ranks, one GPU each"
    rm -f "$build/nccl.id"
    for k in $(seq 1 $((n - 1))); do
        CUDA_VISIBLE_DEVICES=$k timeout 180 "$BN" $k $n "$build/nccl.id" >"$out/bench_nccl.$k.txt" 2>&1 &
        pids+=($!)
    done
    CUDA_VISIBLE_DEVICES=0 timeout 180 "$BN" 0 $n "$build/nccl.id" 2>&1 | tee "$out/bench_nccl.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    for p in "${pids[@]}"; do wait "$p" || { status=1; echo "FAIL: a bench rank: $(cat "$out"/bench_nccl.*.txt)"; }; done
    pids=()
    grep '^nccl' "$out/bench_nccl.txt" >>"$table"
fi
gpu_finish "table ($n $backend ranks)" "$table"
