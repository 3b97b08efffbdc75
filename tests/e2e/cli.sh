#!/bin/bash
# cli.sh: the command-line contract of CLI.md: --help, --version, exit codes, usage errors,
# --paths, and commands that have not landed saying so.
. "$(dirname "$0")/lib.sh"
G=$GLMCHAT_BIN

expect_exit 0 "$G" --version
expect_grep out '^glmchat [0-9]+\.[0-9]+\.[0-9]+$'
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
expect_grep err "unknown command 'frobnicate'"
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

finish
