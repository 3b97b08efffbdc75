#!/bin/bash
# chat_tui_conversations.sh: managing conversations in the TUI under tmux: the F2 list deletes
# (after a y) and renames, its footer says how; more cases are added below as they are fixed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tui_lib.sh"
. "$(dirname "$0")/chat_lib.sh"
tui_chat_setup

cat >"$CHAT_REPLIES" <<'R'
{"type":"content","text":"Puffin answer."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Gannet answer."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Alpha one."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Alpha two."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Beta one."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Beta two."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Gamma on alpha one."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Sys answer."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Plain answer."}
{"type":"done","finish":"stop"}
{"type":"tool_call","name":"run_command","arguments":{"command":"echo ran > ran.txt"}}
{"type":"done","finish":"tool_calls"}
{"type":"content","text":"Ran it."}
{"type":"done","finish":"stop"}
R
printf 'workspace = %s\n' "$TMP/ws" >"$XDG_CONFIG_HOME/glmchat/config"
expect_exit_in 0 $'puffin question\n' "$G" chat
expect_exit_in 0 $'gannet question\n' "$G" chat

tui_start
type_text "$RUN '$G'"; keys Enter
expect_screen 'ready' 5 "the TUI started"
# a turn has ended when the status bar says ready again: keys typed while a reply streams wait in
# the input line and would join the next command
settled() { expect_screen '│ ready *$' 10 "the turn ended"; }

# ---- F2: rename and delete ----
keys F2
expect_screen 'gannet question' 5 "the list shows the conversations"
expect_screen 'Del deletes · Ctrl-R renames' 2 "the footer names the keys"
keys C-r
expect_screen 'title: gannet question' 2 "rename starts from the title"
for _ in $(seq 15); do keys BSpace; done
type_text "Sea birds"; keys Enter
expect_screen '^ ?Sea birds' 5 "the list shows the new title"
if [ "$(q 'SELECT title FROM conversation WHERE id = 2')" = "Sea birds" ]; then pass; else fail "not renamed in the database"; fi
keys Down; keys DC
expect_screen 'delete #1\? y deletes' 2 "delete asks first"
keys n
expect_gone 'delete #1\?' 2 "n keeps it"
if [ "$(q 'SELECT count(*) FROM conversation')" = 2 ]; then pass; else fail "n deleted"; fi
keys DC
expect_screen 'delete #1\? y deletes' 2 "delete asks again"
keys y
expect_gone 'puffin question' 5 "the list lost the deleted conversation"
if [ "$(q 'SELECT count(*) FROM conversation WHERE id = 1')" = 0 ]; then pass; else fail "y did not delete"; fi
if [ "$(q 'SELECT count(*) FROM message WHERE conversation_id = 1')" = 0 ]; then pass; else fail "messages left"; fi
keys Escape
expect_screen 'deleted conversation 1' 2 "the transcript says what went"

# ---- /branch reaches every retried and edited message, not only the last one's replies ----
type_text "/new"; keys Enter
type_text "first"; keys Enter
expect_screen 'Alpha one\.' 5 "first reply"
settled
type_text "/retry"; keys Enter
expect_screen 'Alpha two\.' 5 "the retry"
settled
type_text "second"; keys Enter
expect_screen 'Beta one\.' 5 "second reply"
settled
type_text "/edit second edited"; keys Enter
expect_screen 'Beta two\.' 5 "the edit's reply"
settled
type_text "/branch"; keys Enter
expect_screen 'at message 3:$' 2 "the retried reply's branching point"
expect_screen '^ +1: message 2 \(assistant\) Alpha one\.$' 2 "the first reply is listed"
expect_screen '^ +2: message 3 \(assistant\) Alpha two\. +◀ shown$' 2 "the shown one is marked"
expect_screen '^ +3: message 4 \(user\) second$' 2 "the edited message is listed"
expect_screen '^ +4: message 6 \(user\) second edited +◀ shown$' 2 "its edit is marked"
type_text "/branch 1"; keys Enter
expect_screen "now on message 2's branch" 2 "switched"
expect_no_screen 'Beta' "the later turns are not on this branch"
type_text "third"; keys Enter
expect_screen 'Gamma on alpha one\.' 5 "the turn continues from the first reply"
settled
if [ "$(q "SELECT count(*) FROM message WHERE conversation_id = 3")" = 9 ]; then pass; else fail "message count"; fi
type_text "/branch 9"; keys Enter
expect_screen 'there are 2 alternatives' 2 "a number out of range is refused (this path passes one point)"
type_text "/branch 2"; keys Enter
expect_screen 'Beta two\.' 5 "back to the retried reply's newest leaf"
settled
expect_no_screen 'Gamma' "the other branch is not shown"

# ---- a conversation without a system prompt does not inherit the previous one's ----
type_text "/new"; keys Enter
type_text "/system be a gannet"; keys Enter
type_text "sys q"; keys Enter
expect_screen 'Sys answer\.' 5 "reply with a system prompt"
settled
type_text "/new"; keys Enter
type_text "plain q"; keys Enter
expect_screen 'Plain answer\.' 5 "reply in a new conversation"
settled
type_text "/system"; keys Enter
expect_screen 'no system prompt; /system TEXT sets one' 2 "/new starts without the last conversation's prompt"
if [ -z "$(q "SELECT system_prompt FROM conversation WHERE id = 5")" ]; then pass; else fail "conversation 5 was saved with a prompt"; fi
sqlite3 "$DB" "UPDATE conversation SET system_prompt = NULL WHERE id = 5"
type_text "/open 4"; keys Enter
type_text "/system"; keys Enter
expect_screen 'system prompt: be a gannet' 2 "the stored prompt"
type_text "/open 5"; keys Enter
type_text "/system"; keys Enter
expect_screen 'no system prompt; /system TEXT sets one' 2 "opening a conversation with none clears it"

# ---- a tool call without a begin event still asks for its approval ----
type_text "run it"; keys Enter
expect_screen 'run_command wants to run:' 5 "the approval question shows"
keys y
expect_screen 'Ran it\.' 5 "the turn went on"
settled
if [ "$(cat "$TMP/ws/ran.txt" 2>/dev/null)" = ran ]; then pass; else fail "the command did not run"; fi

# ---- /drop takes the last turn off the path; /branch still reaches it ----
type_text "/drop"; keys Enter
expect_screen 'dropped message 3 and what followed' 3 "/drop says what it dropped"
expect_no_screen 'Ran it\.' "the dropped turn is gone from the transcript"
type_text "/branch"; keys Enter
expect_screen 'after message 2:' 3 "the dropped turn is a continuation of the path's end"
expect_screen '^ +1: message 3 \(user\) run it$' 2 "listed by number"
type_text "/drop 99"; keys Enter
expect_screen 'message 99 is not on the path shown' 2 "a number off the path is refused"

type_text "/quit"; keys Enter
expect_screen 'PROMPT\$' 5 "the TUI quit"

finish
