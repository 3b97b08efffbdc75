#!/bin/bash
# tp_sessions.sh: one head keeps several conversation states over one worker (tests/tp/tp_sessions):
# interleaved, reset, cut back to a mark (a conversation switch) and freed states each match one
# rank, a state past the worker's 16 is refused by name; after the worker restarts, a state it lost
# is refused by name while the others go on.
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/lib.sh"
G=$GLMCHAT_BIN
SESSIONS="$GLMCHAT_BUILDDIR/tests/tp/tp_sessions"
A="$GLMCHAT_SHARED/fixtures/tiny-A"
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/tp_lib.sh"

[ -d "$A" ] || { fail "fixture $A is missing"; finish; }
start_worker "$A"
# the restart tp_sessions asks for midway: the worker killed, another on the same port
cat >"$TMP/restart.sh" <<EOF
#!/bin/bash
kill -9 \$(cat "$TMP/worker.pid"); rm -f "$TMP/worker.port"
"$G" worker --listen 127.0.0.1:$PORT --port-file "$TMP/worker.port" --model "$A" --threads 1 \\
    2>"$TMP/worker2.err" </dev/null >/dev/null &
echo \$! >"$TMP/worker.pid"
for _ in \$(seq 2400); do [ -s "$TMP/worker.port" ] && exit 0; sleep 0.05; done
exit 1
EOF
chmod +x "$TMP/restart.sh"
echo $worker >"$TMP/worker.pid"
expect_exit 0 timeout 180 "$SESSIONS" "$A" 127.0.0.1:$PORT "$TMP/restart.sh"
cat "$TMP/out"
expect_grep out '^PASS: conversation A at 16 tokens'
expect_grep out '^PASS: conversation B at 8 tokens'
expect_grep out '^PASS: conversation C \(A.s slot\) at 4 tokens'
expect_grep out '^PASS: conversation B at 9 tokens'
expect_grep out '^PASS: states past 16 refused after 14 more: a two-rank engine keeps at most 16'
expect_grep out '^PASS: the worker restarted'
expect_grep out '^PASS: conversation C \(A.s slot\) at 5 tokens'
expect_grep out '^PASS: a state built before the restart is refused: the worker at 127.0.0.1:[0-9]+ was reconnected'
expect_grep out '^PASS: conversation B at 4 tokens'
expect_grep out '^PASS: 0 failures'
worker=$(cat "$TMP/worker.pid")
kill -0 $worker 2>/dev/null && pass || fail "the restarted worker died: $(cat "$TMP/worker2.err")"
kill -TERM $worker
for _ in $(seq 100); do kill -0 $worker 2>/dev/null || break; sleep 0.05; done
cp "$TMP/worker2.err" "$TMP/w2.err"
expect_grep w2.err 'serving the head at'
if grep -q 'disagree' "$TMP/w2.err"; then fail "the restarted worker saw the ranks disagree: $(cat "$TMP/w2.err")"; else pass; fi

finish
