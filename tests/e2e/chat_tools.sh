#!/bin/bash
# chat_tools.sh: a tool round trip through the MCP test server configured in the config file,
# driven by a recorded model reply (raw GLM text through the reply stream parser); a built-in tool; tools only with --allow-tools; an MCP
# server that crashes at start or in the middle of a call is a clear message, never a crash.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
G=$GLMCHAT_BIN
SERVER="$GLMCHAT_BUILDDIR/tests/mcp/test_mcp_server"
WS="$TMP/ws"
mkdir -p "$WS"
echo "the notes" >"$WS/notes.txt"

cat >"$XDG_CONFIG_HOME/glmchat/config" <<C
workspace = $WS
[mcp.t]
command = $SERVER
env.GLMCHAT_E2E = from-config
trust = yes
[mcp.broken]
command = $SERVER --mode crash-on-start
C

cat >"$CHAT_REPLIES" <<'R'
{"type":"raw","text":"Add with the to"}
{"type":"raw","text":"ol.</thi"}
{"type":"raw","text":"nk>\n<tool_call>t__add<arg_key>a</arg_"}
{"type":"raw","text":"key><arg_value>2</arg_value><arg_key>b</arg_key><arg_value>40</arg_value></tool_call>"}
{"type":"end","why":"token"}
{"type":"tool_call","name":"read_file","arguments":{"path":"notes.txt"}}
{"type":"tool_call","name":"t__env","arguments":{"name":"GLMCHAT_E2E"}}
{"type":"done","finish":"tool_calls"}
{"type":"content","text":"The sum is 42."}
{"type":"done","finish":"stop"}
{"type":"tool_call","name":"t__crash","arguments":{}}
{"type":"done","finish":"tool_calls"}
{"type":"content","text":"The tool server died."}
{"type":"done","finish":"stop"}
{"type":"tool_call","name":"t__add","arguments":{"a":1,"b":1}}
{"type":"done","finish":"tool_calls"}
{"type":"content","text":"No tools here."}
{"type":"done","finish":"stop"}
R

expect_exit 0 "$G" chat --allow-tools --prompt "what is 2+40?"
expect_same out $'The sum is 42.\n'
expect_grep err "^glmchat: the MCP server 'broken' exited with status 3; its last words: .*simulated crash on start.*; its tools are not offered"
expect_grep err '^\[tool call\] t__add \{"a":2,"b":40\}$'
expect_grep err '^\[tool result\] t__add: 42$'
expect_grep err '^\[tool result\] read_file: the notes$'
expect_grep err '^\[tool result\] t__env: from-config$'
if [ -s "$XDG_STATE_HOME/glmchat/mcp-t.log" ]; then pass; else fail "no log of the MCP server's stderr"; fi

expect_exit 0 "$G" export 1 --format json -o "$TMP/conv.json"
check_py "tool round trip in storage" '
import json, os
m = json.load(open(os.environ["TMP"] + "/conv.json"))["messages"]
roles = [x["role"] for x in m]
if roles != ["user", "assistant", "tool", "assistant", "tool", "tool", "assistant"]: print("FAIL: roles", roles)
call = m[1]["parts"][1]
if call["kind"] != "tool_call" or call["name"] != "t__add" or json.loads(call["arguments"]) != {"a": 2, "b": 40}:
    print("FAIL: call", call)
if m[1]["finish_reason"] != "tool_calls": print("FAIL: finish", m[1]["finish_reason"])
if m[1]["parts"][0] != {**m[1]["parts"][0], "kind": "reasoning", "text": "Add with the tool."}: print("FAIL: reasoning", m[1]["parts"][0])
res = m[2]["parts"][0]
if res["kind"] != "tool_result" or res["text"] != "42" or res["call_id"] != call["call_id"] or res["is_error"]:
    print("FAIL: result", res)
if m[4]["parts"][0]["text"] != "the notes\n": print("FAIL: read_file", m[4]["parts"][0])
if m[5]["parts"][0]["call_id"] != m[3]["parts"][1]["call_id"]: print("FAIL: second call id")
if m[6]["parts"][0]["text"] != "The sum is 42.": print("FAIL: answer", m[6]["parts"])
'
check_py "the results are sent back" '
import json, os
reqs = [json.loads(l) for l in open(os.environ["TMP"] + "/requests.jsonl")]
if len(reqs) != 3: print("FAIL: %d requests" % len(reqs))
last = reqs[2]["messages"]
if last[2] != {"role": "tool", "content": "42", "tool_call_id": last[1]["tool_calls"][0]["id"]}: print("FAIL:", last[2])
if last[1].get("reasoning") != "Add with the tool.": print("FAIL: reasoning", last[1])
names = reqs[0]["tools"]
for n in ["read_file", "run_command", "t__echo", "t__add", "t__crash"]:
    if n not in names: print("FAIL: %s not offered" % n)
if any(n.startswith("broken__") for n in names): print("FAIL: the broken server has tools")
'

# The server crashes in the middle of a call: an error result, and the turn goes on.
expect_exit 0 "$G" chat -c --allow-tools --prompt "crash it"
expect_same out $'The tool server died.\n'
expect_grep err "^\[tool error\] t__crash: error: the MCP server 't' exited with status 3; its last words: .*crashing on purpose"

# Without --allow-tools nothing is offered or run; the model is told so.
expect_exit 0 "$G" chat -c --prompt "add 1 and 1"
expect_same out $'No tools here.\n'
expect_grep err '^\[tool error\] t__add: error: no tools are offered in this chat'

finish
