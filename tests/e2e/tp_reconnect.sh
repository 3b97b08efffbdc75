#!/bin/bash
# tp_reconnect.sh: a head that outlives its worker. Scripted: the worker is killed between turns
# and restarted; the same head's next turn reconnects (the prompt is prefilled again) and replies as
# one rank does. Interactive (tmux): the worker dies mid-reply; the TUI says the next message
# reconnects; after a restart it does, and every message is kept.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tui_lib.sh"
. "$(dirname "$0")/chat_lib.sh"
unset GLMCHAT_TEST_REPLIES GLMCHAT_TEST_REQUESTS
G=$GLMCHAT_BIN
trap 'kill -9 $(jobs -p) 2>/dev/null; tmx kill-server 2>/dev/null; rm -rf "$TMP"' EXIT

. "$(dirname "$0")/tp_lib.sh"
# wait_line FILE REGEX N: until FILE has N lines matching REGEX (10 s).
wait_line() {
    for _ in $(seq 200); do [ "$(grep -Ec "$2" "$1")" -ge "$3" ] && return 0; sleep 0.05; done
    return 1
}

M="$TMP/model"
expect_exit 0 "$G" mkmodel --out "$M" --preset tiny --seed 11
printf 'temperature = 0\n' >"$XDG_CONFIG_HOME/glmchat/config"
printf 'Tell me a story.\nTell me more about it.\n' >"$TMP/turns"
"$G" --db "$TMP/one.db" --model "$M" chat --lines --output-format jsonl --max-tokens 30 --think off <"$TMP/turns" \
    >"$TMP/one.jsonl" 2>"$TMP/err"
[ $? -eq 0 ] && pass || fail "two turns on one rank failed: $(cat "$TMP/err")"

# 1. Killed between turns, restarted on the same port: the next turn goes on.
start_worker "$M"
mkfifo "$TMP/feed"
"$G" --db "$TMP/two.db" --model "$M" --peer 127.0.0.1:$PORT chat --lines --output-format jsonl --max-tokens 30 \
    --think off <"$TMP/feed" >"$TMP/two.jsonl" 2>"$TMP/two.err" &
head_pid=$!
exec 7>"$TMP/feed"
echo "Tell me a story." >&7
wait_line "$TMP/two.jsonl" '"turn_end"' 1 || fail "the first two-rank turn did not end: $(cat "$TMP/two.err")"
kill -9 $worker
wait $worker 2>/dev/null
WORKER_LISTEN=127.0.0.1:$PORT start_worker "$M"
echo "Tell me more about it." >&7
exec 7>&-
wait $head_pid
rc=$?
[ $rc -eq 0 ] && pass || fail "the head exited $rc after its worker restarted between turns: $(cat "$TMP/two.err")"
expect_grep worker.err 'serving the head at'
check_py "the turn after a restart replies as one rank does" '
import json, os
tmp = os.environ["TMP"]
def turns(name):
    out, cur = [], ""
    for line in open(tmp + "/" + name):
        e = json.loads(line)
        if e["type"] == "error": print("FAIL: %s: %s" % (name, e))
        if e["type"] == "content": cur += e["text"]
        if e["type"] == "turn_end": out.append(cur); cur = ""
    return out
a, b = turns("one.jsonl"), turns("two.jsonl")
if len(a) != 2 or not a[1]: print("FAIL: one rank gave", a)
if a != b: print("FAIL: %r != %r" % (a, b))
'
kill -TERM $worker 2>/dev/null
wait $worker 2>/dev/null

# 2. The TUI: the worker dies during a reply, comes back, and the next message reconnects.
start_worker "$M"
tui_start
type_text "env XDG_DATA_HOME='$XDG_DATA_HOME' XDG_CONFIG_HOME='$XDG_CONFIG_HOME' '$G' --db '$TMP/tui.db' --model '$M' --peer 127.0.0.1:$PORT"
keys Enter
expect_screen 'ready' 15 "the head is up"
kill -STOP $worker       # the reply cannot end before the worker is gone
type_text "Tell me a story."; keys Enter
sleep 0.5
kill -9 $worker
wait $worker 2>/dev/null
expect_screen 'the next message' 10 "the TUI says how to go on (the next message reconnects)"
WORKER_LISTEN=127.0.0.1:$PORT start_worker "$M"
type_text "Tell me more about it."; keys Enter
ok=0
for _ in $(seq 300); do
    "$G" --db "$TMP/tui.db" export 1 --format json -o "$TMP/tui.json" 2>/dev/null &&
        python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["messages"]
sys.exit(0 if len(m) == 4 and m[3]["status"] == "complete" else 1)' "$TMP/tui.json" && { ok=1; break; }
    sleep 0.05
done
[ $ok -eq 1 ] && pass || { fail "the reply after the restart never completed; screen:"; screen | sed 's/^/    |/' >&2; }
keys C-d
expect_screen 'PROMPT\$ *$' 5 "Ctrl-D leaves the TUI"
expect_grep worker.err 'serving the head at'
check_py "every message of the interrupted conversation is kept" '
import json, os
m = json.load(open(os.environ["TMP"] + "/tui.json"))["messages"]
roles = [x["role"] for x in m]
if roles != ["user", "assistant", "user", "assistant"]: print("FAIL: roles", roles)
elif m[0]["parts"][0]["text"] != "Tell me a story." or m[2]["parts"][0]["text"] != "Tell me more about it.": print("FAIL: user texts", m)
elif m[1]["finish_reason"] != "error": print("FAIL: the interrupted reply finished", m[1]["finish_reason"])
elif not m[3]["parts"] or not m[3]["parts"][0].get("text"): print("FAIL: the reply after the restart is empty", m[3])
'
finish
