#!/bin/bash
# tp_split.sh: the model split across two real processes over TCP loopback: rank 0's logits match
# one rank's within float32 rounding and equal the worker's bit for bit; a two-rank chat replies
# as one rank does; a worker killed or stopped mid-reply ends the reply with one clear error event,
# the turn kept.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
unset GLMCHAT_TEST_REPLIES GLMCHAT_TEST_REQUESTS
G=$GLMCHAT_BIN
A="$GLMCHAT_SRCDIR/tests/fixtures/models/tiny-A"
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT

. "$(dirname "$0")/tp_lib.sh"

[ -d "$A" ] || { fail "fixture $A is missing"; finish; }
check_two_rank_logits "$A" "two ranks' logits against one rank's"

# A longer greedy reply, one rank and two.
M="$TMP/model"
expect_exit 0 "$G" mkmodel --out "$M" --preset tiny --seed 11
# greedy replies: the user's config asks for temperature 0
mkdir -p "$XDG_CONFIG_HOME/glmchat"
printf 'temperature = 0\n' >"$XDG_CONFIG_HOME/glmchat/config"

expect_exit 0 "$G" --db "$TMP/one.db" --model "$M" chat --output-format jsonl --max-tokens 40 --think off --prompt "Tell me a story."
cp "$TMP/out" "$TMP/chat1.jsonl"
printf 'Go on.\nAnd then?\n' >"$TMP/turns"
"$G" --db "$TMP/one.db" --model "$M" chat -c --lines --output-format jsonl --max-tokens 20 <"$TMP/turns" >"$TMP/chat1b.jsonl" 2>"$TMP/err"
[ $? -eq 0 ] && pass || fail "a two-turn chat on one rank failed: $(cat "$TMP/err")"
start_worker "$M"
expect_exit 0 "$G" --db "$TMP/two.db" --model "$M" --peer 127.0.0.1:$PORT chat --output-format jsonl --max-tokens 40 --think off --prompt "Tell me a story."
cp "$TMP/out" "$TMP/chat2.jsonl"
"$G" --db "$TMP/two.db" --model "$M" --peer 127.0.0.1:$PORT chat -c --lines --output-format jsonl --max-tokens 20 \
    <"$TMP/turns" >"$TMP/chat2b.jsonl" 2>"$TMP/err"
[ $? -eq 0 ] && pass || fail "a two-turn chat on two ranks failed: $(cat "$TMP/err")"
stop_worker
check_py "a two-rank reply equals one rank's" '
import json, os
tmp = os.environ["TMP"]
def reply(name):
    ev = [json.loads(l) for l in open(tmp + "/" + name)]
    return "".join(e.get("text", "") for e in ev if e["type"] in ("content", "reasoning"))
for one, two in (("chat1", "chat2"), ("chat1b", "chat2b")):
    a, b = reply(one + ".jsonl"), reply(two + ".jsonl")
    if not a: print("FAIL: the one-rank reply %s is empty" % one)
    if a != b: print("FAIL: %s %r != %r" % (one, a, b))
'

# The worker dies mid-reply: a clear error, exit 1, the conversation stays in storage.
start_worker "$M"
"$G" --db "$TMP/kill.db" --model "$M" --peer 127.0.0.1:$PORT chat --output-format jsonl --max-tokens 100000 \
    --think off --prompt "Keep talking." >"$TMP/kill.out" 2>"$TMP/kill.err" &
head_pid=$!
for _ in $(seq 200); do grep -q '"content"' "$TMP/kill.out" && break; sleep 0.05; done
kill -9 $worker
for _ in $(seq 300); do kill -0 $head_pid 2>/dev/null || break; sleep 0.05; done
if kill -0 $head_pid 2>/dev/null; then fail "the head still runs 15 s after its worker died"; kill -9 $head_pid; fi
wait $head_pid
rc=$?
[ $rc -eq 1 ] && pass || fail "head exited $rc after its worker died, not 1: $(cat "$TMP/kill.err")"
cp "$TMP/kill.err" "$TMP/err"
expect_grep err 'the reply failed: (lost )?the worker at 127.0.0.1:[0-9]+'
expect_exit 0 "$G" --db "$TMP/kill.db" export 1 --format json -o "$TMP/kill.json"
check_py "the conversation survives its worker" '
import json, os
tmp = os.environ["TMP"]
ev = [json.loads(l) for l in open(tmp + "/kill.out")]
if not any(e["type"] == "content" for e in ev): print("FAIL: the worker died before the reply began")
if ev[-1].get("finish") != "error": print("FAIL: last event", ev[-1])
errors = [e for e in ev if e["type"] == "error"]
if len(errors) != 1: print("FAIL: %d error events, not one: %s" % (len(errors), errors))
m = json.load(open(tmp + "/kill.json"))["messages"]
if [x["role"] for x in m] != ["user", "assistant"] or m[0]["parts"][0]["text"] != "Keep talking.": print("FAIL: stored", m)
'

# A worker that hangs (stopped) mid-reply: the head gives up within its timeout (5 s).
start_worker "$M"
"$G" --db "$TMP/hang.db" --model "$M" --peer 127.0.0.1:$PORT chat --output-format jsonl --max-tokens 100000 \
    --think off --prompt "Keep talking." >"$TMP/hang.out" 2>"$TMP/hang.err" &
head_pid=$!
for _ in $(seq 200); do grep -q '"content"' "$TMP/hang.out" && break; sleep 0.05; done
kill -STOP $worker
for _ in $(seq 300); do kill -0 $head_pid 2>/dev/null || break; sleep 0.05; done
if kill -0 $head_pid 2>/dev/null; then fail "the head still runs 15 s after its worker hung"; kill -9 $head_pid; fi
wait $head_pid
rc=$?
kill -9 $worker
[ $rc -eq 1 ] && pass || fail "head exited $rc after its worker hung, not 1: $(cat "$TMP/hang.err")"
cp "$TMP/hang.err" "$TMP/err"
expect_grep err 'the reply failed: .*worker at 127.0.0.1:[0-9]+'
check_py "one error event when the worker hangs" '
import json, os
ev = [json.loads(l) for l in open(os.environ["TMP"] + "/hang.out")]
errors = [e for e in ev if e["type"] == "error"]
if len(errors) != 1 or ev[-1].get("finish") != "error": print("FAIL: %d error events, last %s" % (len(errors), ev[-1]))
'
finish
