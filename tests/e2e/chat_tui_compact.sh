#!/bin/bash
# chat_tui_compact.sh: /compact in the TUI under tmux: the model's summary (thinking and tools
# off) becomes the first message of a new branch, the next turn sends it instead of the old
# turns, /branch still reaches them, and a summary that cannot be used changes nothing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tui_lib.sh"
. "$(dirname "$0")/chat_lib.sh"
tui_chat_setup

cat >"$CHAT_REPLIES" <<'R'
{"type":"content","text":"Puffins nest in burrows."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Gannets dive from height."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Cut short"}
{"type":"done","finish":"length"}
{"type":"content","text":"  The user asked about puffin nests and gannet dives.\n"}
{"type":"done","finish":"stop"}
{"type":"content","text":"Terns migrate far."}
{"type":"done","finish":"stop"}
R
printf 'workspace = %s\n' "$TMP/ws" >"$XDG_CONFIG_HOME/glmchat/config"

tui_start
type_text "$RUN '$G'"; keys Enter
expect_screen 'ready' 5 "the TUI started"

type_text "/compact"; keys Enter
expect_screen 'nothing to summarise yet' 2 "a new conversation has nothing to summarise"

type_text "puffin question"; keys Enter
expect_screen 'Puffins nest in burrows\.' 5 "first reply"
type_text "gannet question"; keys Enter
expect_screen 'Gannets dive from height\.' 5 "second reply"

# ---- a summary cut at the token limit changes nothing ----
type_text "/compact"; keys Enter
expect_screen 'the summary stopped at the token limit' 5 "a cut summary is refused, saying why"
if [ "$(q 'SELECT count(*) FROM message')" = 4 ]; then pass; else fail "a cut summary saved messages: $(q 'SELECT count(*) FROM message')"; fi

# ---- /compact: a new branch that starts with the summary ----
type_text "/compact"; keys Enter
expect_screen 'summarised 4 messages into one' 5 "the transcript says what happened"
if [ "$(q 'SELECT count(*) FROM message WHERE parent_id IS NULL')" = 2 ]; then pass; else fail "no second root"; fi
if [ "$(q "SELECT CAST(p.body AS TEXT) FROM message m JOIN part p ON p.message_id = m.id WHERE m.id = 5")" = \
     "Summary of the earlier conversation: The user asked about puffin nests and gannet dives." ]; then pass
else fail "the summary message: $(q 'SELECT m.role, m.parent_id, CAST(p.body AS TEXT) FROM message m JOIN part p ON p.message_id = m.id WHERE m.id = 5')"; fi
if [ "$(q 'SELECT role || (parent_id IS NULL) FROM message WHERE id = 5')" = user1 ]; then pass; else fail "the summary is not a root user message"; fi

type_text "tern question"; keys Enter
expect_screen 'Terns migrate far\.' 5 "the conversation goes on"
if [ "$(q 'SELECT parent_id FROM message WHERE id = 6')" = 5 ]; then pass; else fail "the turn is not on the summary's branch"; fi

check_py "requests" '
import json, os
reqs = [json.loads(l) for l in open(os.environ["TMP"] + "/requests.jsonl")]
if len(reqs) != 5:
    print("FAIL: %d requests" % len(reqs)); raise SystemExit
summ = reqs[3]
if summ["think"] or summ["tools"]:
    print("FAIL: the summary request thinks or offers tools:", summ["think"], summ["tools"])
if not reqs[4]["tools"] or not reqs[4]["think"]:
    print("FAIL: the turn after it lost its tools or thinking:", reqs[4]["tools"], reqs[4]["think"])
contents = [m.get("content", "") for m in summ["messages"]]
if contents[:4] != ["puffin question", "Puffins nest in burrows.", "gannet question", "Gannets dive from height."]:
    print("FAIL: the summary request does not carry the path:", contents)
if summ["messages"][-1]["role"] != "user" or "Summarise" not in contents[-1]:
    print("FAIL: the summary request does not end by asking for it:", contents[-1])
after = [(m["role"], m.get("content", "")) for m in reqs[4]["messages"]]
want = [("user", "Summary of the earlier conversation: The user asked about puffin nests and gannet dives."),
        ("user", "tern question")]
if after != want:
    print("FAIL: the next turn sent", after)
'

# ---- /branch reaches the old path ----
type_text "/branch"; keys Enter
expect_screen '^ +1: message 1 \(user\) puffin question$' 3 "the old path is an alternative at the root"
expect_screen '^ +2: message 5 \(user\) Summary of the earlier conversation: The user as\.\.\. +◀' 2 "the summary branch is shown"
type_text "/branch 1"; keys Enter
expect_screen 'Gannets dive from height\.' 5 "the old turns are back"
expect_no_screen 'Terns migrate' "the summary's branch is not shown"
if [ "$(q 'SELECT leaf_id FROM conversation WHERE id = 1')" = 4 ]; then pass; else fail "the leaf is not the old path's end"; fi

type_text "/quit"; keys Enter
expect_screen 'PROMPT\$' 5 "the TUI quit"

finish
