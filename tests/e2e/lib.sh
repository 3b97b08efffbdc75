# lib.sh: helpers for glmchat's shell tests: assertions that name what failed, a scratch dir.
# Sourced by tests/e2e/*.sh; GLMCHAT_BIN and GLMCHAT_SRCDIR come from the test harness.
set -u
: "${GLMCHAT_BIN:?run through make check}"
TEST_NAME=$(basename "$0" .sh)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/glmchat-$TEST_NAME.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export HOME="$TMP/home" XDG_DATA_HOME="$TMP/data" XDG_CONFIG_HOME="$TMP/config" \
       XDG_STATE_HOME="$TMP/state" XDG_CACHE_HOME="$TMP/cache"
unset GLMCHAT_DB
mkdir -p "$HOME"
CHECKS=0
FAILS=0

fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
pass() { CHECKS=$((CHECKS + 1)); }

# expect_exit CODE CMD...: runs CMD, stdout to $TMP/out, stderr to $TMP/err.
expect_exit() {
    local want=$1; shift
    "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    local got=$?
    if [ "$got" -ne "$want" ]; then
        fail "'$*' exited $got, expected $want; stderr: $(head -c 400 "$TMP/err")"
    else
        pass
    fi
}

# expect_grep FILE PATTERN: FILE (out or err) contains the extended regex PATTERN.
expect_grep() {
    if grep -Eq -- "$2" "$TMP/$1"; then pass; else fail "$1 lacks /$2/: $(head -c 400 "$TMP/$1")"; fi
}

expect_empty() {
    if [ ! -s "$TMP/$1" ]; then pass; else fail "$1 should be empty: $(head -c 400 "$TMP/$1")"; fi
}

# long_words N FILE: N words of one fixed pseudo-random sequence on a line (a prompt whose prefill
# takes several pieces; the same N writes the same text).
long_words() {
    python3 - "$1" >"$2" <<'PY'
import sys
words = "alpha beta gamma delta river stone cloud seven apple table window garden music paper light".split()
seed, out = 1, []
for _ in range(int(sys.argv[1])):
    seed = (seed * 1103515245 + 12345) % (1 << 31)
    out.append(words[seed % len(words)])
print(" ".join(out))
PY
}

finish() {
    echo "$TEST_NAME: $CHECKS checks, $FAILS failed"
    [ "$FAILS" -eq 0 ] && [ "$CHECKS" -gt 0 ]
    exit $?
}
