#!/bin/sh
# tui_escape_keys.sh: Esc and the next key reaching the TUI together (typed fast, or read late on
# a busy machine), in tmux: Alt-keys still work, and Esc and any other key each act alone.
. "$GLMCHAT_SRCDIR/tests/e2e/lib.sh"
. "$GLMCHAT_SRCDIR/tests/e2e/tui_lib.sh"

if "$GLMCHAT_BIN" chat --help 2>&1 | grep -q 'not built'; then
    echo "glmchat chat is not built yet: skipped"; exit 77
fi
command -v sqlite3 >/dev/null 2>&1 || { echo "sqlite3 not installed: skipped"; exit 77; }

# Slow replies (40 ms a delta, 400 deltas): long enough to press keys while they stream, and
# more than a screen once a few dozen deltas are in.
R="$TMP/replies.jsonl"
{
    for reply in 1 2 3 4; do
        for i in $(seq 1 400); do printf '{"type":"content","text":"r%sw%s lorem ipsum "}\n' "$reply" "$i"; done
        printf '{"type":"content","text":"REPLY%s-END"}\n' "$reply"
        printf '{"type":"done","finish":"stop"}\n'
    done
} >"$R"
DB="$TMP/data/glmchat/glmchat.db"

# esc_with KEY...: Esc and the keys in one tmux command: their bytes reach the TUI together.
esc_with() { tmx send-keys -t t Escape "$@"; }

start_glmchat() {
    type_text "env GLMCHAT_TEST_REPLIES='$R' GLMCHAT_TEST_REPLY_DELAY_MS=40 XDG_DATA_HOME='$TMP/data' $GLMCHAT_TEST_BIN"
    keys Enter
    expect_screen 'recorded-replies .*│ ready *$' 10 "glmchat's TUI starts"
}

tui_start
start_glmchat

# --- Alt-keys: Esc with a printable key or Enter is still one key ---
type_text "one two"; esc_with b; type_text "X"
expect_screen '› one Xtwo *$' 3 "Esc and b together are Alt-B (a word back)"
esc_with Enter; type_text "three"
expect_screen '^  three' 3 "Esc and Enter together are Alt-Enter (a new input line)"
keys C-e C-u
expect_screen '› message' 3 "the input line is empty again"

# --- idle: Esc with F2, with a resize, with Ctrl-D: each key acts ---
esc_with F2
expect_screen 'Conversations' 3 "F2 together with Esc opens the conversation list"
keys Escape
expect_gone 'Conversations' 3 "Esc closes the list"
tmx send-keys -t t Escape \; resize-window -t t -x 40 -y 24
expect_screen 'ready *$' 5 "redrawn at 40 columns after Esc and a resize together"
tmx resize-window -t t -x 80 -y 24
expect_screen 'recorded-replies .*│ ready *$' 5 "back at 80 columns"
esc_with C-d
expect_screen '^PROMPT\$ *$' 5 "Ctrl-D together with Esc quits back to the shell"
[ "$(tmx display -p -t t '#{alternate_on}')" = 0 ] && pass || fail "the alternate screen was not left"

# --- streaming: Esc with a second Esc, with PageUp, with a resize: the reply is canceled ---
start_glmchat
type_text "first"; keys Enter
expect_screen 'r1w30 ' 10 "the first reply streams"
esc_with Escape
expect_screen '│ ready *$' 5 "Esc pressed twice fast cancels the reply"
type_text "second"; keys Enter
expect_screen 'r2w60 ' 10 "the second reply streams"
esc_with PPage
expect_screen '│ ready *$' 5 "Esc together with PageUp cancels the reply"
expect_screen 'more lines \(PageDown\)' 3 "and PageUp scrolls back"
keys NPage NPage NPage NPage
expect_gone 'more lines \(PageDown\)' 3 "PageDown returns to the end"
type_text "third"; keys Enter
expect_screen 'r3w3 ' 10 "the third reply streams"
tmx send-keys -t t Escape \; resize-window -t t -x 40 -y 24
expect_screen 'ready *$' 5 "Esc together with a resize cancels the reply"
tmx resize-window -t t -x 80 -y 24
expect_screen '│ ready *$' 5 "ready at 80 columns"

# --- streaming: Esc with Ctrl-D cancels and quits; what was written is saved ---
type_text "fourth"; keys Enter
expect_screen 'r4w3 ' 10 "the fourth reply streams"
esc_with C-d
expect_screen '^PROMPT\$ *$' 5 "Esc together with Ctrl-D quits while a reply streams"
users=$(sqlite3 "$DB" "SELECT group_concat(b, ',') FROM (SELECT CAST(p.body AS TEXT) AS b FROM message m
    JOIN part p ON p.message_id = m.id WHERE m.role = 'user' ORDER BY m.id, p.seq)")
[ "$users" = "first,second,third,fourth" ] && pass || fail "the saved user messages are '$users'"
statuses=$(sqlite3 "$DB" "SELECT group_concat(status, ',') FROM (SELECT status FROM message
    WHERE role = 'assistant' ORDER BY id)")
[ "$statuses" = "canceled,canceled,canceled,canceled" ] && pass || fail "the replies are saved as '$statuses'"
ended=$(sqlite3 "$DB" "SELECT count(*) FROM part WHERE CAST(body AS TEXT) LIKE '%-END%'")
[ "$ended" = 0 ] && pass || fail "$ended replies ran to their end"
last=$(sqlite3 "$DB" "SELECT max(id) FROM message WHERE role = 'assistant'")
partial=$(sqlite3 "$DB" "SELECT group_concat(CAST(body AS TEXT), '') FROM (SELECT body FROM part
    WHERE message_id = $last ORDER BY seq)")
case "$partial" in
r4w1\ lorem\ ipsum\ r4w2\ *) pass ;;
*) fail "the fourth reply's partial text was not saved: '$(printf %s "$partial" | cut -c1-100)'" ;;
esac
[ "$(sqlite3 "$DB" 'PRAGMA integrity_check')" = ok ] && pass || fail "the database fails its integrity check"
finish
