#!/bin/sh
# tui_driver.sh: the real TUI in tmux with a scripted reply source (tests/ui/tui_driver):
# start, type, stream, status, fold thinking, slash commands, cancel, resize, quit, history.
. "$GLMCHAT_SRCDIR/tests/e2e/lib.sh"
. "$GLMCHAT_SRCDIR/tests/e2e/tui_lib.sh"

DRIVER="$GLMCHAT_BUILDDIR/tests/ui/tui_driver"
UI="$GLMCHAT_SRCDIR/tests/ui"
mkdir -p "$XDG_STATE_HOME/glmchat"
HIST="$XDG_STATE_HOME/glmchat/history"
cat >"$TMP/editor.sh" <<'EOF'
#!/bin/sh
printf 'written in the editor\n' >"$1"
EOF
chmod +x "$TMP/editor.sh"
TUI_EDITOR="$TMP/editor.sh"
# measure_keys WHAT: types 10 letters while a reply streams, timing each from send-keys until
# the input line shows it, and reads the TUI's own latency log for the same keys.
measure_keys() {
    typed=""; worst=0; total=0; n=0
    l0=$(wc -l <"$LAT")
    for c in a b c d e f g h i j; do
        typed="$typed$c"
        t0=$(now_ms)
        keys "$c"
        if wait_for "› $typed\$" 2; then
            dt=$(( $(now_ms) - t0 )); total=$((total + dt)); n=$((n + 1))
            [ $dt -gt $worst ] && worst=$dt
        fi
    done
    if [ $n -eq 10 ]; then pass; else fail "$1: only $n of 10 keys showed while streaming"; fi
    echo "key latency during $1 (send-keys to screen): mean $((total / (n > 0 ? n : 1))) ms, worst $worst ms, $n keys"
    tail -n +$((l0 + 1)) "$LAT" | awk -v what="$1" '{ s += $2; if ($2 > m) m = $2; n++ }
        END { printf "  inside the TUI (key arrival to frame sent, upper bound): mean %.2f ms, worst %.2f ms, %d batches\n", s / (n ? n : 1), m, n }'
    worst_in=$(tail -n +$((l0 + 1)) "$LAT" | awk '{ if ($2 > m) m = $2 } END { printf "%d", m }')
    [ "$worst_in" -lt 50 ] && pass || fail "$1: the TUI took $worst_in ms to answer a key (goal: 50 ms)"
    # The tmux path depends on the machine's load (other suites run in parallel); only a
    # blocked screen takes seconds. The TUI's own share is checked against 50 ms below.
    [ $worst -lt 2000 ] && pass || fail "$1: a key took $worst ms to show"
}
LAT="$TMP/latency.log"
: >"$LAT"
RUN="$DRIVER --latency-log $LAT --script $UI/reply.script --script-dir $UI/scripts --history $HIST"

tui_start
type_text "$RUN"; keys Enter
expect_screen 'tiny-test .* ready' 5 "the status line at start"
[ "$(tmx display -p -t t '#{alternate_on}')" = 1 ] && pass || fail "the TUI does not use the alternate screen"
measure_keys "no reply (the baseline: tmux and the idle TUI)"
keys C-u

# --- a prompt; thinking streams dim, then folds; the answer streams; the status updates ---
type_text "hello world"; keys Enter
expect_screen 'thinking… [0-9.]+ s' 3 "live thinking header"
if wait_for_esc 'The user' "$(printf '\033[2m')" 2; then pass; else fail "thinking is not dim while it streams"; fi
expect_screen '● (thinking|writing)' 3 "the status line shows the reply running"
expect_screen 'REPLY-END' 5 "the reply streamed to its end"
expect_screen 'tok/s .* ready' 3 "the status line after the reply"
expect_screen 'ctx [1-9][0-9]*/4.1k' 1 "context used grew"
expect_screen 'TTFT [0-9.]+ s' 1 "time to first token"
expect_screen '▸ thought for [0-9.]+ s' 1 "thinking folded"
expect_no_screen 'The user greets me' "folded thinking still shows its text"
expect_screen 'This is bold, this is inline code, and 中文 wide text\.' 1 "inline Markdown without markers"
expect_screen '• first item' 1 "a bullet list"
expect_screen "$(printf 'Caf\303\251 vs cafe\314\201 \360\237\231\202 ok')" 1 "combining marks and emoji"
expect_screen 'int main\(void\)' 1 "a code block"
expect_no_screen '\*\*|```' "Markdown markers left on screen"

# --- fold / unfold ---
keys C-t
expect_screen '▾ thought for' 2 "Ctrl-T unfolds thinking"
expect_screen 'The user greets me' 1 "unfolded thinking shows its text"
keys C-t
expect_screen '▸ thought for' 2 "Ctrl-T folds again"
expect_no_screen 'The user greets me' "folded again"

# --- slash command with completion ---
type_text "/he"; keys Tab
expect_screen '› /help *$' 2 "Tab completes /he to /help"
keys Enter
expect_screen 'Ctrl-R searches history' 2 "/help lists the keys"
expect_screen '//text sends /text' 1 "/help says how to send a message that starts with /"
keys PPage   # the help is taller than 24 lines: its first commands are above
expect_screen '/export \[md\|json\|html\] \[FILE\]' 2 "/help lists the commands"
keys NPage
type_text "/bogus"; keys Enter
expect_screen 'unknown command /bogus' 2 "an unknown command is explained"
type_text "/think off"; keys Enter
expect_screen 'thinking: off' 2 "a command reaches the app with its arguments"

# --- keys answer while a reply streams (latency), then cancel keeps the partial reply ---
type_text "slow one"; keys Enter
expect_screen 'one two three' 3 "the slow reply streams"
measure_keys "a 20 tok/s reply"
expect_screen '● writing' 1 "still streaming while typing"
keys Enter
expect_screen 'a reply is streaming' 2 "Enter while streaming keeps the message"
keys C-u
keys Escape
expect_screen '⊘ canceled' 3 "Esc cancels the reply"
expect_screen 'one two three' 1 "the canceled reply is kept"
expect_screen 'ready' 2 "ready after cancel"
sleep 0.3
expect_no_screen 'hundred' "the reply went on after cancel"

# --- resize to 40 columns and back ---
tmx resize-window -t t -x 40 -y 24
expect_screen '^ .*ready *$' 3 "status line at 40 columns"
widest=$(screen | LC_ALL=C.UTF-8 wc -L)
[ "$widest" -le 40 ] && pass || fail "a line is $widest columns wide at 40 columns"
expect_screen '⊘ canceled' 1 "transcript reflowed at 40 columns"
tmx resize-window -t t -x 80 -y 24
expect_screen 'tiny-test │ script' 3 "status line back at 80 columns"

# --- multi-line input, paste, editor ---
type_text "first line"; keys M-Enter; type_text "second line"
expect_screen '^  second line' 2 "Alt-Enter starts a new input line"
keys C-j; type_text "third"
expect_screen '^  third' 2 "Ctrl-J starts a new input line"
keys C-u C-a C-k
keys BSpace BSpace BSpace BSpace BSpace BSpace BSpace BSpace BSpace BSpace BSpace BSpace
tmx set-buffer -b p "$(printf 'pasted one\npasted two')"
tmx paste-buffer -p -b p -t t
expect_screen '^  pasted two' 2 "a bracketed paste keeps its newline without sending"
keys C-g
expect_screen '› written in the editor' 3 "Ctrl-G edits the message in \$EDITOR"
keys Enter
expect_screen 'REPLY-END' 5 "the edited message was sent"
expect_screen 'ready' 3 "ready"
type_text "/edit"; keys Enter
expect_screen '^› written in the editor' 2 "/edit puts the last message back in the input"
keys C-u
type_text "中文abc"; keys Left Left Left; type_text "X"
expect_screen '^› 中文Xabc *$' 2 "editing after wide characters"
keys C-u

# --- copy the last reply (OSC 52 into tmux's buffer) ---
keys M-w
expect_screen 'copied the last reply' 2 "Alt-W copies"
sleep 0.2
if tmx show-buffer 2>/dev/null | grep -q 'Done: REPLY-END'; then pass; else fail "OSC 52 did not reach the clipboard"; fi

# --- a tool call with an inline approval ---
type_text "tool please"; keys Enter
expect_screen 'Read the file notes.txt\?' 3 "the approval question shows inline"
expect_screen 'approve\? y/c/a/n' 1 "the status asks for the answer"
keys y
expect_screen 'TOOL-DONE' 3 "the reply goes on after approval"
expect_screen '▸ read_file .*✓' 1 "the tool call is one line with its state"
keys C-t
expect_screen 'line two of notes' 2 "Ctrl-T expands the tool call's result"

# --- select an item with Alt-Up and unfold it ---
keys M-Up
if wait_for_esc 'read_file' "$(printf '\033[7m')" 2; then pass; else fail "Alt-Up does not select the tool call"; fi
keys M-Up C-t
expect_screen 'I need to read the file first' 2 "Ctrl-T unfolds the selected thought"
keys Escape
sleep 0.1 # a key sent within ESCDELAY (25 ms) of Esc would read as Alt-key

# --- keys under a flood of deltas; local commands work while streaming ---
type_text "flood now"; keys Enter
expect_screen 'FLOOD-START' 3 "the flood starts"
measure_keys "a 1000 deltas/s reply"
expect_screen '● writing' 1 "still flooding while typing"
keys C-u; type_text "/help"; keys Enter
expect_screen 'Ctrl-R searches' 2 "/help runs while a reply streams"
expect_screen 'FLOOD-END' 10 "the flood ends"
expect_screen 'ready' 2 "ready after the flood"

# --- /new empties the transcript ---
type_text "/new"; keys Enter
expect_screen 'new conversation' 2 "/new reaches the app"
expect_no_screen 'TOOL-DONE' "/new empties the transcript"

# --- streaming sends only what changed: count the bytes that reach the terminal ---
tmx pipe-pane -t t -o "cat >>'$TMP/pane.bytes'"
type_text "stream it"; keys Enter
expect_screen 'STREAM-END' 10 "a 200-delta reply streams"
expect_screen 'ready' 3 "ready after it"
tmx pipe-pane -t t
bytes=$(wc -c <"$TMP/pane.bytes")
echo "terminal output for a 200-delta reply: $bytes bytes, $((bytes / 200)) per delta (a repaint of the 80x24 screen is 1920)"
[ $((bytes / 200)) -lt 200 ] && pass || fail "$((bytes / 200)) bytes per delta: the TUI repaints too much"

# --- conversation list with search ---
keys F2
expect_screen 'Trellis codes in EXL3' 2 "F2 shows the conversation list"
type_text "roce"
expect_screen 'RoCE between two Sparks' 2 "the list filters"
expect_gone 'Trellis codes' 2 "the list filter hides the rest"
keys Enter
expect_screen 'opened conversation c2' 2 "Enter opens the chosen conversation"
tmx resize-window -t t -x 120 -y 24
expect_screen '^ RoCE between two Sparks │ tiny-test' 2 "a wide status line names the open conversation"
tmx resize-window -t t -x 80 -y 24

# --- scroll back ---
type_text "/help"; keys Enter; type_text "/help"; keys Enter
expect_screen 'Ctrl-R searches' 2 "help again"
keys PPage
expect_screen 'more lines \(PageDown\)' 2 "PageUp scrolls back"
keys NPage NPage NPage
expect_gone 'more lines \(PageDown\)' 2 "PageDown returns to the end"
type_text "$(printf '\033[M`++')"
expect_screen '↓ 3 more lines' 2 "the mouse wheel scrolls back"
type_text "$(printf '\033[Ma++')"
expect_gone 'more lines \(PageDown\)' 2 "the wheel scrolls forward"

# --- quit with Ctrl-D; the terminal is restored ---
keys C-d
expect_screen 'terminal restored, rc 0' 3 "Ctrl-D quits cleanly"
expect_screen '^PROMPT\$ *$' 2 "back at the shell prompt"
[ "$(tmx display -p -t t '#{alternate_on}')" = 0 ] && pass || fail "the alternate screen was not left"
type_text "stty -a | tr ' ' '\n' | grep -E '^-?(icanon|echo)\$' | tr '\n' ' '; echo"; keys Enter
expect_screen '^icanon echo *$' 2 "the terminal modes are restored"

# --- history across runs: Up and Ctrl-R ---
grep -q '^hello world$' "$HIST" && pass || fail "history file lacks the first prompt"
type_text "$RUN"; keys Enter
expect_screen 'ready' 5 "second run starts"
keys C-r; type_text "hello"
expect_screen 'reverse-i-search.*hello world' 2 "Ctrl-R finds a prompt from the last run"
keys Escape
expect_screen '› hello world' 2 "the found prompt is back in the input"
keys C-u

# --- Ctrl-C twice quits ---
keys C-c
expect_screen 'Ctrl-C again' 2 "first Ctrl-C explains"
keys C-c
expect_screen 'terminal restored, rc 0' 3 "second Ctrl-C quits"
finish
