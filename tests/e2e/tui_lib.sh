# tui_lib.sh: drives a program in a private tmux server for the TUI tests: start it in a
# fixed 80x24 pane under a plain shell, type, wait for text with a timeout, read the screen.
# Sourced after lib.sh. Needs tmux; a test without it skips (exit 77).
command -v tmux >/dev/null 2>&1 || { echo "tmux not installed: skipped"; exit 77; }
SOCK="glmchat-test-$$"
tmx() { tmux -L "$SOCK" -f /dev/null "$@"; }
trap 'tmx kill-server 2>/dev/null; rm -rf "$TMP"' EXIT

# tui_start: a pane running a plain shell with prompt "PROMPT$ ", 80x24.
tui_start() {
    tmx new-session -d -x 80 -y 24 -s t "env -i HOME='$HOME' PATH='$PATH' TERM=screen LANG=C.UTF-8 XDG_STATE_HOME='$XDG_STATE_HOME' TMPDIR='$TMP' EDITOR='${TUI_EDITOR:-true}' PS1='PROMPT\$ ' sh"
    tmx set -g set-clipboard on
    tmx set -g window-size manual
    wait_for 'PROMPT\$' 5 >/dev/null
}

screen() { tmx capture-pane -p -t t; }
screen_esc() { tmx capture-pane -p -e -t t; }
keys() { tmx send-keys -t t "$@"; }
type_text() { tmx send-keys -t t -l "$1"; }

# wait_for REGEX [SECONDS]: 0 as soon as the screen matches, else 1 after the timeout.
wait_for() {
    local limit=$(( ${2:-5} * 100 )) i=0
    while [ $i -lt $limit ]; do
        if screen | grep -Eq -- "$1"; then return 0; fi
        sleep 0.01
        i=$((i + 1))
    done
    return 1
}

# expect_screen REGEX [SECONDS] WHAT: waits for REGEX; on timeout fails, showing the screen.
expect_screen() {
    if wait_for "$1" "${2:-5}"; then pass; else fail "$3: /$1/ never showed; screen:"; screen | sed 's/^/    |/' >&2; fi
}

# expect_no_screen REGEX WHAT: the screen does not show REGEX now.
expect_no_screen() {
    if screen | grep -Eq -- "$1"; then fail "$2: /$1/ is on the screen:"; screen | sed 's/^/    |/' >&2; else pass; fi
}

# expect_gone REGEX [SECONDS] WHAT: waits until the screen no longer shows REGEX.
expect_gone() {
    local limit=$(( ${2:-5} * 100 )) i=0
    while [ $i -lt $limit ]; do
        if ! screen | grep -Eq -- "$1"; then pass; return; fi
        sleep 0.01
        i=$((i + 1))
    done
    fail "$3: /$1/ stayed on the screen:"; screen | sed 's/^/    |/' >&2
}

# wait_for_esc FIXED_LINE_TEXT SGR [SECONDS]: a line containing the text is drawn with SGR.
wait_for_esc() {
    local limit=$(( ${3:-5} * 100 )) i=0
    while [ $i -lt $limit ]; do
        if screen_esc | grep -F -- "$1" | grep -qF -- "$2"; then return 0; fi
        sleep 0.01
        i=$((i + 1))
    done
    return 1
}

now_ms() { date +%s%3N; }
