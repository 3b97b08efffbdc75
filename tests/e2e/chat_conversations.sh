#!/bin/bash
# chat_conversations.sh: `glmchat delete` and `glmchat rename` on a real database made by scripted
# chats: delete asks on a terminal and needs --yes without one, takes messages, parts, search
# rows and reasoning memory in one go and leaves a sound file; rename checks its title.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
G=$GLMCHAT_BIN
DB="$XDG_DATA_HOME/glmchat/glmchat.db"

cat >"$CHAT_REPLIES" <<'R'
{"type":"reasoning","text":"ponder the albatross"}
{"type":"tool_call","name":"read_file","arguments":{"path":"x"}}
{"type":"done","finish":"tool_calls"}
{"type":"content","text":"Albatross answer."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Kestrel answer."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Osprey answer."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Heron answer."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Short answer."}
{"type":"done","finish":"stop"}
{"type":"content","text":"After the drop."}
{"type":"done","finish":"stop"}
R
expect_exit_in 0 $'albatross question\n' "$G" chat
expect_exit_in 0 $'kestrel question\n' "$G" chat
expect_exit_in 0 $'osprey question\n' "$G" chat
q() { sqlite3 "$DB" "$1"; }
if [ "$(q 'SELECT count(*) FROM reasoning_memory WHERE conversation_id = 1')" = 1 ]; then pass
else fail "the tool step's reasoning was not kept for conversation 1: $(q 'SELECT conversation_id FROM reasoning_memory')"; fi

# Without a terminal, no --yes: refused, nothing deleted.
expect_exit 2 "$G" delete 1
expect_grep err 'stdin is not a terminal.*pass --yes'
expect_exit 2 "$G" delete --yes 1 x
expect_grep err "ID"
# One unknown id: nothing is deleted.
expect_exit 1 "$G" delete --yes 1 99
expect_grep err 'no conversation 99 .*nothing was deleted'
expect_exit 0 "$G" search albatross
expect_grep out '^conversation 1, message 1'

expect_exit 0 "$G" delete --yes 1
expect_same out $'deleted conversation 1\n'
for t in message part reasoning_memory; do
    n=$(q "SELECT count(*) FROM $t WHERE $( [ $t = part ] && echo 'message_id NOT IN (SELECT id FROM message)' || echo 'conversation_id = 1')")
    if [ "$n" = 0 ]; then pass; else fail "$n rows of $t are left for conversation 1"; fi
done
if [ "$(q 'SELECT count(*) FROM message')" = 4 ]; then pass; else fail "the other conversations lost messages"; fi
if [ "$(q 'PRAGMA integrity_check')" = ok ]; then pass; else fail "integrity_check: $(q 'PRAGMA integrity_check')"; fi
if q "INSERT INTO part_fts(part_fts) VALUES ('integrity-check')"; then pass; else fail "the search index is damaged"; fi
expect_exit 0 "$G" search albatross
expect_empty out
expect_exit 0 "$G" search kestrel
expect_grep out '^conversation 2, message 1'
expect_exit 0 "$G" list --json
check_py "list after delete" '
import json, os
ids = [c["id"] for c in json.load(open(os.environ["TMP"] + "/out"))]
if sorted(ids) != [2, 3]: print("FAIL ids", ids)'
expect_exit 1 "$G" delete --yes 1
expect_grep err 'no conversation 1 '

# On a terminal it asks: anything but y keeps the conversation.
printf 'n\n' | script -qec "'$G' delete 2" /dev/null >"$TMP/out" 2>&1
expect_grep out 'kestrel question \(2 messages\)'
expect_grep out 'Delete this conversation\? It cannot be undone\. \[y/N\]'
expect_grep out 'nothing was deleted'
if [ "$(q 'SELECT count(*) FROM conversation WHERE id = 2')" = 1 ]; then pass; else fail "n deleted it"; fi
printf 'y\n' | script -qec "'$G' delete 2 3" /dev/null >"$TMP/out" 2>&1
expect_grep out 'deleted conversation 3'
if [ "$(q 'SELECT count(*) FROM conversation')" = 0 ]; then pass; else fail "y kept some"; fi

# rename (ids are never given twice: with the table empty, the next conversation is 4)
expect_exit_in 0 $'heron question\n' "$G" chat
expect_exit 0 "$G" rename 4 Herons of the   north
expect_empty out
expect_exit 0 "$G" list
expect_grep out '^ +4  .*  2  Herons of the north$'
expect_exit 1 "$G" rename 5 Title
expect_grep err 'no conversation 5 '
expect_exit 2 "$G" rename 4 " "
expect_grep err 'TITLE is empty'
expect_exit 2 "$G" rename 4 $'two\nlines'
expect_grep err 'control character'
expect_exit 2 "$G" rename 4
expect_grep err 'needs a conversation ID and a TITLE'
expect_exit 2 "$G" rename four Title
expect_exit 0 "$G" list
expect_grep out 'Herons of the north$'

# ---- a message that cannot fit the context is refused before it is saved ----
export GLMCHAT_TEST_CONTEXT=400   # the recorded-replies source counts a rendered byte as a token
LONG=$(printf 'word %.0s' $(seq 100))
expect_exit_in 1 "$LONG"$'\n' "$G" chat
expect_grep err 'your message was not sent: it is [0-9]+ tokens, and the context holds 400'
if [ "$(q 'SELECT count(*) FROM conversation')" = 1 ]; then pass; else fail "a conversation was saved for it"; fi
HALF=$(printf 'tern %.0s' $(seq 30))
expect_exit_in 0 "$HALF"$'\n' "$G" chat
expect_same out $'Short answer.\n'
expect_exit_in 1 "$HALF"$'\n' "$G" chat -c
expect_grep err 'with the [0-9]+ tokens of the conversation before it the prompt is [0-9]+ tokens, and the context holds 400.*/compact.*/drop N'
if [ "$(q 'SELECT count(*) FROM message WHERE conversation_id = 5')" = 2 ]; then pass; else fail "the refused message was saved"; fi
unset GLMCHAT_TEST_CONTEXT
finish
