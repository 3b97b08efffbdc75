#!/bin/bash
# chat_input.sh: what a scripted chat reads and reports: stdin attached to --prompt, all of stdin
# as one prompt (--lines for one a line), -f files, sampling flags, --output-format json,
# --no-save without ids, one message numbering everywhere, and a quiet end on a closed pipe.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
G=$GLMCHAT_BIN
WS="$TMP/ws"
mkdir -p "$WS"
cd "$WS" || exit 1

# replies N: N plain recorded replies, "Reply 1." ... "Reply N."
replies() {
    : >"$CHAT_REPLIES"
    for i in $(seq "$1"); do
        printf '{"type":"content","text":"Reply %d."}\n{"type":"done","finish":"stop"}\n' "$i" >>"$CHAT_REPLIES"
    done
    : >"$CHAT_REQUESTS"
    rm -f "$CHAT_REPLIES.next"
}
# last_user: the last user message of the last request, as python prints it
last_user_py='
import json, os
reqs = [json.loads(l) for l in open(os.environ["TMP"] + "/requests.jsonl")]
user = [m for m in reqs[-1]["messages"] if m["role"] == "user"][-1]["content"]
'

# Piped stdin goes with --prompt as a labelled, fenced document.
replies 1
expect_exit_in 0 $'line one\nline two\n' "$G" chat --prompt "Summarize this."
expect_same out $'Reply 1.\n'
check_py "stdin attached to --prompt" "$last_user_py"'
want = "Summarize this.\n\nstdin:\n```\nline one\nline two\n```"
if user != want: print("FAIL: %r" % user)
if len(reqs) != 1: print("FAIL: %d requests" % len(reqs))
'
# a backtick fence inside is fenced by a longer one
replies 1
expect_exit_in 0 $'a\n````\nb' "$G" chat --prompt "Look."
check_py "longer fence" "$last_user_py"'
if user != "Look.\n\nstdin:\n`````\na\n````\nb\n`````": print("FAIL: %r" % user)
'

# Without --prompt, all of stdin is one prompt: a 300-line file is one turn.
replies 2
seq 300 >"$WS/numbers.txt"
expect_exit 0 "$G" chat --no-save --prompt x   # the first reply, so the file's is the second
"$G" chat <"$WS/numbers.txt" >"$TMP/out" 2>"$TMP/err"
if [ $? -eq 0 ]; then pass; else fail "chat <300 lines: $(cat "$TMP/err")"; fi
expect_same out $'Reply 2.\n'
check_py "300 lines, one turn" "$last_user_py"'
if len(reqs) != 2: print("FAIL: %d requests" % len(reqs))
if user != "\n".join(str(i) for i in range(1, 301)): print("FAIL: %r" % user[:80])
'
# --lines keeps one prompt a line
replies 2
expect_exit_in 0 $'first\nsecond\n' "$G" chat --lines --no-save
expect_same out $'Reply 1.\nReply 2.\n'
expect_exit 2 "$G" chat --lines --prompt x
expect_grep err "^glmchat chat: --lines reads every prompt from stdin"

# -f FILE: text files by name after the prompt; size cap, binary, outside the workspace.
replies 3
printf 'alpha\n' >"$WS/a.txt"
mkdir -p "$WS/sub" && printf 'beta' >"$WS/sub/b.md"
expect_exit 0 "$G" chat --no-save --prompt "Compare." -f a.txt --file "$WS/sub/b.md"
check_py "-f files" "$last_user_py"'
want = "Compare.\n\nfile a.txt:\n```\nalpha\n```\n\nfile sub/b.md:\n```\nbeta\n```"
if user != want: print("FAIL: %r" % user)
'
expect_exit_in 0 'What is in it?' "$G" chat --no-save -f a.txt
check_py "-f with the prompt on stdin" "$last_user_py"'
if user != "What is in it?\n\nfile a.txt:\n```\nalpha\n```": print("FAIL: %r" % user)
'
head -c 1048577 /dev/zero | tr '\0' x >"$WS/big.txt"
expect_exit 1 "$G" chat --no-save --prompt "Read." -f big.txt
expect_grep err "^glmchat: file big.txt holds more than 1048576 bytes, the most a document may be"
printf 'a\0b' >"$WS/bin.dat"
expect_exit 1 "$G" chat --no-save --prompt "Read." -f bin.dat
expect_grep err "^glmchat: file bin.dat holds a NUL byte: only text can be attached$"
printf 'secret\n' >"$TMP/outside.txt"
expect_exit 1 "$G" chat --no-save --prompt "Read." -f "$TMP/outside.txt"
expect_grep err "^glmchat: cannot attach $TMP/outside.txt: it is outside the workspace .*start glmchat in a folder that holds it, or set .workspace = DIR. in the config file"
expect_exit 1 "$G" chat --no-save --prompt "Read." -f missing.txt
expect_grep err "^glmchat: cannot attach missing.txt: "
expect_exit 2 "$G" chat --no-save -f a.txt
expect_grep err "^glmchat chat: -f attaches files to a prompt: give --prompt TEXT or pipe one on stdin$"
check_py "refused attachments sent nothing" '
import os
n = len(open(os.environ["TMP"] + "/requests.jsonl").read().splitlines())
if n != 2: print("FAIL: %d requests" % n)
'

# Sampling flags reach the request; bad values are usage errors naming the flag.
replies 1
expect_exit 0 "$G" chat --no-save --temperature 0.25 --top-p 0.5 --seed 42 --prompt hi
check_py "sampling flags" '
import json, os
r = json.loads(open(os.environ["TMP"] + "/requests.jsonl").readline())
if (r["temperature"], r["top_p"], r["seed"]) != (0.25, 0.5, 42): print("FAIL:", r)
'
expect_exit 2 "$G" chat --no-save --temperature hot --prompt hi
expect_grep err "--temperature"
expect_exit 2 "$G" chat --no-save --top-p 2 --prompt hi
expect_grep err "--top-p"

# --output-format json: one object when the turn ends.
cat >"$CHAT_REPLIES" <<'R'
{"type":"reasoning","text":"I should list."}
{"type":"tool_call_begin","id":"c1","name":"list_directory"}
{"type":"tool_call","id":"c1","name":"list_directory","arguments":{"path":"."}}
{"type":"done","finish":"tool_calls","prompt_tokens":20,"generated_tokens":7,"ttft_s":0.5}
{"type":"content","text":"Two files."}
{"type":"done","finish":"stop","prompt_tokens":40,"generated_tokens":3}
R
: >"$CHAT_REQUESTS"
rm -f "$CHAT_REPLIES.next"
expect_exit 0 "$G" chat --allow-tools --output-format json --prompt "What is here?"
check_py "json object" '
import json, os
lines = open(os.environ["TMP"] + "/out").read().splitlines()
if len(lines) != 1: print("FAIL: %d lines" % len(lines))
o = json.loads(lines[0])
if o["reply"] != "Two files." or o["reasoning"] != "I should list.": print("FAIL: text", o)
if o["finish"] != "stop" or o["error"] is not None: print("FAIL: finish", o)
c = o["tool_calls"]
if len(c) != 1 or c[0]["id"] != "c1" or c[0]["name"] != "list_directory" or c[0]["arguments"] != {"path": "."}: print("FAIL: calls", c)
if c and (c[0].get("result", {}).get("is_error") is not False or "a.txt" not in c[0]["result"]["text"]): print("FAIL: result", c)
u = o["usage"]
if (u["prompt_tokens"], u["generated_tokens"], u["steps"], u["ttft_s"]) != (40, 10, 2, 0.5): print("FAIL: usage", u)
if not isinstance(o["conversation"], int) or o["user_message"] != 1 or o["message"] != 4: print("FAIL: ids", o)
'
JSON_CONV=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["conversation"])' "$TMP/out")

# One message numbering: jsonl, json, search, --from and export agree (1..N in a conversation).
replies 2
expect_exit 0 "$G" chat -c --output-format jsonl --prompt "zebra question"
check_py "jsonl numbers" '
import json, os
ev = [json.loads(l) for l in open(os.environ["TMP"] + "/out")]
u = [e for e in ev if e["type"] == "user"][0]
a = [e for e in ev if e["type"] == "assistant"][0]
t = ev[-1]
if (u["message"], a["message"], t["message"]) != (5, 6, 6): print("FAIL: numbers", u, a, t)
'
expect_exit 0 "$G" search --json zebra
check_py "search numbers" '
import json, os
h = json.load(open(os.environ["TMP"] + "/out"))
if len(h) != 1 or h[0]["message"] != 5: print("FAIL: hits", h)
'
expect_exit 0 "$G" export "$JSON_CONV" --format json -o "$TMP/conv.json"
check_py "export numbers" '
import json, os
c = json.load(open(os.environ["TMP"] + "/conv.json"))
m = c["messages"][4]
if m["id"] != 5 or m["parts"][0]["text"] != "zebra question": print("FAIL: export", m["id"], m["parts"])
'
expect_exit 0 "$G" chat --conversation "$JSON_CONV" --from 4 --output-format jsonl --prompt "again"
check_py "--from takes the number" '
import json, os
reqs = [json.loads(l) for l in open(os.environ["TMP"] + "/requests.jsonl")]
if [m["role"] for m in reqs[-1]["messages"]] != ["user", "assistant", "tool", "assistant", "user"]: print("FAIL: --from", reqs[-1]["messages"])
'
expect_exit 1 "$G" chat --conversation "$JSON_CONV" --from 99 --prompt "again"
expect_grep err "^glmchat: conversation $JSON_CONV has no message 99"

# --no-save reports no ids.
replies 2
expect_exit 0 "$G" chat --no-save --output-format jsonl --prompt "hi"
check_py "no ids under --no-save (jsonl)" '
import json, os
ev = [json.loads(l) for l in open(os.environ["TMP"] + "/out")]
for e in ev:
    for k in ("conversation", "message"):
        if k in e and e[k] is not None: print("FAIL:", e)
'
expect_exit 0 "$G" chat --no-save --output-format json --prompt "hi"
check_py "no ids under --no-save (json)" '
import json, os
o = json.load(open(os.environ["TMP"] + "/out"))
if (o["conversation"], o["user_message"], o["message"]) != (None, None, None): print("FAIL:", o)
'

# A reader that goes away (`| head`): a quiet end as other commands have, the reply saved.
printf '{"type":"content","text":"first line\\n"}\n{"type":"content","text":"second line\\n"}\n{"type":"content","text":"third line\\n"}\n{"type":"done","finish":"stop"}\n' >"$CHAT_REPLIES"
: >"$CHAT_REQUESTS"
rm -f "$CHAT_REPLIES.next"
GLMCHAT_TEST_REPLY_DELAY_MS=200 "$G" chat --prompt "piped" 2>"$TMP/err" | head -n 1 >"$TMP/out"
expect_same out $'first line\n'
expect_empty err
expect_exit 0 "$G" search piped
expect_grep out "piped"

finish
