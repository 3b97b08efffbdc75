#!/bin/sh
# tui_valgrind.sh: a short TUI session (prompt, stream, copy, fold, a command, a tool approval,
# cancel, resize, list, quit) under valgrind: no memory error, nothing definitely or
# indirectly lost. What ncurses and readline keep reachable until exit is not reported.
. "$GLMCHAT_SRCDIR/tests/e2e/lib.sh"
. "$GLMCHAT_SRCDIR/tests/e2e/tui_lib.sh"
command -v valgrind >/dev/null 2>&1 || { echo "valgrind not installed: skipped"; exit 77; }

UI="$GLMCHAT_SRCDIR/tests/ui"
VG="valgrind --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect --error-exitcode=99 --log-file=$TMP/vg.log"
tui_start
type_text "$VG $GLMCHAT_BUILDDIR/tests/ui/tui_driver --script $UI/reply.script --script-dir $UI/scripts --history $TMP/history; echo \"exit=\$?\""
keys Enter
expect_screen 'tiny-test .* ready' 20 "the TUI starts under valgrind"
type_text "hello"; keys Enter
expect_screen 'REPLY-END' 20 "a reply streams"
keys M-k
expect_screen 'copied code block 1/1 \(c, 1 line\)' 5 "Alt-K copies the code block"
type_text "/copy all"; keys Enter
expect_screen 'copied the last reply' 5 "/copy all"
keys Escape
sleep 0.1 # a key sent within ESCDELAY (25 ms) of Esc would read as Alt-key
keys C-t
expect_screen 'The user greets me' 5 "unfold"
type_text "/help"; keys Enter
expect_screen 'Ctrl-R searches' 5 "/help"
type_text "tool x"; keys Enter
expect_screen 'Read the file' 10 "approval question"
keys y
expect_screen 'TOOL-DONE' 10 "tool reply"
expect_screen 'ready' 5 "ready"
type_text "slow x"; keys Enter
expect_screen 'one two' 10 "slow reply"
keys Escape
expect_screen '⊘ canceled' 10 "cancel"
tmx resize-window -t t -x 40 -y 24
sleep 0.5
tmx resize-window -t t -x 80 -y 24
keys F2
expect_screen 'Trellis codes' 5 "list"
keys Escape
keys C-d
expect_screen '^exit=[0-9]+' 30 "the driver exits"
expect_screen '^exit=0' 1 "valgrind found no error or leak (see $TMP/vg.log)"
if grep -q 'ERROR SUMMARY: 0 errors' "$TMP/vg.log"; then pass; else fail "valgrind: $(grep -A3 'ERROR SUMMARY\|definitely' "$TMP/vg.log" | head -20)"; fi
grep -E 'definitely lost|ERROR SUMMARY' "$TMP/vg.log" | sed 's/^==[0-9]*== //'

# --- the same for the real glmchat binary on a tiny model, once it can make one ---
if "$GLMCHAT_BIN" mkmodel --help 2>&1 | grep -q 'not built' ||
   ! "$GLMCHAT_BIN" mkmodel --out "$TMP/model" >"$TMP/mk.out" 2>&1; then
    echo "glmchat cannot make a tiny model yet: its valgrind session is skipped"
    finish
fi
VG_GLMCHAT="${VG%vg.log}vg.log.glmchat"
type_text "clear; $VG_GLMCHAT $GLMCHAT_BIN --db $TMP/chat.db --model $TMP/model --backend cpu chat --max-tokens 4; echo \"glmchat exit=\$?\""
keys Enter
expect_screen '│ ready *$' 60 "glmchat's TUI starts under valgrind"
type_text "hello"; keys Enter
expect_screen '[0-9]+ tokens' 120 "a reply (or its error) ends"
expect_screen '│ ready *$' 30 "ready again"
type_text "/help"; keys Enter
expect_screen 'Ctrl-R searches' 10 "/help"
keys F2
expect_screen 'Conversations' 10 "the conversation list"
keys Escape
sleep 0.2
keys C-d
expect_screen '^glmchat exit=[0-9]+' 60 "glmchat exits"
expect_screen '^glmchat exit=0' 1 "valgrind found no error or leak in glmchat (see $TMP/vg.log.glmchat)"
grep -E 'definitely lost|ERROR SUMMARY' "$TMP/vg.log.glmchat" | sed 's/^==[0-9]*== /glmchat: /'
finish
