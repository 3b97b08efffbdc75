#!/bin/bash
# chat_tui_copy.sh: copying code blocks in the TUI under tmux (set-clipboard on): Alt-K copies
# the last reply's last block and, pressed again, the ones before; /copy N and /copy all; the
# OSC 52 payload reaches tmux's buffer and the copy file byte for byte; and the one streaming
# rule for commands and keys (issue 33: /list and F2 were let through by the view, refused by the app).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tui_lib.sh"
. "$(dirname "$0")/chat_lib.sh"
tui_chat_setup
COPIED="$XDG_STATE_HOME/glmchat/copied.txt"

# Three blocks: python with a tab, a list item's sh block (fence indented 3, trailing blanks
# kept), and one left open at the end of the reply.
cat >"$CHAT_REPLIES" <<'R'
{"type":"content","text":"Here:\n\n```python\ndef f(x):\n\treturn x  # tab\n```\n\n"}
{"type":"content","text":"1. then run\n   ```sh\n   echo \"hi\"  \n   ls\n   ```\n\nLast:\n\n```\nlast block\n"}
{"type":"done","finish":"stop"}
{"type":"content","text":"No code here."}
{"type":"done","finish":"stop"}
{"type":"content","text":"slow "}
{"type":"content","text":"slow "}
{"type":"content","text":"slow "}
{"type":"content","text":"slow "}
{"type":"content","text":"slow "}
{"type":"content","text":"slow "}
{"type":"content","text":"slow "}
{"type":"content","text":"slow "}
{"type":"content","text":"SLOW-END"}
{"type":"done","finish":"stop"}
R

# same_bytes WHAT FILE EXPECTED(python literal): FILE holds exactly those bytes.
same_bytes() {
    check_py "$1" "
import sys
got = open('$2', 'rb').read()
want = $3
if got != want: print('got %r, want %r' % (got, want))
"
}
# copied WHAT EXPECTED: tmux's buffer (set by the OSC 52) and the copy file both hold EXPECTED.
copied() {
    sleep 0.2
    tmx show-buffer >"$TMP/buffer" 2>/dev/null || : >"$TMP/buffer"
    same_bytes "$1: tmux's buffer" "$TMP/buffer" "$2"
    same_bytes "$1: the copy file" "$COPIED" "$2"
}

tui_start
type_text "$RUN GLMCHAT_TEST_REPLY_DELAY_MS=300 '$G'"
keys Enter
expect_screen 'ready' 5 "the TUI is up"
type_text "code please"; keys Enter
expect_screen 'last block' 5 "the reply with three code blocks"
expect_screen 'ready' 5 "the reply ended"

keys M-k
expect_screen 'copied code block 3/3 \(1 line\): OSC 52 \+ ' 3 "Alt-K copies the last block and says how"
copied "Alt-K, block 3" "b'last block'"
if [ "$(stat -c %a "$COPIED" 2>/dev/null)" = 600 ]; then pass; else fail "the copy file is not mode 0600"; fi
if wait_for_esc 'last block' "$(printf '\033[7m')" 2; then pass; else fail "the copied block is not drawn selected"; fi

keys M-k
expect_screen 'copied code block 2/3 \(sh, 2 lines\)' 3 "Alt-K again: the block before"
copied "Alt-K, block 2" "b'echo \"hi\"  \\nls'"
if wait_for_esc 'echo ' "$(printf '\033[7m')" 2; then pass; else fail "block 2 is not drawn selected"; fi
if screen_esc | grep -F 'last block' | grep -qF "$(printf '\033[7m')"; then
    fail "block 3 is still drawn selected"; else pass; fi

keys M-k
expect_screen 'copied code block 1/3 \(python, 2 lines\)' 3 "and the first"
copied "Alt-K, block 1" "b'def f(x):\\n\\treturn x  # tab'"
keys M-k
expect_screen 'copied code block 3/3' 3 "past the first it goes round to the last"
keys Escape
sleep 0.1
if screen_esc | grep -F 'last block' | grep -qF "$(printf '\033[7m')"; then
    fail "Esc does not drop the selection"; else pass; fi

type_text "/copy 2"; keys Enter
expect_screen 'copied code block 2/3 \(sh, 2 lines\)' 3 "/copy 2"
copied "/copy 2" "b'echo \"hi\"  \\nls'"
type_text "/copy"; keys Enter
expect_screen 'copied code block 3/3' 3 "/copy: the last block"
type_text "/copy 9"; keys Enter
expect_screen 'the last reply has 3 code blocks: /copy 1 to 3' 3 "/copy 9 is refused by number"
type_text "/copy x"; keys Enter
expect_screen "/copy takes a code block number or 'all', not 'x'" 3 "/copy x is refused"
type_text "/copy 1 "; keys Enter
expect_screen 'copied code block 1/3 \(python' 3 "/copy 1 with a trailing blank"
type_text "/copy 1 2"; keys Enter
expect_screen "/copy takes one word" 3 "/copy with two words is refused"
type_text "/copy all"; keys Enter
expect_screen 'copied the last reply \(17 lines' 3 "/copy all: the whole reply"
check_py "/copy all: the reply as written" "
got = open('$COPIED', 'rb').read()
if not got.startswith(b'Here:\n\n\`\`\`python') or not got.endswith(b'last block\n'): print(repr(got))
"
type_text "/help"; keys Enter
expect_screen 'Alt-K copies the last code block' 3 "/help lists Alt-K"

# A reply without code: Alt-K says so and copies nothing; /copy copies the whole reply, saying so.
type_text "no code"; keys Enter
expect_screen 'No code here\.' 5 "the reply without code"
expect_screen 'ready' 5 "it ended"
tmx set-buffer "untouched"
keys M-k
expect_screen 'no code block in the last reply' 3 "Alt-K without code blocks says so"
sleep 0.2
if [ "$(tmx show-buffer)" = untouched ]; then pass; else fail "Alt-K copied something without a code block"; fi
type_text "/copy"; keys Enter
expect_screen 'copied the last reply \(1 line' 3 "/copy without blocks copies the reply, and says so"
copied "/copy, no blocks" "b'No code here.'"

# While a reply streams: /copy and /help run; /list and F2 wait, in the view and the app alike.
type_text "slow please"; keys Enter
expect_screen 'slow slow' 5 "the slow reply streams"
type_text "/list"; keys Enter
expect_screen 'a reply is streaming: Esc cancels it; your message waits here' 2 "/list waits while streaming"
expect_no_screen 'Conversations' "no list pane opened while streaming"
expect_no_screen '/list can wait' "the app was not asked"
keys C-u
keys F2
expect_screen 'F2 waits for it' 2 "F2 waits while streaming"
expect_no_screen 'Conversations' "F2 opened no list while streaming"
type_text "/copy"; keys Enter
expect_screen 'copied the last reply' 2 "/copy runs while streaming"
expect_screen 'SLOW-END' 8 "the slow reply ends"
expect_screen 'ready' 3 "ready"
keys F2
expect_screen 'Conversations' 3 "F2 opens the list after the reply"
keys Escape
keys C-d
expect_screen 'PROMPT\$ *$' 5 "Ctrl-D leaves"
finish
