#!/bin/bash
# chat_signals.sh: SIGTERM and SIGHUP in the middle of a reply end it as Ctrl-C does (the text
# kept, marked canceled; exit 128 + the signal); a reply a SIGKILL left `streaming` is marked
# interrupted when the conversation is opened again, and the next turn alternates cleanly.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
G=$GLMCHAT_BIN

replies() {
    rm -f "$CHAT_REPLIES.next"
    {
        echo '{"type":"reasoning","text":"counting"}'
        for i in $(seq 1 60); do echo "{\"type\":\"content\",\"text\":\"w$i \"}"; done
        echo '{"type":"done","finish":"stop"}'
        echo '{"type":"content","text":"After the interruption."}'
        echo '{"type":"done","finish":"stop"}'
    } >"$CHAT_REPLIES"
}

# stop_mid_reply SIGNAL ARGS...: starts a chat, sends SIGNAL once w3 is out; $rc its status.
stop_mid_reply() {
    local sig=$1; shift
    GLMCHAT_TEST_REPLY_DELAY_MS=50 "$G" chat "$@" >"$TMP/out" 2>"$TMP/err" </dev/null &
    local pid=$!
    for _ in $(seq 1 100); do grep -q 'w3 ' "$TMP/out" 2>/dev/null && break; sleep 0.05; done
    kill -"$sig" "$pid"
    wait "$pid"
    rc=$?
}

# check_canceled CONV: its first reply is canceled with the text stdout showed.
check_canceled() {
    cp "$TMP/out" "$TMP/partial"
    expect_exit 0 "$G" export "$1" --format json -o "$TMP/conv.json"
    check_py "the reply a signal stopped, conversation $1" '
import json, os
tmp = os.environ["TMP"]
m = json.load(open(tmp + "/conv.json"))["messages"]
a = m[1]
if a["status"] != "canceled" or a["finish_reason"] != "canceled": print("FAIL: status", a["status"], a["finish_reason"])
texts = [p["text"] for p in a["parts"] if p["kind"] == "text"]
saved = texts[0] if texts else ""
shown = open(tmp + "/partial").read()
if not saved.startswith("w1 w2 w3 ") or "w60" in saved: print("FAIL: saved %r" % saved)
if shown.rstrip("\n") != saved: print("FAIL: stdout %r differs from the saved %r" % (shown, saved))
'
}

replies
stop_mid_reply TERM --prompt "count"
if [ "$rc" -eq 143 ]; then pass; else fail "exit status $rc after SIGTERM, expected 143"; fi
expect_grep err '^glmchat: stopped by SIGTERM; the partial reply is saved as message 2 of conversation 1$'
check_canceled 1
expect_exit 0 "$G" chat -c --prompt "go on"
expect_same out $'After the interruption.\n'

replies
stop_mid_reply HUP --prompt "count again"
if [ "$rc" -eq 129 ]; then pass; else fail "exit status $rc after SIGHUP, expected 129"; fi
expect_grep err '^glmchat: stopped by SIGHUP; the partial reply is saved'
check_canceled 2

# SIGKILL leaves the reply streaming; opening the conversation again ends it as interrupted,
# and the next turn is user, assistant, user (not two user messages in a row).
replies
stop_mid_reply KILL --prompt "count once more"
if [ "$rc" -eq 137 ]; then pass; else fail "exit status $rc after SIGKILL"; fi
expect_exit 0 "$G" export 3 --format json -o "$TMP/conv.json"
check_py "SIGKILL leaves it streaming" '
import json, os
m = json.load(open(os.environ["TMP"] + "/conv.json"))["messages"]
if m[1]["status"] != "streaming": print("FAIL: status", m[1]["status"])
'
: >"$CHAT_REQUESTS"
rm -f "$CHAT_REPLIES.next" # the killed run never recorded where its reply ended
printf '%s\n' '{"type":"content","text":"After the interruption."}' '{"type":"done","finish":"stop"}' >"$CHAT_REPLIES"
expect_exit 0 "$G" chat -c --prompt "go on"
expect_same out $'After the interruption.\n'
expect_exit 0 "$G" export 3 --format json -o "$TMP/conv.json"
check_py "the interrupted reply and the next turn" '
import json, os
tmp = os.environ["TMP"]
m = json.load(open(tmp + "/conv.json"))["messages"]
if [x["role"] for x in m] != ["user", "assistant", "user", "assistant"]: print("FAIL: roles", [x["role"] for x in m])
if m[1]["status"] != "canceled" or m[1]["finish_reason"] != "interrupted": print("FAIL: status", m[1]["status"], m[1]["finish_reason"])
if m[3]["status"] != "complete": print("FAIL: the new reply", m[3]["status"])
reqs = [json.loads(l) for l in open(tmp + "/requests.jsonl")]
roles = [x["role"] for x in reqs[-1]["messages"]]
if roles != ["user", "assistant", "user"]: print("FAIL: the request after the kill alternates badly:", roles)
'
finish
