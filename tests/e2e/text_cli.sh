#!/bin/sh
# text_cli.sh: glmchat tokenize / detokenize / render as a user runs them: round trips, --lines,
# invalid UTF-8 input, byte-exact --raw, rendered prompts, and clear errors with the right exit codes.
. "$GLMCHAT_SRCDIR/tests/e2e/lib.sh"
FIX="$GLMCHAT_SRCDIR/tests/fixtures/text"
T="$FIX/glm-bpe.tokenizer.json"
B="$GLMCHAT_BIN"

printf 'Hello, wörld! 你好 🙂 <|user|>x</think>\n\n  42 1234567\n' >"$TMP/in.txt"
"$B" tokenize --tokenizer "$T" <"$TMP/in.txt" >"$TMP/ids" 2>"$TMP/err" && pass || fail "tokenize failed: $(cat "$TMP/err")"
grep -Eq '^[0-9]+( [0-9]+)*$' "$TMP/ids" && pass || fail "ids line malformed: $(cat "$TMP/ids")"
grep -Eq ' 154827 ' "$TMP/ids" && pass || fail "<|user|> is not id 154827: $(cat "$TMP/ids")"
"$B" detokenize --tokenizer "$T" <"$TMP/ids" >"$TMP/back" && cmp -s "$TMP/in.txt" "$TMP/back" && pass ||
    fail "tokenize | detokenize is not the identity"

# --lines: one output line per input line, each equal to encoding that line alone
"$B" tokenize --tokenizer "$T" --lines <"$TMP/in.txt" >"$TMP/lines"
[ "$(wc -l <"$TMP/lines")" -eq 3 ] && pass || fail "--lines gave $(wc -l <"$TMP/lines") lines, expected 3"
printf '  42 1234567' | "$B" tokenize --tokenizer "$T" >"$TMP/last"
[ "$(sed -n 3p "$TMP/lines")" = "$(cat "$TMP/last")" ] && pass || fail "--lines line 3 differs from encoding it alone"

# invalid UTF-8 reads as U+FFFD per maximal invalid subpart (Python's errors='replace')
printf 'a\377b\355\240\200c' | "$B" tokenize --tokenizer "$T" >"$TMP/bad"
printf 'a\357\277\275b\357\277\275\357\277\275\357\277\275c' | "$B" tokenize --tokenizer "$T" >"$TMP/fixed"
cmp -s "$TMP/bad" "$TMP/fixed" && pass || fail "invalid UTF-8 is not read as its U+FFFD repair"

# decode: an id whose bytes are half a character; --raw keeps the byte, the default repairs it
id=$(printf '\303' | "$B" tokenize --tokenizer "$T")
[ -n "$id" ] && pass || fail "no id for a lone byte"
echo "$(printf '\303\251' | "$B" tokenize --tokenizer "$T")" | "$B" detokenize --tokenizer "$T" --raw >"$TMP/raw"
[ "$(od -An -tx1 "$TMP/raw" | tr -d ' \n')" = "c3a9" ] && pass || fail "--raw is not byte-exact"

# render: the prompt GLM sees (architecture.md 4.2 examples)
echo '{"messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Hi"}]}' >"$TMP/r1"
mkdir -p "$TMP/model" && cp "$T" "$TMP/model/tokenizer.json"
"$B" render --model "$TMP/model" <"$TMP/r1" >"$TMP/p1"
[ "$(cat "$TMP/p1")" = '[gMASK]<sop><|system|>Reasoning Effort: Max<|system|>You are helpful.<|user|>Hi<|assistant|><think>' ] &&
    pass || fail "render system+user: $(cat "$TMP/p1")"
echo '{"messages":[{"role":"user","content":"Hi"}],"reasoning_effort":"none"}' |
    "$B" --model "$TMP/model" render >"$TMP/p2"
[ "$(cat "$TMP/p2")" = '[gMASK]<sop><|user|>Hi<|assistant|><think></think>' ] && pass || fail "thinking off: $(cat "$TMP/p2")"
"$B" render --model "$TMP/model" --ids <"$TMP/r1" >"$TMP/pids"
"$B" tokenize --tokenizer "$T" <"$TMP/p1" | cmp -s - "$TMP/pids" && pass || fail "render --ids differs from tokenize"

# errors: exit 1 with a message naming the problem, exit 2 for usage
"$B" tokenize --tokenizer "$TMP/none.json" </dev/null >"$TMP/out" 2>"$TMP/err"
[ $? -eq 1 ] && grep -q 'none.json' "$TMP/err" && pass || fail "missing tokenizer: $(cat "$TMP/err")"
echo '1 2 999999999' | "$B" detokenize --tokenizer "$T" >"$TMP/out" 2>"$TMP/err"
[ $? -eq 1 ] && grep -q '999999999' "$TMP/err" && pass || fail "bad id: $(cat "$TMP/err")"
echo '{"messages": [' | "$B" render --model "$TMP/model" >"$TMP/out" 2>"$TMP/err"
[ $? -eq 1 ] && grep -q 'not valid JSON' "$TMP/err" && pass || fail "bad request JSON: $(cat "$TMP/err")"
echo '{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"[1]"}}]}]}' |
    "$B" render --model "$TMP/model" >"$TMP/out" 2>"$TMP/err"
[ $? -eq 1 ] && grep -q 'JSON object' "$TMP/err" && pass || fail "non-object arguments: $(cat "$TMP/err")"
# a request the template refuses is told apart from one that is not JSON (glm_render_request's
# statuses): each gets its own sentence
grep -q 'render: cannot render this request: ' "$TMP/err" && ! grep -q 'not valid JSON' "$TMP/err" &&
    pass || fail "a refused request reads as bad JSON: $(cat "$TMP/err")"
echo '{"messages": [' | "$B" render --model "$TMP/model" 2>&1 >/dev/null |
    grep -q '^glmchat: render: the request on stdin is not valid JSON: ' && pass ||
    fail "bad JSON is not named as such"
expect_exit 2 "$B" tokenize
expect_exit 2 "$B" render
expect_exit 2 "$B" detokenize --tokenizer "$T" --bogus
expect_exit 0 "$B" tokenize --help
expect_grep out 'Usage: glmchat tokenize'
expect_exit 0 "$B" render --help
expect_exit 0 "$B" detokenize --help
finish
