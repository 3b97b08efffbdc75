# tp_lib.sh: a glmchat worker on a free loopback port for the two-rank shell tests.
# Sourced after lib.sh and chat_lib.sh; uses G (the glmchat binary) and TMP.

# start_worker MODEL [ARGS...]: a worker on a free port (WORKER_LISTEN=HOST:PORT: that one; fd 7
# is not inherited: a test's stdin feed for a head); sets worker and PORT. The port comes from
# the worker's --port-file (written whole, by rename, once it listens), not from parsing its
# stderr; the wait lasts as long as the worker lives, up to 120 s of wall time (a loaded machine
# can be slow to start a process), and a failure says whether it exited or how long it ran.
start_worker() {
    local model=$1 t0=$SECONDS
    shift
    rm -f "$TMP/worker.port"
    "$G" worker --listen "${WORKER_LISTEN:-127.0.0.1:0}" --port-file "$TMP/worker.port" --model "$model" \
        --threads 1 "$@" 2>"$TMP/worker.err" 7>&- &
    worker=$!
    PORT=
    while [ -z "$PORT" ] && [ $((SECONDS - t0)) -lt 120 ] && kill -0 $worker 2>/dev/null; do
        [ -s "$TMP/worker.port" ] && PORT=$(cat "$TMP/worker.port") || sleep 0.05
    done
    [ -n "$PORT" ] || { [ -s "$TMP/worker.port" ] && PORT=$(cat "$TMP/worker.port"); }
    if [ -z "$PORT" ]; then
        if kill -0 $worker 2>/dev/null; then
            fail "worker still not listening after $((SECONDS - t0)) s (state $(cut -d' ' -f3 /proc/$worker/stat 2>/dev/null)): $(cat "$TMP/worker.err")"
        else
            fail "worker exited $(wait $worker; echo $?) before listening: $(cat "$TMP/worker.err")"
        fi
    fi
}
stop_worker() {
    kill -TERM $worker 2>/dev/null
    wait $worker 2>/dev/null
}

# check_two_rank_logits MODEL LABEL: logits of 16 tokens (9 prefilled, then decoded) from one rank
# and from two processes over TCP: rank 0 within 1e-5 of one rank's largest logit, and the
# worker's logits equal to rank 0's bit for bit. Writes the max difference to $TMP/diff.txt.
check_two_rank_logits() {
    local model=$1 label=$2
    echo "1 5 9 200 17 33 2 7 100 45 3 8 11 64 300 12" >"$TMP/tokens"
    expect_exit 0 "$G" logits --model "$model" --threads 1 --tokens-file "$TMP/tokens" --prefill 9 \
        --out "$TMP/one.f32"
    start_worker "$model" --dump-logits "$TMP/worker.f32"
    expect_exit 0 "$G" --peer 127.0.0.1:$PORT logits --model "$model" --threads 1 \
        --tokens-file "$TMP/tokens" --prefill 9 --out "$TMP/two.f32"
    stop_worker
    check_py "$label" '
import os, struct
tmp = os.environ["TMP"]
def f32(name):
    b = open(tmp + "/" + name, "rb").read()
    return struct.unpack("<%df" % (len(b) // 4), b)
one, two, w = f32("one.f32"), f32("two.f32"), f32("worker.f32")
if len(one) != len(two) or len(one) == 0: print("FAIL: sizes", len(one), len(two))
scale = max(abs(x) for x in one)
diff = max(abs(x - y) for x, y in zip(one, two))
if not diff / scale <= 1e-5: print("FAIL: max |diff| %g against max |logit| %g" % (diff, scale))
if diff == 0 and one != two: print("FAIL: the logits differ though no difference is above 0 (NaN?)")
if open(tmp + "/two.f32", "rb").read() != open(tmp + "/worker.f32", "rb").read(): print("FAIL: rank 1 logits differ from rank 0")
print("max |diff| %g of max |logit| %g" % (diff, scale), file=open(tmp + "/diff.txt", "w"))
'
}
