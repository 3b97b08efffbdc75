#!/bin/bash
# chat_errors.sh: bad input gets a clear message and the CLI.md exit status: an unknown
# conversation, a broken config file, bad environment values and flags, replies that fail.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
G=$GLMCHAT_BIN
CONFIG="$XDG_CONFIG_HOME/glmchat/config"
printf '{"type":"content","text":"ok"}\n{"type":"done"}\n' >"$CHAT_REPLIES"

expect_exit 0 "$G" chat --help
expect_grep out '^Usage: glmchat chat'
expect_grep out '--allow-tools'

expect_exit 1 "$G" chat --conversation 99 --prompt hi
expect_grep err "^glmchat: there is no conversation 99 in $XDG_DATA_HOME/glmchat/glmchat.db; \`glmchat list\` shows them$"
expect_empty out

printf 'model = /m\n\ntemperature = hot\n' >"$CONFIG"
expect_exit 1 "$G" chat --prompt hi
expect_grep err "^glmchat: $CONFIG:3: 'temperature' takes a number from 0 to 10, not 'hot'$"
printf '[mcp.x]\ncommand = a\nport = 9\n' >"$CONFIG"
expect_exit 1 "$G" chat --prompt hi
expect_grep err "^glmchat: $CONFIG:3: unknown key 'port' in \[mcp.x\]"
printf 'bogus_key = 1\n' >"$CONFIG"
expect_exit 1 "$G" chat --prompt hi
expect_grep err "$CONFIG:1: unknown key 'bogus_key'; the keys are: model, backend"
rm "$CONFIG"

GLMCHAT_TOP_K=many expect_exit 1 "$G" chat --prompt hi
expect_grep err "^glmchat: GLMCHAT_TOP_K: 'top_k' takes a whole number from 0 to 1000000, not 'many'$"

expect_exit 2 "$G" chat --think maybe
expect_grep err "'--think' takes on or off, not 'maybe'"
expect_exit 2 "$G" chat --output-format xml
expect_grep err "'--output-format' takes text, jsonl or json, not 'xml'"
expect_exit 2 "$G" chat --max-tokens -5 --prompt hi
expect_grep err "'max_tokens' takes a whole number"
expect_exit 2 "$G" chat --conversation abc
expect_grep err "'--conversation' takes a number"
expect_exit 2 "$G" chat -c --conversation 1
expect_exit 2 "$G" chat --no-save -c
expect_exit 2 "$G" chat --prompt "   "
expect_grep err 'the prompt is empty'
expect_exit 2 "$G" chat stray
expect_grep err "unexpected argument 'stray'"
expect_exit 2 "$G" chat --retry
expect_grep err '--retry and --edit need -c or --conversation ID'

# The replies run out: the turn fails with the reason; what was said before is kept.
expect_exit_in 1 $'hi\nand again\n' "$G" chat --lines
expect_same out $'ok\n'
expect_grep err '^glmchat: the reply failed: the recorded replies in .* ran out after 1 replies$'

# Without the test hook the engine answers: with no model given, the embedded demo model, which
# must exist; a model given must exist.
GLMCHAT_TEST_REPLIES= GLMCHAT_DEMO_MODEL="$TMP/no-demo" expect_exit 1 "$G" chat --prompt hi
expect_grep err "^glmchat: no model to chat with: the embedded demo model is not at $TMP/no-demo "
GLMCHAT_TEST_REPLIES= expect_exit 1 "$G" --model "$TMP/no-such-model" chat --prompt hi
expect_grep err "^glmchat: cannot open the model $TMP/no-such-model: "

finish
