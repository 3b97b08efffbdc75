#!/bin/bash
# tp_late_worker.sh: a real worker made late (a throttle stops and continues its process, 2 s
# stopped for each 20 ms run, so its heartbeats still come but its share of a step crawls): the
# head's scripted jsonl chat says "waiting" for it and, once the worker runs freely again, ends
# with one rank's reply; the TUI's status line says what it waits for with a clock that moves,
# and back to work after; a reply canceled while waiting ends at once and the next one works.
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/lib.sh"
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/chat_lib.sh"
unset GLMCHAT_TEST_REPLIES GLMCHAT_TEST_REQUESTS
G=$GLMCHAT_BIN
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/tp_lib.sh"

M="$TMP/model"
expect_exit 0 "$G" mkmodel --out "$M" --preset small --seed 11
mkdir -p "$XDG_CONFIG_HOME/glmchat"
printf 'temperature = 0\nmax_tokens = 6\nthink = off\nthreads = 1\n' >"$XDG_CONFIG_HOME/glmchat/config"
# ~1,500 tokens: a step's share takes the worker ~50 ms, over 5 s (the exchange timeout) throttled
PROMPT=$(python3 -c '
import random
random.seed(2)
w = "alpha beta gamma delta river stone cloud maple north quiet".split()
print(" ".join(random.choice(w) for _ in range(280)))')

# throttle PID: stops and continues PID until unthrottle (sets throttler).
throttle() {
    local pid=$1
    (while kill -STOP "$pid" 2>/dev/null; do sleep 2; kill -CONT "$pid" 2>/dev/null; sleep 0.02; done) &
    throttler=$!
}
unthrottle() {
    kill "$throttler" 2>/dev/null
    wait "$throttler" 2>/dev/null
    kill -CONT "$worker" 2>/dev/null
}

# One rank's reply, the reference.
expect_exit 0 "$G" chat --model "$M" --no-save --output-format jsonl --prompt "$PROMPT"
cp "$TMP/out" "$TMP/one.jsonl"

# ---- scripted: a "waiting" line, then the same reply as one rank's ----
start_worker "$M"
"$G" --peer 127.0.0.1:$PORT chat --model "$M" --no-save --output-format jsonl --prompt "$PROMPT" \
    >"$TMP/two.jsonl" 2>"$TMP/two.err" &
head=$!
# throttled once connected (a handshake's round trips across the stops could outlast its deadline)
for _ in $(seq 600); do grep -q 'serving the head at' "$TMP/worker.err" && break; sleep 0.01; done
throttle $worker
for _ in $(seq 600); do grep -q '"type":"waiting"' "$TMP/two.jsonl" 2>/dev/null && break; sleep 0.1; done
unthrottle
for _ in $(seq 600); do kill -0 $head 2>/dev/null || break; sleep 0.1; done
wait $head
rc=$?
[ $rc = 0 ] && pass || fail "the head's chat exited $rc: $(cat "$TMP/two.err")"
stop_worker
expect_grep two.err "the worker at 127.0.0.1:$PORT is [0-9.]+ s late to exchange [0-9]+ and still working toward it"
expect_grep two.err "the worker at 127.0.0.1:$PORT came to exchange [0-9]+ after [0-9.]+ s"
export PORT
check_py "a late worker: waiting said, then one rank's reply" '
import json, os
tmp = os.environ["TMP"]; port = os.environ["PORT"]
def lines(n): return [json.loads(l) for l in open(tmp + "/" + n)]
one, two = lines("one.jsonl"), lines("two.jsonl")
types = [e["type"] for e in two]
w = [e for e in two if e["type"] in ("waiting", "waited")]
if not w: print("FAIL: no waiting line: %s" % types)
for e in w:
    if e["for"] != "the worker at 127.0.0.1:" + port: print("FAIL: %s for %r" % (e["type"], e["for"]))
    if not 4.9 <= e["waited_s"] < 120: print("FAIL: %s waited_s %r" % (e["type"], e["waited_s"]))
# each wait ends: waiting, waited, waiting, waited ..., a waited no sooner than its waiting
if [e["type"] for e in w] != ["waiting", "waited"] * (len(w) // 2) or len(w) % 2:
    print("FAIL: waits %s" % [e["type"] for e in w])
for a, b in zip(w[0::2], w[1::2]):
    if b["waited_s"] < a["waited_s"]: print("FAIL: waited %r after waiting %r" % (b, a))
if w and not types.index("assistant") < types.index("waiting") < types.index("done"):
    print("FAIL: waiting outside the reply: %s" % types)
def reply(ls): return [(e["type"], e.get("text"), e.get("name")) for e in ls if e["type"] in
                      ("reasoning", "content", "tool_call_begin", "tool_call_delta", "tool_call")]
if not reply(one) or reply(one) != reply(two): print("FAIL: one rank %r, two %r" % (reply(one), reply(two)))
if [e["finish"] for e in two if e["type"] == "done"] != ["length"]: print("FAIL: finishes %s" % types)
'

# ---- the TUI: the status line waits with a clock, then the reply; Esc while waiting ----
command -v tmux >/dev/null 2>&1 || { echo "tp_late_worker: tmux not installed: the TUI is NOT checked"; finish; }
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/tui_lib.sh"
trap 'kill -9 $(jobs -p) 2>/dev/null; tmx kill-server 2>/dev/null; rm -rf "$TMP"' EXIT
DB="$TMP/tui.db"
start_worker "$M"
tui_start
type_text "env XDG_DATA_HOME='$XDG_DATA_HOME' XDG_CONFIG_HOME='$XDG_CONFIG_HOME' '$G' --db '$DB' --model '$M' --peer 127.0.0.1:$PORT"
keys Enter
expect_screen 'ready' 30 "the TUI is up over the worker"
throttle $worker
type_text "$PROMPT"
keys Enter
WAITING="waiting ([0-9]+) s for the worker at 127\.0\.0\.1:$PORT"
if wait_for "$WAITING" 60; then
    pass
    s1=$(screen | grep -Eo "$WAITING" | grep -Eo 'waiting [0-9]+' | grep -Eo '[0-9]+')
    sleep 2.2
    s2=$(screen | grep -Eo "$WAITING" | grep -Eo 'waiting [0-9]+' | grep -Eo '[0-9]+')
    [ -n "$s2" ] && [ "$s1" -ge 5 ] && [ "$s2" -ge $((s1 + 1)) ] && pass ||
        fail "the wait's clock: '$s1' then '$s2' 2.2 s later; screen:"$'\n'"$(screen)"
else
    fail "the status line never said it waits for the worker; screen:"$'\n'"$(screen)"
fi
unthrottle
expect_screen 'tokens · [0-9.]+' 60 "the reply ends once the worker runs freely"
expect_no_screen 'waiting for' "the wait is over"
# Esc while the worker is late: canceled at once, not at the wait's end
throttle $worker
type_text "Again: $PROMPT"
keys Enter
if wait_for "$WAITING" 60; then
    t0=$(now_ms)
    keys Escape
    expect_screen 'canceled' 5 "Esc ends a reply that waits for a late worker"
    t1=$(now_ms)
    [ $((t1 - t0)) -lt 4000 ] && pass || fail "the cancel took $((t1 - t0)) ms"
    expect_no_screen 'given up|stopped by an error' "a reply canceled while waiting is no error"
else
    fail "the second reply never waited for the worker; screen:"$'\n'"$(screen)"
fi
unthrottle
type_text "One more."
keys Enter
expect_screen 'One more\.' 10 "the next message is shown"
for _ in $(seq 600); do
    "$G" --db "$DB" export 1 --format json -o "$TMP/tui.json" 2>/dev/null &&
        python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["messages"]
sys.exit(0 if len(m) == 6 and m[-1]["status"] != "streaming" else 1)' "$TMP/tui.json" && break
    sleep 0.1
done
check_py "the TUI's replies: waited and done, canceled while waiting, then done over the worker" '
import json, os
m = json.load(open(os.environ["TMP"] + "/tui.json"))["messages"]
got = [(x["role"], x["status"], bool("".join(p.get("text", "") for p in x["parts"]))) for x in m]
want = [("user", "complete", True), ("assistant", "complete", True), ("user", "complete", True),
        ("assistant", "canceled", False), ("user", "complete", True), ("assistant", "complete", True)]
if got != want: print("FAIL: %s" % got)
'
keys C-d
expect_screen 'PROMPT\$ *$' 10 "Ctrl-D leaves the TUI"
stop_worker
finish
