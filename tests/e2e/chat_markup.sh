#!/bin/bash
# chat_markup.sh: the model's markup never reaches the user: recorded raw replies (through the reply
# stream parser) with a stray </think> while thinking is off, and a <tool_call> while tools are off;
# jsonl tool_call_delta events carry the arguments' JSON, adding up to the call's "arguments".
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
G=$GLMCHAT_BIN
WS="$TMP/ws"
mkdir -p "$WS"
echo "the notes" >"$WS/notes.txt"
cat >"$XDG_CONFIG_HOME/glmchat/config" <<C
workspace = $WS
C

cat >"$CHAT_REPLIES" <<'R'
# 1: thinking off, the model still closes a think block
{"type":"raw","text":"</thi"}
{"type":"raw","text":"nk>\n\nHello there."}
{"type":"end","why":"token"}
# 2: tools off, the model still calls one
{"type":"raw","text":"Let me read it.\n<tool_call>read_file\n<arg_key>pa"}
{"type":"raw","text":"th</arg_key><arg_value>notes.txt</arg_value>\n</tool_call>"}
{"type":"end","why":"token"}
# 3: tools on, jsonl: the call's arguments stream as JSON
{"type":"raw","text":"Reading.\n<tool_call>read_file\n<arg_key>path</arg_key><arg_value>notes.txt</arg_"}
{"type":"raw","text":"value>\n<arg_key>max_bytes</arg_key><arg_value>100</arg_value>\n</tool_call>"}
{"type":"end","why":"token"}
{"type":"content","text":"It says: the notes"}
{"type":"done","finish":"stop"}
R

expect_exit 0 "$G" chat --think off --prompt "hi"
expect_same out $'Hello there.\n'

expect_exit 0 "$G" chat --think off --prompt "read my notes"
expect_same out $'Let me read it.\n[the model asked for tool read_file, but tools are off]\n'
expect_grep err '^glmchat: the model asked for a tool, but none is offered here: --allow-tools offers them'
if grep -q '<tool_call>\|<arg_key>\|</think>' "$TMP/out" "$TMP/err"; then fail "markup shown: $(cat "$TMP/out")"; else pass; fi

expect_exit 0 "$G" chat --think off --allow-tools --output-format jsonl --prompt "read my notes again"
cp "$TMP/out" "$TMP/events.jsonl"
check_py "tool call deltas add up to the arguments" '
import json, os
deltas, calls = {}, []
for raw in open(os.environ["TMP"] + "/events.jsonl"):
    e = json.loads(raw)
    if e["type"] == "tool_call_delta":
        deltas[e["id"]] = deltas.get(e["id"], "") + e["text"]
    elif e["type"] == "tool_call":
        text = raw.rstrip("\n")
        calls.append((e, text[text.index("\"arguments\":") + len("\"arguments\":"):-1]))
if len(calls) != 1: print("FAIL: calls", calls)
for e, args_text in calls:
    d = deltas.get(e["id"], "")
    if "<arg_" in d or d != args_text: print("FAIL: deltas %r, arguments %r" % (d, args_text))
    if json.loads(d) != {"path": "notes.txt", "max_bytes": 100}: print("FAIL: arguments", d)
'
expect_grep out '"type":"tool_result".*"text":"the notes'
expect_grep out '"type":"content","text":"It says: the notes"'

finish
