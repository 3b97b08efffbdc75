#!/bin/bash
# chat_cancel.sh: SIGINT in the middle of a reply: the partial reply is kept in storage, marked
# canceled, and glmchat exits 130; the conversation goes on afterwards.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
G=$GLMCHAT_BIN

{
    echo '{"type":"reasoning","text":"counting"}'
    for i in $(seq 1 40); do echo "{\"type\":\"content\",\"text\":\"w$i \"}"; done
    echo '{"type":"done","finish":"stop"}'
    echo '{"type":"content","text":"After the interruption."}'
    echo '{"type":"done","finish":"stop"}'
} >"$CHAT_REPLIES"

GLMCHAT_TEST_REPLY_DELAY_MS=50 "$G" chat --prompt "count to forty" >"$TMP/out" 2>"$TMP/err" </dev/null &
pid=$!
for _ in $(seq 1 100); do grep -q 'w3 ' "$TMP/out" 2>/dev/null && break; sleep 0.05; done
kill -INT "$pid"
wait "$pid"
rc=$?
if [ "$rc" -eq 130 ]; then pass; else fail "exit status $rc after SIGINT, expected 130"; fi
expect_grep out '^w1 w2 w3 '
if grep -q 'w40' "$TMP/out"; then fail "the reply ran to its end despite SIGINT"; else pass; fi
expect_grep err '^glmchat: interrupted; the partial reply is saved as message 2 of conversation 1$'
cp "$TMP/out" "$TMP/partial"

expect_exit 0 "$G" export 1 --format json -o "$TMP/conv.json"
check_py "the canceled reply in storage" '
import json, os
tmp = os.environ["TMP"]
m = json.load(open(tmp + "/conv.json"))["messages"]
a = m[1]
if a["status"] != "canceled" or a["finish_reason"] != "canceled": print("FAIL: status", a["status"], a["finish_reason"])
kinds = [p["kind"] for p in a["parts"]]
if kinds != ["reasoning", "text"]: print("FAIL: parts", kinds)
shown = open(tmp + "/partial").read()
saved = a["parts"][1]["text"]
if not saved.startswith("w1 w2 w3 ") or "w40" in saved: print("FAIL: saved %r" % saved)
if shown.rstrip("\n") != saved: print("FAIL: stdout %r differs from the saved %r" % (shown, saved))
'

expect_exit 0 "$G" chat -c --prompt "go on"
expect_same out $'After the interruption.\n'
finish
