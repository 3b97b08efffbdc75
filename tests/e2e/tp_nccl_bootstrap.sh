#!/bin/bash
# tp_nccl_bootstrap.sh: --transport nccl's bootstrap between two real processes (tests/tp/tp_peer):
# the head's communicator id reaches the worker unchanged in NCCL_ID over the control connection,
# both say nccl, and both then try to join the communicator, which ends in time either way (no
# GPU here: a clear failure; with GPUs it may join). A worker of the cpu backend, or one held to
# tcp, refuses a head asking for nccl, naming the difference. Builds without NCCL: the head refuses by name.
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/lib.sh"
PEER="$GLMCHAT_BUILDDIR/tests/tp/tp_peer"
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT

if ! grep -q '^#define HAVE_NCCL 1' "$GLMCHAT_BUILDDIR/config.h"; then
    expect_exit 3 timeout 20 "$PEER" --role head --addr 127.0.0.1:9 --transport nccl --cuda
    expect_grep out '^head: --transport nccl: this glmchat.*(built without CUDA|had no nccl.h)'
    finish
fi

# start_peer_worker ARGS...: a tp_peer worker on a free port; sets PORT and wpid
start_peer_worker() {
    rm -f "$TMP/port"
    "$PEER" --role worker --addr 127.0.0.1:0 --port-file "$TMP/port" --heads 1 "$@" >"$TMP/worker.out" 2>&1 &
    wpid=$!
    PORT=
    for _ in $(seq 200); do [ -s "$TMP/port" ] && PORT=$(cat "$TMP/port") && break; sleep 0.05; done
    [ -n "$PORT" ] && pass || fail "the tp_peer worker did not listen: $(cat "$TMP/worker.out")"
}

start_peer_worker --transport nccl --cuda --timeout-ms 3000
expect_exit_either() { # CMD...: exit 0 (joined) or 4 (the join failed, said why)
    "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    local got=$?
    [ $got -eq 0 ] || [ $got -eq 4 ] && pass || fail "'$*' exited $got; out: $(cat "$TMP/out" "$TMP/err")"
}
expect_exit_either timeout 60 "$PEER" --role head --addr 127.0.0.1:$PORT --transport nccl --cuda --timeout-ms 3000
timeout 60 tail --pid=$wpid -f /dev/null
cp "$TMP/worker.out" "$TMP/w"
expect_grep out '^head: communicator id [0-9a-f]{16}$'
expect_grep out "^head: connected to 127.0.0.1:$PORT over nccl$"
expect_grep out '^head: join (ok|--transport nccl: .+)$'
expect_grep w '^worker: communicator id [0-9a-f]{16} over nccl$'
expect_grep w '^worker: join (ok|--transport nccl: .+)$'
head_id=$(sed -n 's/^head: communicator id //p' "$TMP/out")
worker_id=$(sed -n 's/^worker: communicator id \([0-9a-f]*\) .*/\1/p' "$TMP/w")
[ -n "$head_id" ] && [ "$head_id" = "$worker_id" ] && pass ||
    fail "the worker holds id '$worker_id', the head sent '$head_id'"
echo "head: $(grep 'join' "$TMP/out"); $(grep 'join' "$TMP/w")"

# a cpu worker (no --cuda) refuses a cuda head asking for nccl: the backends differ
start_peer_worker --timeout-ms 3000
expect_exit 3 timeout 60 "$PEER" --role head --addr 127.0.0.1:$PORT --transport nccl --cuda --timeout-ms 3000
expect_grep out 'refused: the backend differs: cuda here, cpu on the worker'
kill $wpid 2>/dev/null; wait $wpid 2>/dev/null

# a worker held to tcp refuses a head asking for nccl by the transport
start_peer_worker --transport tcp --cuda --timeout-ms 3000
expect_exit 3 timeout 60 "$PEER" --role head --addr 127.0.0.1:$PORT --transport nccl --cuda --timeout-ms 3000
expect_grep out 'the transport differs: (nccl here, tcp on the worker|tcp here, nccl on the head)'
kill $wpid 2>/dev/null; wait $wpid 2>/dev/null

# a head of the cpu backend asking for nccl is refused before it connects
expect_exit 3 timeout 20 "$PEER" --role head --addr 127.0.0.1:9 --transport nccl
expect_grep out '^head: --transport nccl needs --backend cuda'
finish
