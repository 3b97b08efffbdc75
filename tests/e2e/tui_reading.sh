#!/bin/sh
# tui_reading.sh: reading replies in the real glmchat TUI under tmux: a fenced code block is
# syntax-highlighted (colours seen with capture-pane -e), a Markdown table is drawn as aligned
# columns (wide and combining characters counted by their width) and as its raw lines when
# the pane is too narrow; NO_COLOR gives no colour at all while code stays readable.
. "$GLMCHAT_SRCDIR/tests/e2e/lib.sh"
. "$GLMCHAT_SRCDIR/tests/e2e/tui_lib.sh"

if "$GLMCHAT_BIN" chat --help 2>&1 | grep -q 'not built'; then
    echo "glmchat chat is not built yet: skipped"; exit 77
fi

R="$TMP/replies.jsonl"
{
    printf '{"type":"content","text":"Code:\\n```c\\nint main(void) { return 42; } // KWLINE\\n```\\n"}\n'
    printf '{"type":"content","text":"| Name | Score |\\n|:--|--:|\\n"}\n'
    printf '{"type":"content","text":"| 中文字 | 7 |\\n| \u00e9te\u0301 | **12** |\\n\\nTABLE-END\\n"}\n'
    printf '{"type":"done","finish":"stop"}\n'
} >"$R"
cp "$R" "$TMP/replies2.jsonl" # each run plays its file's replies once

# The display columns of the box-drawing bars of each screen line holding them, one line each.
bar_columns() {
    python3 -c '
import sys, unicodedata
for line in sys.stdin.read().splitlines():
    col, cols = 0, []
    for ch in line:
        if ch in "\u2502\u253c\u251c\u2524":
            cols.append(col)
        if unicodedata.combining(ch):
            continue
        col += 2 if unicodedata.east_asian_width(ch) in "WF" else 1
    if cols:
        print(" ".join(map(str, cols)))'
}

# run_chat DATA ENV: glmchat with the recorded reply (a fresh data dir DATA), asked one
# question, until TABLE-END shows.
run_chat() {
    tui_start
    type_text "env $2 GLMCHAT_TEST_REPLIES='$R' XDG_DATA_HOME='$TMP/$1' $GLMCHAT_TEST_BIN"; keys Enter
    expect_screen '│ ready *$' 10 "glmchat's TUI starts ($2)"
    type_text "show me"; keys Enter
    expect_screen 'TABLE-END' 10 "the reply shows ($2)"
}

# --- colours ---
run_chat data1 "TERM=xterm-256color"
sgr=$(screen_esc | grep -F 'KWLINE')
# "int" and "return" in the keyword colour, 42 in the number colour, the comment in its own.
echo "$sgr" | grep -q '38;5;75m\(int\|return\)' && pass || fail "keywords are not coloured: $sgr"
echo "$sgr" | grep -q '38;5;215m42' && pass || fail "the number is not coloured: $sgr"
echo "$sgr" | grep -q '38;5;245m// KWLINE' && pass || fail "the comment is not coloured: $sgr"
screen | grep -q '│ Name *│ Score │' && pass || fail "the table header is not drawn as columns"
screen | grep -q '│ 中文字 │     7 │' && pass || fail "the wide row is not aligned"
cols=$(screen | grep -E '^ ?[│├]' | bar_columns | sort -u)
[ "$(echo "$cols" | wc -l)" = 1 ] && pass || fail "the table's bars are not in one set of columns: $cols"
screen | grep -Eq '^ ?\| Name' && fail "raw table lines at 80 columns" || pass
tmx resize-window -t t -x 16 -y 24
expect_screen '^ ?\| Name \| Score' 5 "at 16 columns the table falls back to its raw lines"
expect_no_screen '│ Name' "no column layout when the pane is too narrow"
tmx resize-window -t t -x 80 -y 24
expect_screen '│ Name *│ Score │' 5 "columns again at 80 columns"
keys C-d
expect_screen '^PROMPT\$ *$' 10 "Ctrl-D quits"
tmx kill-server
SOCK="$SOCK-nocolor" # a fresh server: the old one may still be going away

# --- NO_COLOR ---
R="$TMP/replies2.jsonl"
run_chat data2 "TERM=xterm-256color NO_COLOR=1"
all=$(screen_esc)
echo "$all" | grep -Eq '\[([0-9;]*;)?(3[0-8]|4[0-8])(;[0-9;]*)?m' &&
    fail "NO_COLOR: colours on the screen: $(echo "$all" | grep -E '\[([0-9;]*;)?(3[0-8]|4[0-8])' | head -3)" || pass
sgr=$(screen_esc | grep -F 'KWLINE')
echo "$sgr" | grep -Eq '\[[0-9;]*1[0-9;]*mint' && pass || fail "NO_COLOR: keywords are not bold: $sgr"
echo "$sgr" | grep -Eq '\[[0-9;]*7[0-9;]*m' && pass || fail "NO_COLOR: the code block is not set off: $sgr"
screen | grep -q '│ 中文字 │     7 │' && pass || fail "NO_COLOR: the table is drawn"
keys C-d
expect_screen '^PROMPT\$ *$' 10 "Ctrl-D quits"
finish
