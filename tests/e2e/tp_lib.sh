# tp_lib.sh: glmchat workers on free loopback ports for the shell tests of two or more ranks.
# Sourced after lib.sh and chat_lib.sh; uses G (the glmchat binary) and TMP.

# start_worker MODEL [ARGS...]: a worker on a free port (WORKER_LISTEN=HOST:PORT: that one; fd 7
# is not inherited: a test's stdin feed for a head); sets worker and PORT. The port comes from
# the worker's --port-file (written whole, by rename, once it listens), not from parsing its
# stderr; the wait lasts as long as the worker lives, up to 120 s of wall time (a loaded machine
# can be slow to start a process), and a failure says whether it exited or how long it ran.
# WORKER_NAME (default worker) names its files: $TMP/$WORKER_NAME.port and .err.
start_worker() {
    local model=$1 t0=$SECONDS name=${WORKER_NAME:-worker}
    shift
    rm -f "$TMP/$name.port"
    "$G" worker --listen "${WORKER_LISTEN:-127.0.0.1:0}" --port-file "$TMP/$name.port" --model "$model" \
        --threads 1 "$@" 2>"$TMP/$name.err" 7>&- &
    worker=$!
    PORT=
    while [ -z "$PORT" ] && [ $((SECONDS - t0)) -lt 120 ] && kill -0 $worker 2>/dev/null; do
        [ -s "$TMP/$name.port" ] && PORT=$(cat "$TMP/$name.port") || sleep 0.05
    done
    [ -n "$PORT" ] || { [ -s "$TMP/$name.port" ] && PORT=$(cat "$TMP/$name.port"); }
    if [ -z "$PORT" ]; then
        if kill -0 $worker 2>/dev/null; then
            fail "worker still not listening after $((SECONDS - t0)) s (state $(cut -d' ' -f3 /proc/$worker/stat 2>/dev/null)): $(cat "$TMP/$name.err")"
        else
            fail "worker exited $(wait $worker; echo $?) before listening: $(cat "$TMP/$name.err")"
        fi
    fi
}

# start_workers N MODEL [ARGS...]: the N-1 workers of an N-rank split, each with its own port and
# files ($TMP/rankK.port, .err; K = 1 .. N-1) and --dump-logits $TMP/rankK.f32; sets workers
# (their pids, in rank order) and PEERS (127.0.0.1:P1,127.0.0.1:P2,...: rank order).
start_workers() {
    local n=$1 model=$2 k
    shift 2
    workers= PEERS=
    for k in $(seq 1 $((n - 1))); do
        WORKER_NAME=rank$k start_worker "$model" --dump-logits "$TMP/rank$k.f32" "$@"
        workers="$workers $worker"
        PEERS="$PEERS${PEERS:+,}127.0.0.1:$PORT"
    done
}
stop_workers() {
    local w
    for w in $workers; do kill -TERM $w 2>/dev/null; done
    for w in $workers; do wait $w 2>/dev/null; done
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

# check_n_rank_logits N MODEL LABEL: check_two_rank_logits for N ranks (N processes: the head and
# N-1 workers, --peer given once per worker): rank 0 within 1e-5 of one rank's largest logit, and
# every worker's logits equal to rank 0's bit for bit. Writes the max difference to $TMP/diff.txt.
check_n_rank_logits() {
    local n=$1 model=$2 label=$3 peer_args= p
    echo "1 5 9 200 17 33 2 7 100 45 3 8 11 64 300 12" >"$TMP/tokens"
    expect_exit 0 "$G" logits --model "$model" --threads 1 --tokens-file "$TMP/tokens" --prefill 9 \
        --out "$TMP/one.f32"
    start_workers "$n" "$model"
    for p in ${PEERS//,/ }; do peer_args="$peer_args --peer $p"; done
    expect_exit 0 "$G" $peer_args logits --model "$model" --threads 1 --tokens-file "$TMP/tokens" \
        --prefill 9 --out "$TMP/n.f32"
    stop_workers
    N_RANKS=$n check_py "$label" '
import os, struct
tmp, n = os.environ["TMP"], int(os.environ["N_RANKS"])
def f32(name):
    b = open(tmp + "/" + name, "rb").read()
    return struct.unpack("<%df" % (len(b) // 4), b)
one, head = f32("one.f32"), f32("n.f32")
if len(one) != len(head) or len(one) == 0: print("FAIL: sizes", len(one), len(head))
scale = max(abs(x) for x in one)
diff = max(abs(x - y) for x, y in zip(one, head))
if not diff / scale <= 1e-5: print("FAIL: max |diff| %g against max |logit| %g" % (diff, scale))
if diff == 0 and one != head: print("FAIL: the logits differ though no difference is above 0 (NaN?)")
mine = open(tmp + "/n.f32", "rb").read()
for k in range(1, n):
    if open(tmp + "/rank%d.f32" % k, "rb").read() != mine: print("FAIL: rank %d logits differ from rank 0" % k)
print("max |diff| %g of max |logit| %g" % (diff, scale), file=open(tmp + "/diff.txt", "w"))
'
}
