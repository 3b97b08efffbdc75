#!/bin/bash
# chat_approval.sh: risky tools are approved by policy, never by whether stderr is a terminal:
# with no terminal to ask they are refused (the model reads why) unless --allow-tool names them;
# the jsonl tool_result says how each was decided; always_allow and approval = auto/deny hold.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
G=$GLMCHAT_BIN
WS="$TMP/ws"
mkdir -p "$WS"
CONFIG="$XDG_CONFIG_HOME/glmchat/config"

# replies_touch: one reply that runs `touch ran` through run_command, then an answer.
replies_touch() {
    rm -f "$CHAT_REPLIES.next" "$WS/ran"
    cat >"$CHAT_REPLIES" <<'R'
{"type":"tool_call","name":"run_command","arguments":{"command":"touch ran"}}
{"type":"done","finish":"tool_calls"}
{"type":"content","text":"Done."}
{"type":"done","finish":"stop"}
R
}

# chat_detached ARGS...: glmchat chat with no controlling terminal (setsid) and stderr in a
# file, as in a script or `2>log`; stdout to $TMP/out, stderr to $TMP/err.
chat_detached() {
    setsid -w "$G" chat "$@" </dev/null >"$TMP/out" 2>"$TMP/err"
}

# The README's own example with 2>file and an explicit `approval = ask`: refused, and said.
printf 'workspace = %s\napproval = ask\n' "$WS" >"$CONFIG"
replies_touch
chat_detached --allow-tools --prompt "make the file"
rc=$?
if [ "$rc" -eq 0 ]; then pass; else fail "exit $rc: $(cat "$TMP/err")"; fi
if [ -e "$WS/ran" ]; then fail "run_command ran unasked with stderr in a file"; else pass; fi
expect_grep err '^glmchat: run_command was refused: it needs approval and there is no terminal to ask \(allow it with --allow-tool run_command\)$'
expect_grep err '^\[tool error\] run_command: error: run_command needs the user.s approval and there is no terminal to ask'

# The same in jsonl: the refusal is the tool's result, and its approval field says why.
replies_touch
chat_detached --allow-tools --prompt "make the file" --output-format jsonl
if [ -e "$WS/ran" ]; then fail "run_command ran unasked (jsonl)"; else pass; fi
expect_grep out '"type":"tool_result","id":"[^"]*","name":"run_command","is_error":true,"approval":"no_terminal","text":"error: run_command needs'

# No config at all (approval defaults to ask): refused too.
rm -f "$CONFIG"
replies_touch
(cd "$WS" && chat_detached --allow-tools --prompt "make the file" --output-format jsonl)
if [ -e "$WS/ran" ]; then fail "run_command ran unasked with the default approval"; else pass; fi
expect_grep out '"approval":"no_terminal"'

# --allow-tool NAME runs it, and says so; --approve is the same flag.
printf 'workspace = %s\n' "$WS" >"$CONFIG"
replies_touch
chat_detached --allow-tool run_command --prompt "make the file"
if [ -e "$WS/ran" ]; then pass; else fail "--allow-tool run_command did not run it: $(cat "$TMP/err")"; fi
expect_grep err '^glmchat: run_command ran without asking: allowed by --allow-tool$'
replies_touch
chat_detached --approve write_file,run_command --prompt "make the file" --output-format jsonl
if [ -e "$WS/ran" ]; then pass; else fail "--approve run_command did not run it"; fi
expect_grep out '"name":"run_command","is_error":false,"approval":"flag"'
# --allow-tool naming another tool does not allow this one.
replies_touch
chat_detached --allow-tool write_file --prompt "make the file" --output-format jsonl
if [ -e "$WS/ran" ]; then fail "--allow-tool write_file let run_command run"; else pass; fi
expect_grep out '"approval":"no_terminal"'
# A name that is no tool is a usage error naming it.
chat_detached --allow-tool run_comand --prompt "x"
if [ $? -eq 2 ]; then pass; else fail "--allow-tool run_comand was accepted"; fi
expect_grep err "--allow-tool names 'run_comand', which is not a tool here"

# The config file's policy: always_allow, approval = auto, approval = deny.
printf 'workspace = %s\nalways_allow = run_command\n' "$WS" >"$CONFIG"
replies_touch
chat_detached --allow-tools --prompt "make the file" --output-format jsonl
if [ -e "$WS/ran" ]; then pass; else fail "always_allow = run_command did not run it"; fi
expect_grep out '"approval":"always"'
printf 'workspace = %s\napproval = auto\n' "$WS" >"$CONFIG"
replies_touch
chat_detached --allow-tools --prompt "make the file" --output-format jsonl
if [ -e "$WS/ran" ]; then pass; else fail "approval = auto did not run it"; fi
expect_grep out '"approval":"auto"'
printf 'workspace = %s\napproval = deny\n' "$WS" >"$CONFIG"
replies_touch
chat_detached --allow-tool run_command --prompt "make the file" --output-format jsonl
if [ -e "$WS/ran" ]; then fail "approval = deny let run_command run"; else pass; fi
expect_grep out '"approval":"denied","text":"error: run_command is refused by the configuration'
# A safe tool needs no approval.
rm -f "$CHAT_REPLIES.next"
echo hello >"$WS/notes.txt"
cat >"$CHAT_REPLIES" <<'R'
{"type":"tool_call","name":"read_file","arguments":{"path":"notes.txt"}}
{"type":"done","finish":"tool_calls"}
{"type":"content","text":"Read."}
{"type":"done","finish":"stop"}
R
chat_detached --allow-tools --prompt "read it" --output-format jsonl
expect_grep out '"name":"read_file","is_error":false,"approval":"not_needed","text":"hello'
finish
