#!/bin/bash
# chat_compact.sh: scripted `chat -c --compact` (recorded replies): the summary starts a new branch,
# the next turn sends it instead of the old turns, export keeps the old path, jsonl carries the
# summary's events, and --compact is refused where it cannot apply.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
G=$GLMCHAT_BIN
DB="$XDG_DATA_HOME/glmchat/glmchat.db"

cat >"$CHAT_REPLIES" <<'R'
{"type":"content","text":"Puffins nest in burrows."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Gannets dive from height."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Cut short"}
{"type":"done","finish":"length"}
{"type":"content","text":"The user asked about puffins and gannets."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Terns migrate far."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Second summary."}
{"type":"done","finish":"stop"}
R

# ---- usage errors, before anything exists ----
expect_exit 2 "$G" chat --compact
expect_grep err -- '--compact needs -c or --conversation ID'
expect_exit 2 "$G" chat -c --compact --prompt x
expect_grep err 'give one of --prompt, --retry, --edit and --compact'
expect_exit 2 "$G" chat -c --compact --retry
expect_grep err 'give one of --prompt, --retry, --edit and --compact'
expect_exit 2 "$G" chat --conversation 1 --compact --edit x
expect_grep err 'give one of --prompt, --retry, --edit and --compact'
expect_exit 2 "$G" chat --no-save --compact
expect_grep err -- '--compact summarises a saved conversation; it goes without --no-save'
expect_exit 1 "$G" chat -c --compact
expect_grep err 'there is no conversation to continue'

expect_exit_in 0 '' "$G" chat --prompt "puffin question"
expect_exit_in 0 '' "$G" chat -c --prompt "gannet question"
expect_same out $'Gannets dive from height.\n'

# ---- a summary cut at the token limit changes nothing ----
expect_exit 1 "$G" chat -c --compact
expect_grep err 'the summary stopped at the token limit'
if [ "$(sqlite3 "$DB" 'SELECT count(*) FROM message')" = 4 ]; then pass; else fail "a cut summary saved messages"; fi

# ---- --compact: one line, a new branch ----
expect_exit 0 "$G" chat -c --compact
expect_same out $'summarised 4 messages into one; conversation 1 goes on from the summary on a new branch\n'
expect_exit_in 0 '' "$G" chat -c --prompt next
expect_same out $'Terns migrate far.\n'
check_py "requests" '
import json, os
reqs = [json.loads(l) for l in open(os.environ["TMP"] + "/requests.jsonl")]
if len(reqs) != 5:
    print("FAIL: %d requests" % len(reqs)); raise SystemExit
if reqs[3]["think"] or reqs[3]["tools"]:
    print("FAIL: the summary request thinks or offers tools")
after = [(m["role"], m.get("content", "")) for m in reqs[4]["messages"]]
want = [("user", "Summary of the earlier conversation: The user asked about puffins and gannets."), ("user", "next")]
if after != want:
    print("FAIL: the next turn sent", after)
'
expect_exit 0 "$G" export 1
check_py "export" '
import json, os
text = open(os.environ["TMP"] + "/out").read()
for want in ("puffin question", "Gannets dive from height.", "Summary of the earlier conversation", "Terns migrate far."):
    if want not in text:
        print("FAIL: the export lacks", want)
'

# ---- jsonl: the summary's events and a turn_end ----
expect_exit 0 "$G" chat --conversation 1 --compact --output-format jsonl
check_py "jsonl" '
import json, os
evs = [json.loads(l) for l in open(os.environ["TMP"] + "/out")]
types = [e.get("type") for e in evs]
if "turn_end" != types[-1]:
    print("FAIL: no final turn_end:", types)
text = "".join(e.get("text", "") for e in evs if e.get("type") == "content")
if text != "Second summary.":
    print("FAIL: the summary content events:", types, text)
if evs[-1].get("finish") != "stop" or evs[-1].get("conversation") != 1:
    print("FAIL: turn_end:", evs[-1])
'
if [ "$(sqlite3 "$DB" 'SELECT count(*) FROM message WHERE parent_id IS NULL')" = 3 ]; then pass
else fail "roots: $(sqlite3 "$DB" 'SELECT count(*) FROM message WHERE parent_id IS NULL')"; fi

finish
