#!/bin/bash
# chat_tui.sh: the interactive chat in a real terminal (tmux): a turn, a tool call approved in
# the view and one refused (said so, not "failed"), the transcript saved, and -c reopening it; replies come through the test hook.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tui_lib.sh"
. "$(dirname "$0")/chat_lib.sh"
G=$GLMCHAT_BIN
mkdir -p "$TMP/ws"

cat >"$CHAT_REPLIES" <<'R'
{"type":"reasoning","text":"The user greets me."}
{"type":"content","text":"Hello from the recorded model."}
{"type":"done","finish":"stop","prompt_tokens":10,"generated_tokens":7,"ttft_s":0.1,"decode_tok_s":50}
{"type":"tool_call_begin","name":"run_command"}
{"type":"tool_call","name":"run_command","arguments":{"command":"echo tool-output-here"}}
{"type":"done","finish":"tool_calls"}
{"type":"content","text":"The command ran."}
{"type":"done","finish":"stop"}
{"type":"tool_call_begin","name":"run_command"}
{"type":"tool_call","name":"run_command","arguments":{"command":"echo second-call"}}
{"type":"done","finish":"tool_calls"}
{"type":"content","text":"Not run then."}
{"type":"done","finish":"stop"}
R

tui_start
type_text "cd '$TMP/ws' && env XDG_DATA_HOME='$XDG_DATA_HOME' XDG_CONFIG_HOME='$XDG_CONFIG_HOME' GLMCHAT_TEST_REPLIES='$CHAT_REPLIES' '$G'"
keys Enter
expect_screen 'recorded-replies .* ready' 5 "the status line names the reply source"
type_text "hello there"; keys Enter
expect_screen 'Hello from the recorded model\.' 5 "the reply is shown"
expect_screen 'thought for' 2 "the thinking folded"
type_text "run something"; keys Enter
expect_screen 'run_command wants to run:' 5 "the view asks before a risky tool"
expect_screen '^ +echo tool-output-here$' 2 "the command, plain"
keys y
expect_screen 'The command ran\.' 5 "the turn went on after the approval"
type_text "run another"; keys Enter
expect_screen '^ +echo second-call$' 5 "the second call asks"
keys n
expect_screen 'Not run then\.' 5 "the turn went on after the refusal"
expect_screen 'echo second-call"}  ✗ not run: you said no' 2 "a refused call says it never ran, not that it failed"
keys C-d
expect_screen 'PROMPT\$ *$' 5 "Ctrl-D leaves the TUI"

expect_exit 0 "$G" export 1 --format json -o "$TMP/conv.json"
check_py "the TUI's transcript in storage" '
import json, os
m = json.load(open(os.environ["TMP"] + "/conv.json"))["messages"]
roles = [x["role"] for x in m]
if roles != ["user", "assistant", "user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant"]:
    print("FAIL: roles", roles)
no = m[8]["parts"][0]
if not no["is_error"] or "did not allow" not in no["text"]: print("FAIL: the refused call %r" % no)
res = m[4]["parts"][0]
if res["text"] != "tool-output-here\n[exit status 0]" or res["is_error"]: print("FAIL: result %r" % res)
if m[2]["parts"][0]["text"] != "run something": print("FAIL: user", m[2]["parts"])
'

# -c reopens the conversation with its transcript.
type_text "env XDG_DATA_HOME='$XDG_DATA_HOME' XDG_CONFIG_HOME='$XDG_CONFIG_HOME' GLMCHAT_TEST_REPLIES='$CHAT_REPLIES' '$G' chat -c"
keys Enter
expect_screen 'Hello from the recorded model\.' 5 "the old reply is shown again"
expect_screen 'The command ran\.' 2 "the whole path is shown"
keys C-d
expect_screen 'PROMPT\$ *$' 5 "Ctrl-D leaves again"
finish
