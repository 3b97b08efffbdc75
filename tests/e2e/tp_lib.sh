# tp_lib.sh: a glmchat worker on a free loopback port for the two-rank shell tests.
# Sourced after lib.sh; uses G (the glmchat binary) and TMP.

# start_worker MODEL [ARGS...]: a worker on a free port; sets worker and PORT.
start_worker() {
    local model=$1
    shift
    "$G" worker --listen 127.0.0.1:0 --model "$model" --threads 1 "$@" 2>"$TMP/worker.err" &
    worker=$!
    for _ in $(seq 600); do grep -q '(port [0-9]*) for a head' "$TMP/worker.err" && break; sleep 0.05; done
    PORT=$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' "$TMP/worker.err")
    if [ -z "$PORT" ]; then
        kill -0 $worker 2>/dev/null && fail "worker did not start in 30 s: $(cat "$TMP/worker.err")" ||
            fail "worker exited $(wait $worker; echo $?) before listening: $(cat "$TMP/worker.err")"
    fi
}
stop_worker() {
    kill -TERM $worker 2>/dev/null
    wait $worker 2>/dev/null
}
