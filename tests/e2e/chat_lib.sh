# chat_lib.sh: helpers for the chat e2e tests (sourced after lib.sh): runs with stdin, recorded
# replies through the test build, and a JSON checker in python3.
# GLMCHAT_BIN becomes glmchat-test: glmchat plus the recorded-reply source, used while
# GLMCHAT_TEST_REPLIES is set (tests/app/reply_hook.c); without it, the same engine as glmchat.
: "${GLMCHAT_TEST_BIN:?run through make check}"
GLMCHAT_BIN=$GLMCHAT_TEST_BIN
CHAT_REPLIES="$TMP/replies.jsonl"
CHAT_REQUESTS="$TMP/requests.jsonl"
export GLMCHAT_TEST_REPLIES="$CHAT_REPLIES" GLMCHAT_TEST_REQUESTS="$CHAT_REQUESTS"
mkdir -p "$XDG_CONFIG_HOME/glmchat"

# expect_exit_in CODE INPUT CMD...: like expect_exit, with INPUT (a string) on stdin.
expect_exit_in() {
    local want=$1 input=$2; shift 2
    printf '%s' "$input" | "$@" >"$TMP/out" 2>"$TMP/err"
    local got=$?
    if [ "$got" -ne "$want" ]; then
        fail "'$*' exited $got, expected $want; stderr: $(head -c 400 "$TMP/err")"
    else
        pass
    fi
}

# expect_same FILE TEXT: FILE (out or err) is exactly TEXT.
expect_same() {
    if [ "$(cat "$TMP/$1"; echo x)" = "$2"x ]; then pass; else fail "$1 is '$(head -c 300 "$TMP/$1")', expected '$2'"; fi
}

# check_py NAME SCRIPT: runs python3 SCRIPT (reading files under $TMP); it prints FAIL lines.
check_py() {
    local name=$1 res
    res=$(TMP="$TMP" python3 -c "$2" 2>&1)
    if [ -z "$res" ]; then pass; else fail "$name: $res"; fi
}

# tui_chat_setup: what the TUI chat tests share: G, their workspace ($TMP/ws), the database DB
# (q SQL queries it) and RUN, the command line that starts glmchat there on the recorded replies.
tui_chat_setup() {
    G=$GLMCHAT_BIN
    mkdir -p "$TMP/ws"
    DB="$XDG_DATA_HOME/glmchat/glmchat.db"
    RUN="cd '$TMP/ws' && env XDG_DATA_HOME='$XDG_DATA_HOME' XDG_CONFIG_HOME='$XDG_CONFIG_HOME' GLMCHAT_TEST_REPLIES='$CHAT_REPLIES' GLMCHAT_TEST_REQUESTS='$CHAT_REQUESTS'"
}
q() { sqlite3 "$DB" "$1"; }
