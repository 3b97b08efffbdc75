#!/bin/sh
# demo_tool.sh: a scripted chat with the embedded demo model asks a question that needs a tool; the
# transcript must show reasoning, a well-formed run_command call, its real result and an answer using it.
. "$GLMCHAT_SRCDIR/tests/e2e/lib.sh"
B="$GLMCHAT_BIN"
M="$GLMCHAT_BUILDDIR/models/demo"
export XDG_CONFIG_HOME="$TMP/config" XDG_DATA_HOME="$TMP/data" XDG_STATE_HOME="$TMP/state" XDG_CACHE_HOME="$TMP/cache"
mkdir -p "$XDG_CONFIG_HOME/glmchat" "$TMP/ws"
# greedy decoding: the tiny model is only reliable without sampling noise
printf 'temperature = 0\n' >"$XDG_CONFIG_HOME/glmchat/config"
cd "$TMP/ws" || exit 1

"$B" --model "$M" chat --prompt "How much is 67 plus 66?" --no-save --allow-tool run_command --output-format jsonl \
    </dev/null >"$TMP/out.jsonl" 2>"$TMP/err" && pass || fail "chat failed: $(cat "$TMP/err")"
expect_grep out.jsonl '"type":"reasoning"'
expect_grep out.jsonl '"type":"tool_call","id":"[^"]*","name":"run_command","arguments":\{"command":"echo \$\(\(67\+66\)\)"\}'
expect_grep out.jsonl '"type":"tool_result","id":"[^"]*","name":"run_command","is_error":false,"approval":"flag","text":"133\\n\[exit status 0\]"'
expect_grep out.jsonl '"finish":"tool_calls"'
# the answer turn comes after the result and quotes it
sed -n '/"type":"tool_result"/,$p' "$TMP/out.jsonl" | grep '"type":"content"' | sed 's/.*"text":"\([^"]*\)".*/\1/' |
    tr -d '\n' >"$TMP/answer"
grep -q 133 "$TMP/answer" && pass || fail "the answer does not use the tool's result: '$(cat "$TMP/answer")'"
expect_grep out.jsonl '"type":"turn_end".*"finish":"stop"'

# the plain transcript as a user sees it, reasoning included
"$B" --model "$M" chat --prompt "How much is 67 plus 66?" --no-save --approve run_command --reasoning stdout \
    </dev/null >"$TMP/out.txt" 2>&1 && pass || fail "text chat failed: $(cat "$TMP/out.txt")"
cat "$TMP/out.txt"
expect_grep out.txt '67 plus 66\.'
expect_grep out.txt '\[tool call\] run_command'
expect_grep out.txt '\[tool result\] run_command: 133'
# the reply's last line is the answer, and it states the result
grep -v '^$' "$TMP/out.txt" | tail -n 1 >"$TMP/last.txt"
expect_grep last.txt '133'
# With no --model and no config, glmchat chats with the embedded demo model.
"$B" chat --prompt "How much is 67 plus 66?" --no-save --allow-tool run_command --output-format jsonl \
    >"$TMP/default.jsonl" 2>"$TMP/err"
[ $? -eq 0 ] && pass || fail "no --model: $(head -c 300 "$TMP/err")"
expect_grep default.jsonl '"type":"session"'
expect_grep default.jsonl '"type":"tool_call","id":"[^"]+","name":"run_command"'

finish
