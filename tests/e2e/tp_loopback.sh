#!/bin/bash
# tp_loopback.sh: two real rank processes over TCP on loopback: bit-identical rank-order sums over
# thousands of exchanges, and a worker killed, stopped, restarted, refused or attacked mid-run.
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/lib.sh"
PEER="$GLMCHAT_BUILDDIR/tests/tp/tp_peer"
HOSTILE="$GLMCHAT_BUILDDIR/tests/tp/tp_hostile"
TIMEOUT_MS=1500
TIMING=(--timeout-ms $TIMEOUT_MS --heartbeat-ms 250)

# Rank processes are started bare (not under timeout) so signals reach them; whatever is left is
# killed on exit, and every wait below is bounded by the ranks' own timeouts.
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT

# bounded_wait PID SECONDS: waits for PID's exit status; after SECONDS it is killed (status 124).
bounded_wait() {
    local pid=$1 limit=$(( $2 * 20 ))
    for _ in $(seq $limit); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; wait "$pid" 2>/dev/null; return 124; fi
    wait "$pid"
}

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# start_worker NAME [ARGS...]: a worker on a free port; sets WORKER_PID and PORT.
start_worker() {
    local name=$1; shift
    rm -f "$TMP/port"
    "$PEER" --role worker --addr 127.0.0.1:${FIXED_PORT:-0} --port-file "$TMP/port" \
        "${TIMING[@]}" "$@" >"$TMP/$name.out" 2>&1 &
    WORKER_PID=$!
    for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.05; done
    PORT=$(cat "$TMP/port" 2>/dev/null)
    [ -n "$PORT" ] || fail "worker $name did not start: $(cat "$TMP/$name.out")"
}

digest_of() { sed -n 's/.*digest \([0-9a-f]*\).*/\1/p' "$TMP/$1" | tail -1; }

stop_worker() { kill -CONT "$WORKER_PID" 2>/dev/null; kill "$WORKER_PID" 2>/dev/null; wait "$WORKER_PID" 2>/dev/null; }

# 1. Thousands of exchanges (mixed sizes up to 4 MiB): identical bits on both ranks.
start_worker w1
expect_exit 0 timeout 60 "$PEER" --role head --addr 127.0.0.1:$PORT --steps 120 "${TIMING[@]}"
cp "$TMP/out" "$TMP/h1.out"
bounded_wait "$WORKER_PID" 30
expect_grep h1.out 'exchanges 10800 digest'
if [ -n "$(digest_of h1.out)" ] && [ "$(digest_of h1.out)" = "$(digest_of w1.out)" ]; then pass; else
    fail "digests differ: head $(digest_of h1.out), worker $(digest_of w1.out)"; fi

# 1b. The same exchanges split into exchanges of at most 1,000 floats a rank (as the rdma slot
# splits a prefill chunk's partial sums), every fifth also an all-reduce checked bit for bit
# against the gathered halves' rank-order sums: the same digest as one exchange each.
start_worker w_piece --piece 1000 --reduce-every 5
expect_exit 0 timeout 90 "$PEER" --role head --addr 127.0.0.1:$PORT --steps 120 --piece 1000 \
    --reduce-every 5 "${TIMING[@]}"
cp "$TMP/out" "$TMP/h_piece.out"
bounded_wait "$WORKER_PID" 30
expect_grep h_piece.out 'exchanges 10800 digest'
if [ -n "$(digest_of h_piece.out)" ] && [ "$(digest_of h_piece.out)" = "$(digest_of h1.out)" ] &&
    [ "$(digest_of w_piece.out)" = "$(digest_of h1.out)" ]; then pass; else
    fail "split exchanges changed the sums: head $(digest_of h_piece.out), worker $(digest_of w_piece.out), unsplit $(digest_of h1.out)"; fi
# ranks that split differently are out of step at the first split exchange: the head fails, and
# the side that reads the other's frame first says why (the other may see it close instead)
start_worker w_mismatch
expect_exit 4 timeout 30 "$PEER" --role head --addr 127.0.0.1:$PORT --steps 5 --piece 1000 "${TIMING[@]}"
cp "$TMP/out" "$TMP/h_mismatch.out"
bounded_wait "$WORKER_PID" 30
if grep -qE 'the ranks are out of step: exchange 2 of (4000|16384) bytes here, 2 of (16384|4000) bytes from' \
    "$TMP/h_mismatch.out" "$TMP/w_mismatch.out"; then pass; else
    fail "neither rank said they were out of step: head: $(cat "$TMP/h_mismatch.out"); worker: $(cat "$TMP/w_mismatch.out")"; fi

# 2-3. Worker killed, then stopped, mid-run: the head ends with a clear error within the timeout.
for sig in KILL STOP; do
    start_worker "w_$sig"
    "$PEER" --role head --addr 127.0.0.1:$PORT --steps 0 --step-sleep-us 2000 "${TIMING[@]}" \
        >"$TMP/h_$sig.out" 2>&1 &
    head_pid=$!
    sleep 0.7
    kill -$sig "$WORKER_PID"
    t0=$(now_ms)
    bounded_wait "$head_pid" 20
    rc=$?
    took=$(( $(now_ms) - t0 ))
    [ "$rc" -eq 4 ] && pass || fail "SIG$sig: head exited $rc, expected 4: $(cat "$TMP/h_$sig.out")"
    [ "$took" -le $((TIMEOUT_MS + 1000)) ] && pass || fail "SIG$sig: head took $took ms to notice"
    expect_grep "h_$sig.out" 'FAILED after [0-9]+ steps: .*worker at 127.0.0.1:[0-9]+.*the next message reconnects'
    if [ "$sig" = STOP ]; then
        expect_grep "h_$sig.out" 'stopped answering after [0-9.]+ s'
        # Woken up, the worker sees its head gone and says so.
        kill -CONT "$WORKER_PID"
        for _ in $(seq 60); do grep -Eq 'head lost|FAILED' "$TMP/w_$sig.out" && break; sleep 0.05; done
        expect_grep "w_$sig.out" 'worker: (head lost after|FAILED in step) [0-9]+.*head at 127.0.0.1'
    else
        expect_grep "h_$sig.out" 'closed the connection|stopped answering|connection .*(reset|closed)'
    fi
    stop_worker
    echo "SIG$sig noticed in $took ms"
done

# 4. Worker restarted on the same port mid-run: the head reconnects and finishes.
start_worker w_old
FIXED_PORT=$PORT
timeout 40 "$PEER" --role head --addr 127.0.0.1:$PORT --steps 150 --step-sleep-us 3000 --reconnect \
    --connect-ms 8000 "${TIMING[@]}" >"$TMP/h_restart.out" 2>&1 &
head_pid=$!
sleep 0.6
kill -KILL "$WORKER_PID"
wait "$WORKER_PID" 2>/dev/null
sleep 0.3
start_worker w_new
bounded_wait "$head_pid" 40
rc=$?
[ "$rc" -eq 0 ] && pass || fail "restart: head exited $rc: $(cat "$TMP/h_restart.out")"
expect_grep h_restart.out 'reconnected to'
bounded_wait "$WORKER_PID" 30
if [ -n "$(digest_of h_restart.out)" ] && [ "$(digest_of h_restart.out)" = "$(digest_of w_new.out)" ]; then pass; else
    fail "restart: digests differ: $(cat "$TMP/h_restart.out") / $(cat "$TMP/w_new.out")"; fi
unset FIXED_PORT

# 5. Another model or settings: refused at bootstrap, naming the difference; 6. hostile bytes;
# 7. a second head while one is served; then the worker still serves a good head.
start_worker w_guard --heads 2
expect_exit 3 timeout 10 "$PEER" --role head --addr 127.0.0.1:$PORT --steps 1 --model-name other "${TIMING[@]}"
expect_grep out 'refused: the model differs: other here, glm5_next on the worker'
expect_exit 3 timeout 10 "$PEER" --role head --addr 127.0.0.1:$PORT --steps 1 --config-hash 9 "${TIMING[@]}"
expect_grep out "config.json differs: 0000000000000009 here, 0000000000000001 on the worker"
expect_exit 3 timeout 10 "$PEER" --role head --addr 127.0.0.1:$PORT --steps 1 --timeout-ms 900 --heartbeat-ms 250
expect_grep out 'peer timeout \(ms\) differs: 900 here, 1500 on the worker'
expect_exit 0 timeout 30 "$HOSTILE" 127.0.0.1:$PORT 3000
cp "$TMP/out" "$TMP/hostile.out"
expect_grep hostile.out 'hostile: 0 attacks not refused properly'
timeout 30 "$PEER" --role head --addr 127.0.0.1:$PORT --steps 300 --step-sleep-us 2000 "${TIMING[@]}" \
    >"$TMP/h_long.out" 2>&1 &
head_pid=$!
sleep 0.3
expect_exit 3 timeout 10 "$PEER" --role head --addr 127.0.0.1:$PORT --steps 1 "${TIMING[@]}"
expect_grep out 'busy serving the head at'
bounded_wait "$head_pid" 30
[ $? -eq 0 ] && pass || fail "the served head failed: $(cat "$TMP/h_long.out")"
expect_exit 0 timeout 20 "$PEER" --role head --addr 127.0.0.1:$PORT --steps 20 "${TIMING[@]}"
bounded_wait "$WORKER_PID" 30
[ $? -eq 0 ] && pass || fail "the guarded worker failed: $(cat "$TMP/w_guard.out")"
expect_grep w_guard.out 'refused a connection from .*frame magic'

# 8. The head dies mid-run: the worker notices and serves the next head.
start_worker w_headless --heads 2
"$PEER" --role head --addr 127.0.0.1:$PORT --steps 0 --step-sleep-us 2000 "${TIMING[@]}" \
    >"$TMP/h_dies.out" 2>&1 &
head_pid=$!
sleep 0.5
kill -KILL "$head_pid"
wait "$head_pid" 2>/dev/null
expect_exit 0 timeout 20 "$PEER" --role head --addr 127.0.0.1:$PORT --steps 10 --connect-ms 5000 "${TIMING[@]}"
bounded_wait "$WORKER_PID" 30
expect_grep w_headless.out 'worker: (head lost after|FAILED in step) [0-9]+.*head at 127.0.0.1'
expect_grep w_headless.out 'steps 10 exchanges 900'

finish
