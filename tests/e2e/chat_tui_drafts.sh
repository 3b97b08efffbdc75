#!/bin/bash
# chat_tui_drafts.sh: the TUI's /stats says what drafting did for the last reply (the engine's MTP
# drafts on mkmodel tiny-mtp, which drafts every reply: its windows, the drafts they checked and
# those accepted), and says nothing of drafts when drafting is off.
. "$(dirname "$0")/lib.sh"
G=$GLMCHAT_BIN
M="$TMP/mtp"
export GLMCHAT_DB="$TMP/chat.db"
expect_exit 0 "$G" mkmodel --out "$M" --preset tiny-mtp --seed 12
mkdir -p "$XDG_CONFIG_HOME/glmchat"
printf 'temperature = 0\nmax_tokens = 24\nthink = off\n' >"$XDG_CONFIG_HOME/glmchat/config"
if ! command -v tmux >/dev/null 2>&1; then
    echo "tmux not installed: chat_tui_drafts is NOT checked"
    finish
fi
. "$(dirname "$0")/tui_lib.sh"
trap 'tmx kill-server 2>/dev/null; rm -rf "$TMP"' EXIT
# run DRAFT: one reply in the TUI with draft = DRAFT, then /stats (in the one pane's shell)
tui_start
run() {
    type_text "env XDG_DATA_HOME='$XDG_DATA_HOME' XDG_CONFIG_HOME='$XDG_CONFIG_HOME' GLMCHAT_DB='$GLMCHAT_DB' GLMCHAT_DRAFT=$1 '$G' --model '$M' --backend cpu"
    keys Enter
    expect_screen 'ready' 20 "the TUI started (draft = $1)"
    type_text "Hello there, model"; keys Enter
    expect_screen 'tok/s' 30 "the reply ended (draft = $1)"
    expect_screen '│ ready$' 10 "ready after the reply (draft = $1)"
    type_text "/stats"; keys Enter
    expect_screen 'last reply: [0-9]+ prompt tokens' 5 "/stats answers (draft = $1)"
}
run mtp
expect_screen 'drafts: [0-9]+ of [0-9]+ accepted in [1-9][0-9]* windows' 3 "/stats says what the drafts did"
keys C-d
expect_screen 'PROMPT\$ *$' 10 "Ctrl-D leaves the TUI"
run off
expect_no_screen 'drafts:' "/stats says nothing of drafts with drafting off"
keys C-d
expect_screen 'PROMPT\$ *$' 10 "Ctrl-D leaves the TUI"
finish
