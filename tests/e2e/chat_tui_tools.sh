#!/bin/bash
# chat_tui_tools.sh: tools in the TUI under tmux: escapes in model text shown as ^[ (no OSC 52
# reaches the terminal's clipboard), the approval question shows the command plain and a diff
# for write_file, with the scopes once / this conversation / always; "always" is saved in the
# config file, shown by /tools and revoked by /tools ask NAME; /tools off stops offering tools.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tui_lib.sh"
. "$(dirname "$0")/chat_lib.sh"
G=$GLMCHAT_BIN
WS="$TMP/ws"
mkdir -p "$WS"
CONFIG="$XDG_CONFIG_HOME/glmchat/config"
printf '# my settings\nworkspace = %s\n\nthink = on\n' "$WS" >"$CONFIG"
printf 'line one\nline two\nline three\n' >"$WS/notes.txt"

cat >"$CHAT_REPLIES" <<'R'
{"type":"content","text":"evil \u001b]52;c;ZXZpbA==\u0007 title \u001b]0;pwned\u0007 done"}
{"type":"done","finish":"stop"}
{"type":"tool_call_begin","name":"run_command"}
{"type":"tool_call","name":"run_command","arguments":{"command":"echo \"hi there\" > said.txt"}}
{"type":"done","finish":"tool_calls"}
{"type":"content","text":"Ran once."}
{"type":"done","finish":"stop"}
{"type":"tool_call_begin","name":"run_command"}
{"type":"tool_call","name":"run_command","arguments":{"command":"echo again"}}
{"type":"done","finish":"tool_calls"}
{"type":"content","text":"Ran again unasked."}
{"type":"done","finish":"stop"}
{"type":"tool_call_begin","name":"write_file"}
{"type":"tool_call","name":"write_file","arguments":{"path":"notes.txt","content":"line one\nline TWO\nline three\n"}}
{"type":"done","finish":"tool_calls"}
{"type":"content","text":"Wrote it."}
{"type":"done","finish":"stop"}
{"type":"content","text":"No tools now."}
{"type":"done","finish":"stop"}
{"type":"tool_call","name":"run_command","arguments":{"command":"echo one"}}
{"type":"tool_call","name":"run_command","arguments":{"command":"echo two"}}
{"type":"done","finish":"tool_calls"}
{"type":"content","text":"Both ran."}
{"type":"done","finish":"stop"}
R

tui_start
type_text "cd '$WS' && env XDG_DATA_HOME='$XDG_DATA_HOME' XDG_CONFIG_HOME='$XDG_CONFIG_HOME' GLMCHAT_TEST_REPLIES='$CHAT_REPLIES' GLMCHAT_TEST_REQUESTS='$CHAT_REQUESTS' '$G'"
keys Enter
expect_screen 'ready' 5 "the TUI started"

type_text "show me"; keys Enter
expect_screen 'evil \^\[\]52;c;ZXZpbA==\^G title \^\[\]0;pwned\^G done' 5 "escapes in model text are shown as ^["
expect_screen '│ ready *$' 5 "the reply ended"
if tmx show-buffer 2>/dev/null | grep -q evil; then fail "an OSC 52 from the model set the clipboard"; else pass; fi

type_text "run it"; keys Enter
expect_screen 'run_command wants to run:' 5 "the approval question"
expect_screen '^ +echo "hi there" > said\.txt$' 2 "the command shown plain, not as escaped JSON"
expect_screen '\[y\] once  \[c\] this conversation  \[a\] always for this tool  \[n\] no' 2 "the scopes"
keys a
expect_screen 'Ran once\.' 5 "the turn went on after 'always'"
expect_screen '│ ready *$' 5 "the reply ended"
if grep -qx 'always_allow = run_command' "$CONFIG"; then pass; else fail "always not saved: $(cat "$CONFIG")"; fi
if grep -q '^# my settings$' "$CONFIG" && grep -q '^think = on$' "$CONFIG"; then pass; else fail "the rest of the config changed: $(cat "$CONFIG")"; fi
if [ "$(cat "$WS/said.txt")" = "hi there" ]; then pass; else fail "the command did not run"; fi

type_text "/tools"; keys Enter
expect_screen 'run_command - allowed always \(always_allow in the config file\)' 3 "/tools shows the saved approval"
expect_screen 'write_file - asks first' 2 "/tools shows the tools that ask"
type_text "/new"; keys Enter
type_text "again"; keys Enter
expect_screen 'Ran again unasked\.' 5 "always holds in a new conversation"
expect_screen '│ ready *$' 5 "the reply ended"
type_text "/tools ask run_command"; keys Enter
expect_screen 'run_command: asks first' 3 "/tools ask revokes"
type_text "/tools run_comand"; keys Enter
expect_screen "there is no tool 'run_comand'; did you mean run_command\\?" 3 "a misspelt tool: the one meant"
if grep -qx 'always_allow = ' "$CONFIG" || grep -qx 'always_allow =' "$CONFIG"; then pass; else fail "revoke not saved: $(cat "$CONFIG")"; fi

type_text "edit the notes"; keys Enter
expect_screen 'write_file wants to run:' 5 "write_file asks"
expect_screen '@@ -1,3 \+1,3 @@' 2 "a unified diff"
expect_screen '^ +-line two$' 2 "the old line"
expect_screen '^ +\+line TWO$' 2 "the new line"
keys y
expect_screen 'Wrote it\.' 5 "the write went on"
expect_screen '│ ready *$' 5 "the reply ended"
expect_screen 'write_file .*✓ [0-9.]+ s' 3 "the tool's time"

type_text "/tools off"; keys Enter
expect_screen 'tools are off' 3 "/tools off"
type_text "plain"; keys Enter
expect_screen 'No tools now\.' 5 "a turn without tools"
keys C-d
expect_screen 'PROMPT\$ *$' 5 "Ctrl-D leaves the TUI"
# A scripted chat with stdout and stderr in files still asks on the terminal (/dev/tty), with
# the same scopes; "this conversation" covers the second call of the turn.
type_text "clear"; keys Enter
expect_screen '^PROMPT\$ *$' 5 "the screen cleared"
type_text "env XDG_DATA_HOME='$XDG_DATA_HOME' XDG_CONFIG_HOME='$XDG_CONFIG_HOME' GLMCHAT_TEST_REPLIES='$CHAT_REPLIES' '$G' chat --allow-tools --prompt 'two commands' >'$TMP/s.out' 2>'$TMP/s.err'; echo SCRIPT-\$((1+1))-DONE"
keys Enter
expect_screen '^glmchat: run_command wants to run:$' 5 "the scripted chat asks on the terminal"
expect_screen '^echo one$' 2 "the command, plain"
expect_screen '^\[y\] once  \[c\] this conversation  \[a\] always for this tool  \[n\] no: *$' 2 "the same scopes"
keys c Enter
expect_screen '^SCRIPT-2-DONE$' 5 "the scripted chat ended"
if [ "$(screen | grep -c 'wants to run')" -eq 1 ]; then pass; else fail "asked twice in one conversation"; fi
if [ "$(cat "$TMP/s.out")" = "Both ran." ]; then pass; else fail "scripted answer: $(cat "$TMP/s.out") / $(cat "$TMP/s.err")"; fi
if grep -q 'refused' "$TMP/s.err"; then fail "refused although a terminal could ask: $(cat "$TMP/s.err")"; else pass; fi

check_py "/tools off offers no tools" '
import json, os
reqs = [json.loads(l) for l in open(os.environ["TMP"] + "/requests.jsonl")]
if reqs[-1]["tools"] != []: print("FAIL: tools still offered:", [t["name"] for t in reqs[-1]["tools"]])
if not reqs[-2]["tools"]: print("FAIL: no tools before /tools off")
'
finish
