#!/bin/bash
# tp_sessions.sh: one head keeps several conversation states over one worker (tests/tp/tp_sessions):
# interleaved, reset, cut back to a mark (a conversation switch) and freed states each match one
# rank, and a state past the worker's 16 is refused by name; the worker serves all of it.
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/lib.sh"
G=$GLMCHAT_BIN
SESSIONS="$GLMCHAT_BUILDDIR/tests/tp/tp_sessions"
A="$GLMCHAT_SHARED/fixtures/tiny-A"
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/tp_lib.sh"

[ -d "$A" ] || { fail "fixture $A is missing"; finish; }
start_worker "$A"
expect_exit 0 timeout 120 "$SESSIONS" "$A" 127.0.0.1:$PORT
cat "$TMP/out"
expect_grep out '^PASS: conversation A at 16 tokens'
expect_grep out '^PASS: conversation B at 8 tokens'
expect_grep out '^PASS: conversation C \(A.s slot\) at 4 tokens'
expect_grep out '^PASS: conversation B at 9 tokens'
expect_grep out '^PASS: states past 16 refused after 14 more: a two-rank engine keeps at most 16'
expect_grep out '^PASS: 0 failures'
kill -0 $worker 2>/dev/null && pass || fail "the worker died serving several states: $(cat "$TMP/worker.err")"
stop_worker

finish
