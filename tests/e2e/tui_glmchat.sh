#!/bin/sh
# tui_glmchat.sh: the real glmchat binary's TUI in tmux on a tiny random model (CPU): start,
# type a prompt, see the reply stream and the status line, fold and unfold thinking, a slash
# command, cancel, resize to 40 columns and back, quit with the terminal restored.
. "$GLMCHAT_SRCDIR/tests/e2e/lib.sh"
. "$GLMCHAT_SRCDIR/tests/e2e/tui_lib.sh"

for c in mkmodel chat; do
    if "$GLMCHAT_BIN" $c --help 2>&1 | grep -q 'not built'; then
        echo "glmchat $c is not built yet: skipped"; exit 77
    fi
done
if ! "$GLMCHAT_BIN" mkmodel --out "$TMP/model" >"$TMP/mk.out" 2>&1; then
    fail "glmchat mkmodel failed: $(tail -c 400 "$TMP/mk.out")"; finish
fi

tui_start
type_text "$GLMCHAT_BIN --db $TMP/chat.db --model $TMP/model --backend cpu"; keys Enter
expect_screen '│ ready *$' 30 "the TUI starts with the status line"
[ "$(tmx display -p -t t '#{alternate_on}')" = 1 ] && pass || fail "not on the alternate screen"
expect_screen 'cpu' 1 "the status line names the backend"

# --- a prompt: the reply streams, the status line counts ---
type_text "Hello, who are you?"; keys Enter
expect_screen '› Hello, who are you\?' 5 "the prompt is in the transcript"
expect_screen '[0-9]+ tokens' 120 "the reply finished with its stats footer"
expect_screen 'tok/s .*│ ready *$' 5 "the status line shows the speed when done"
expect_screen 'ctx [1-9]' 1 "the status line counts the context"

# --- thinking folds and unfolds (a random model rarely closes its thinking) ---
if screen | grep -q 'thought for'; then
    keys C-t
    expect_screen '▾ thought for' 3 "Ctrl-T unfolds the thinking"
    keys C-t
    expect_screen '▸ thought for' 3 "Ctrl-T folds it again"
else
    echo "this reply had no thinking: fold not checked"
fi

# --- a slash command ---
type_text "/help"; keys Enter
expect_screen 'Ctrl-R searches history' 3 "/help lists the keys"

# --- cancel: Esc while the reply streams keeps what was written ---
type_text "Write a long story about two computers."; keys Enter
if wait_for '● (prefill|thinking|writing)' 20; then
    keys Escape
    expect_screen '⊘ canceled|[0-9]+ tokens' 30 "the reply stops after Esc"
    expect_screen '│ ready *$' 10 "ready after cancel"
else
    fail "the second reply never showed as streaming"
fi

# --- resize to 40 columns and back ---
tmx resize-window -t t -x 40 -y 24
expect_screen 'ready *$' 5 "the status line at 40 columns"
widest=$(screen | LC_ALL=C.UTF-8 wc -L)
[ "$widest" -le 40 ] && pass || fail "a line is $widest columns wide at 40 columns"
tmx resize-window -t t -x 80 -y 24
expect_screen 'cpu.*│ ready *$' 5 "the status line back at 80 columns"

# --- quit; the terminal is restored ---
keys C-d
expect_screen '^PROMPT\$ *$' 15 "Ctrl-D quits back to the shell"
[ "$(tmx display -p -t t '#{alternate_on}')" = 0 ] && pass || fail "the alternate screen was not left"
type_text "stty -a | tr ' ' '\n' | grep -E '^-?(icanon|echo)\$' | tr '\n' ' '; echo"; keys Enter
expect_screen '^icanon echo *$' 3 "the terminal modes are restored"
[ -s "$XDG_STATE_HOME/glmchat/history" ] && pass || fail "no input history was kept"
finish
