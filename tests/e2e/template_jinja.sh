#!/bin/bash
# template_jinja.sh: glmchat render equals jinja2's rendering of the checkpoint's chat_template.jinja
# (both public revisions carried in tests/fixtures/text) for every request of a corpus, with
# clear_thinking off and on; and the template revision check: a model directory whose template is
# another revision is named once (file, hash, what glmchat renders instead), by render and by chat.
. "$(dirname "$0")/lib.sh"
B=$GLMCHAT_BIN
FX=$GLMCHAT_SRCDIR/tests/fixtures/text
TPL=$FX/glm-5.3-flash.chat_template.jinja
mkdir -p "$TMP/model"
# expect_render CODE: glmchat render of $TMP/r (stdin) in $TMP/model exits CODE; out and err kept
expect_render() {
    "$B" render --model "$TMP/model" <"$TMP/r" >"$TMP/out" 2>"$TMP/err"
    local got=$?
    [ "$got" -eq "$1" ] && pass || fail "render of $(head -c 300 "$TMP/r") exited $got, expected $1: $(head -c 400 "$TMP/err")"
}

python3 "$GLMCHAT_SRCDIR/tests/e2e/template_jinja.py" "$B" "$GLMCHAT_SRCDIR" "$TMP/model" "$TPL" \
    "$FX/glm-5.3-flash-nvidia.chat_template.jinja" >"$TMP/out" 2>"$TMP/err" && pass ||
    fail "render differs from jinja2: $(tail -c 1500 "$TMP/err")"
cat "$TMP/out"

req='{"messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1", "reasoning_content": "r1"}, {"role": "user", "content": "q2"}]'
# the request's clear_thinking field; chat_template_kwargs' wins; a value that is not a boolean is refused
echo "$req, \"clear_thinking\": true}" >"$TMP/r"
expect_render 0
expect_grep out '<\|user\|>q1<\|assistant\|><think></think>a1<\|user\|>q2'
echo "$req, \"clear_thinking\": true, \"chat_template_kwargs\": {\"clear_thinking\": false}}" >"$TMP/r"
expect_render 0
expect_grep out '<think>r1</think>a1'
echo "$req, \"clear_thinking\": \"yes\"}" >"$TMP/r"
expect_render 1
expect_grep err '"clear_thinking" must be true or false'
# an effort the template does not name is refused by name
echo "$req, \"reasoning_effort\": \"ultra\"}" >"$TMP/r"
expect_render 1
expect_grep err 'reasoning_effort "ultra" is not one the template knows; give none, minimal, low, medium, high, xhigh or max'

# the template revision check, through render (stderr; the prompt is unchanged)
echo "$req}" >"$TMP/r"
cp "$TPL" "$TMP/model/chat_template.jinja"
expect_render 0
[ -s "$TMP/err" ] && fail "a known revision was named: $(cat "$TMP/err")" || pass
{ cat "$TPL"; echo "{# edited #}"; } >"$TMP/model/chat_template.jinja"
SUM=$(sha256sum "$TMP/model/chat_template.jinja" | cut -d' ' -f1)
expect_render 0
expect_grep err "the model's chat template $TMP/model/chat_template.jinja \(sha256 $SUM, 11097 bytes\) is not a revision glmchat implements; glmchat renders its own GLM-5.3-Flash template instead"
expect_grep out '^\[gMASK\]<sop>'
# tokenizer_config.json's chat_template (a string, or the "default" of a list) when there is no .jinja
rm "$TMP/model/chat_template.jinja"
python3 -c 'import json,sys; print(json.dumps({"chat_template": open(sys.argv[1]).read()}))' "$TPL" \
    >"$TMP/model/tokenizer_config.json"
expect_render 0
[ -s "$TMP/err" ] && fail "a known revision in tokenizer_config.json was named: $(cat "$TMP/err")" || pass
echo '{"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": "{{ messages }}"}]}' \
    >"$TMP/model/tokenizer_config.json"
SUM=$(printf '%s' '{{ messages }}' | sha256sum | cut -d' ' -f1)
expect_render 0
expect_grep err "chat template $TMP/model/tokenizer_config.json \(chat_template\) \(sha256 $SUM, 14 bytes\)"
echo '{"chat_template": ' >"$TMP/model/tokenizer_config.json"
expect_render 0
expect_grep err "could not be checked: $TMP/model/tokenizer_config.json: not valid JSON"

# through the engine: chat says it once, before the reply (a copy of the demo model)
DEMO=$(dirname "$B")/models/demo
mkdir "$TMP/demo2" && ln -s "$DEMO"/* "$TMP/demo2/"
rm -f "$TMP/demo2/chat_template.jinja"
echo '{{ messages }}' >"$TMP/demo2/chat_template.jinja"
expect_exit 0 "$B" --backend cpu --model "$TMP/demo2" chat --no-save --think off --max-tokens 3 \
    --prompt "How much is 2 plus 2?"
[ "$(grep -c "is not a revision glmchat implements" "$TMP/err")" -eq 1 ] && pass ||
    fail "chat did not name the template once: $(cat "$TMP/err")"
expect_grep err "the model's chat template $TMP/demo2/chat_template.jinja \(sha256 "
finish
