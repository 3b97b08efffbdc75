#!/bin/bash
# cli.sh: the command-line contract of CLI.md: --help, --version, exit codes, usage errors,
# --paths, and commands that have not landed saying so.
. "$(dirname "$0")/lib.sh"
G=$GLMCHAT_BIN

expect_exit 0 "$G" --version
expect_grep out '^glmchat [0-9]+\.[0-9]+\.[0-9]+$'
# what the build can run: its GPU architectures, or the CPU backend alone
expect_grep out '^Built (with CUDA kernels for sm: [0-9]+( [0-9]+)* \(DGX Spark: 121\)|without CUDA: the CPU backend only)\.$'
expect_empty err
expect_exit 0 "$G" --help
expect_grep out '^Usage: glmchat'
expect_grep out '--db FILE'
expect_grep out '^  export '
expect_empty err
expect_exit 0 "$G" -h
expect_grep out '^Usage: glmchat'

expect_exit 2 "$G" --frobnicate
expect_grep err "unrecognized option '--frobnicate'"
expect_grep err "Try 'glmchat --help'"
expect_empty out
expect_exit 2 "$G" frobnicate
expect_grep err "unknown command 'frobnicate'$"
expect_exit 2 "$G" exprot 1
expect_grep err "unknown command 'exprot' \\(did you mean 'export'\\?\\)"
expect_exit 2 "$G" --backend tpu list
expect_grep err "'--backend' takes cpu or cuda, not 'tpu'"
expect_exit 2 "$G" list --db
expect_grep err "'--db' needs a value"

expect_exit 0 "$G" --paths
expect_grep out "^database $XDG_DATA_HOME/glmchat/glmchat.db$"
expect_grep out "^config   $XDG_CONFIG_HOME/glmchat/config$"
GLMCHAT_DB=/x/y.db expect_exit 0 "$G" --paths
expect_grep out '^database /x/y.db$'
expect_exit 0 "$G" --db /z.db --paths
expect_grep out '^database /z.db$'

# The recorded-reply test double is in the test build only, not in the binary that ships.
if command -v nm >/dev/null 2>&1; then
    nm "$G" >"$TMP/syms" 2>&1 && pass || fail "nm cannot read $G: $(head -c 200 "$TMP/syms")"
    if grep -Eq 'test_reply_source|reply_hook' "$TMP/syms"; then fail "glmchat contains the test reply source"; else pass; fi
    grep -q 'chat_source_hook_installed' "$TMP/syms" && pass || fail "nm found no symbols to check in $G"
    nm "${GLMCHAT_TEST_BIN:?run through make check}" | grep -q 'test_reply_source_open' && pass ||
        fail "glmchat-test lacks the test reply source"
else
    fail "nm is not installed (binutils): cannot check what glmchat contains"
fi
if strings "$G" | grep -q GLMCHAT_TEST_REPLIES; then fail "glmchat still reads GLMCHAT_TEST_REPLIES"; else pass; fi

finish
