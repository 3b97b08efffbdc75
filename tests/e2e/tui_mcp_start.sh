#!/bin/sh
# tui_mcp_start.sh: MCP servers that crash or hang at start, in the real glmchat TUI under tmux:
# the view is up at once and shows each server's start, the crash with the server's last
# words and the hang when its timeout passes, while a good server's tools come up (and may be
# allowed before they exist); quitting while a server still starts is prompt and leaves no
# server behind.
. "$GLMCHAT_SRCDIR/tests/e2e/lib.sh"
. "$GLMCHAT_SRCDIR/tests/e2e/tui_lib.sh"

if "$GLMCHAT_BIN" chat --help 2>&1 | grep -q 'not built'; then
    echo "glmchat chat is not built yet: skipped"; exit 77
fi
SERVER="$GLMCHAT_BUILDDIR/tests/mcp/test_mcp_server"
[ -x "$SERVER" ] || { echo "the MCP test server is not built: skipped"; exit 77; }
TAG="--unique-$$" # marks this test's servers among the machine's processes

mkdir -p "$XDG_CONFIG_HOME/glmchat"
cat >"$XDG_CONFIG_HOME/glmchat/config" <<C
tools = on
workspace = $TMP
always_allow = good__echo
[mcp.crashy]
command = $SERVER --mode crash-on-start $TAG
[mcp.good]
command = $SERVER $TAG
[mcp.stuck]
command = $SERVER --mode hang-on-init $TAG
timeout = 4
C
printf '{"type":"content","text":"fine"}\n{"type":"done","finish":"stop"}\n' >"$TMP/replies.jsonl"

start_glmchat() {
    tui_start
    type_text "env GLMCHAT_TEST_REPLIES='$TMP/replies.jsonl' XDG_CONFIG_HOME='$XDG_CONFIG_HOME' XDG_DATA_HOME='$TMP/data' $GLMCHAT_TEST_BIN chat --allow-tool good__add"
    keys Enter
}

start_glmchat
t0=$(now_ms)
expect_screen '│ ready *$' 3 "the TUI is up while the servers start"
expect_screen "the MCP server 'crashy' exited with status 3" 3 "the crash at start is shown as it happens"
expect_screen "fatal: simulated" 1 "with the server's last words"
expect_screen "MCP server 'good': ready, 6 tools" 3 "the good server's tools are reported"
expect_screen "MCP server 'stuck': starting test_mcp_server \(gives up after 4 s\)" 3 "the hanging server's start is shown"
expect_screen "the MCP server 'stuck' did not answer initialize within 4 s" 8 "the hang is shown when its timeout passes"
t1=$(now_ms)
[ $((t1 - t0)) -ge 3500 ] && pass || fail "the hang was reported after $((t1 - t0)) ms, before its 4 s timeout"
expect_screen "mcp-stuck.log" 1 "the notice names the server's log"
type_text "/tools"; keys Enter
expect_screen 'good__echo' 3 "/tools lists the good server's tools"
keys C-d
expect_screen '^PROMPT\$ *$' 5 "Ctrl-D quits"
# A tool of a server still starting may be allowed (--allow-tool, always_allow) before it exists.
expect_no_screen 'not a tool here' "always_allow or --allow-tool refused a starting server's tool"
tmx kill-server

# Quit while a server still starts: prompt, and its process is gone.
SOCK="$SOCK-quit"
sed -i 's/^timeout = 4$/timeout = 120/' "$XDG_CONFIG_HOME/glmchat/config"
start_glmchat
expect_screen "MCP server 'stuck': starting" 5 "the slow start is shown"
pgrep -f -- "--mode hang-on-init $TAG" >/dev/null && pass || fail "the hanging server is not running"
t0=$(now_ms)
keys C-d
expect_screen '^PROMPT\$ *$' 5 "Ctrl-D quits while a server starts"
t1=$(now_ms)
[ $((t1 - t0)) -lt 3000 ] && pass || fail "quitting took $((t1 - t0)) ms while a server started"
sleep 0.3
pgrep -f -- "$TAG" >/dev/null && fail "a server outlived glmchat: $(pgrep -af -- "$TAG")" || pass
finish
