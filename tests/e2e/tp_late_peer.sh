#!/bin/bash
# tp_late_peer.sh: two real rank processes over TCP on loopback, one of them late to an exchange
# while alive and in its step (its heartbeats say so): the other waits past the timeout and the
# run ends with identical sums; a peer whose step failed (out of its step) still ends the wait at
# the timeout; a peer late for longer than the head's cap (24 timeouts) ends it there; a reply
# canceled meanwhile ends it at the next heartbeat.
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/lib.sh"
PEER="$GLMCHAT_BUILDDIR/tests/tp/tp_peer"
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# start_worker NAME TIMEOUT_MS [ARGS...]: a worker on a free port; sets WORKER_PID and PORT.
start_worker() {
    local name=$1 t=$2; shift 2
    rm -f "$TMP/port"
    "$PEER" --role worker --addr 127.0.0.1:0 --port-file "$TMP/port" --per-step 20 --floats 512 --timeout-ms "$t" \
        --heartbeat-ms $((t / 5)) "$@" >"$TMP/$name.out" 2>&1 &
    WORKER_PID=$!
    for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.05; done
    PORT=$(cat "$TMP/port" 2>/dev/null)
    [ -n "$PORT" ] || fail "worker $name did not start: $(cat "$TMP/$name.out")"
}

# run_head NAME TIMEOUT_MS [ARGS...]: the head against PORT, 6 steps of 20 exchanges; sets RC, TOOK.
run_head() {
    local name=$1 t=$2; shift 2
    local t0; t0=$(now_ms)
    timeout 60 "$PEER" --role head --addr 127.0.0.1:$PORT --steps 6 --per-step 20 --floats 512 \
        --timeout-ms "$t" --heartbeat-ms $((t / 5)) "$@" >"$TMP/$name.out" 2>&1
    RC=$?
    TOOK=$(( $(now_ms) - t0 ))
}

digest_of() { sed -n 's/.*digest \([0-9a-f]*\).*/\1/p' "$TMP/$1" | tail -1; }
same_digests() {
    if [ -n "$(digest_of "$1")" ] && [ "$(digest_of "$1")" = "$(digest_of "$2")" ]; then pass; else
        fail "digests differ: $1 $(digest_of "$1"), $2 $(digest_of "$2")"; fi
}

# 1. The worker is 3 timeouts late to step 3's first exchange: the head waits for it.
start_worker w_late 1000 --late-step 3 --late-ms 3000
run_head h_late 1000
wait "$WORKER_PID"
[ "$RC" -eq 0 ] && pass || fail "a late worker failed the head ($RC): $(cat "$TMP/h_late.out")"
[ "$TOOK" -ge 3000 ] && pass || fail "the head finished in $TOOK ms, before the late worker came"
expect_grep h_late.out 'steps 6 exchanges 120 digest'
expect_grep h_late.out 'head: note: the worker at 127.0.0.1:[0-9]+ is [1-3]\.[0-9] s late to exchange 42 and still working toward it; waiting for it \(at most 24 s in all\)'
same_digests h_late.out w_late.out

# 2. The head is as late: the worker waits for it.
start_worker w_wait 1000
run_head h_slow 1000 --late-step 2 --late-ms 3000
wait "$WORKER_PID"
[ "$RC" -eq 0 ] && pass || fail "the worker gave up on a late head: $(cat "$TMP/h_slow.out") / $(cat "$TMP/w_wait.out")"
expect_grep w_wait.out 'worker: steps 6 exchanges 120 digest'
expect_grep w_wait.out 'worker: note: the head at 127.0.0.1:[0-9]+ is [1-3]\.[0-9] s late to exchange 22 and still working toward it; waiting for it \(at most 48 s in all\)'
same_digests h_slow.out w_wait.out

# (the link's exchange 1 is the data path's check at connect: step k's first exchange is 20(k-1)+2)
# 3. The worker's step 3 failed there (it makes none of its exchanges, then waits for the next
# step, heartbeating): the head's wait ends at its timeout, as before.
start_worker w_drop 1000 --drop-step 3
run_head h_drop 1000
[ "$RC" -eq 4 ] && pass || fail "head exited $RC, expected 4: $(cat "$TMP/h_drop.out")"
[ "$TOOK" -le 2800 ] && pass || fail "the head waited $TOOK ms for a worker out of its step"
expect_grep h_drop.out 'FAILED after 2 steps: exchange 42 with the worker at 127.0.0.1:[0-9]+ failed: .*did not answer exchange 42 in time'
kill "$WORKER_PID" 2>/dev/null; wait "$WORKER_PID" 2>/dev/null

# 4. A worker late for longer than the head's cap (24 timeouts of 400 ms): the head ends the
# wait at the cap and says how long it waited.
start_worker w_cap 400 --late-step 2 --late-ms 30000
run_head h_cap 400
[ "$RC" -eq 4 ] && pass || fail "head exited $RC, expected 4: $(cat "$TMP/h_cap.out")"
[ "$TOOK" -ge 9400 ] && [ "$TOOK" -le 13500 ] && pass || fail "the head gave up after $TOOK ms, not at 24 x 400"
expect_grep h_cap.out 'exchange 22 with the worker at 127.0.0.1:[0-9]+ failed after (9|10|11|12)\.[0-9] s: .*did not answer exchange 22 in time'
kill "$WORKER_PID" 2>/dev/null; wait "$WORKER_PID" 2>/dev/null

# 5. The user cancels the reply while the head waits for a late worker: the wait ends at the next
# heartbeat after the cancel, saying so, not at the cap.
start_worker w_cancel 1000 --late-step 2 --late-ms 30000
run_head h_cancel 1000 --cancel-after-ms 2500
[ "$RC" -eq 4 ] && pass || fail "head exited $RC, expected 4: $(cat "$TMP/h_cancel.out")"
[ "$TOOK" -ge 2400 ] && [ "$TOOK" -le 5000 ] && pass || fail "a canceled wait ended after $TOOK ms"
expect_grep h_cancel.out 'exchange 22 with the worker at 127.0.0.1:[0-9]+ was given up after [2-4]\.[0-9] s: the reply was canceled while the worker was late'
kill "$WORKER_PID" 2>/dev/null; wait "$WORKER_PID" 2>/dev/null
finish
