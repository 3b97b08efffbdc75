#!/bin/bash
# exl3_chat.sh: quantize -> chat end to end: a tiny model's experts quantized to EXL3 by
# `glmchat quantize`, then a scripted chat turn on the CPU engine, and dump-tensor on an expert.
. "$(dirname "$0")/lib.sh"
unset GLMCHAT_TEST_REPLIES GLMCHAT_TEST_REQUESTS
G=$GLMCHAT_BIN

expect_exit 0 "$G" mkmodel --out "$TMP/src" --preset tiny-exl3 --seed 5
# transformers' strict config classes refuse an int in a float field ("swiglu_limit": 10):
# mkmodel writes 10.0, and quantize turns a source's int 10 (the demo's config) into 10.0
expect_grep src/config.json '"swiglu_limit":[[:space:]]*10\.0,'
sed -i 's/"swiglu_limit":\([[:space:]]*\)10\.0,/"swiglu_limit":\110,/' "$TMP/src/config.json"
expect_grep src/config.json '"swiglu_limit":[[:space:]]*10,'
# 2 bits keeps the tile search short here; the Check suite test_exl3_engine quantizes at 4
expect_exit 0 "$G" quantize --in "$TMP/src" --out "$TMP/q" --bits 2
expect_grep out 'quantized 6 of'
expect_grep q/config.json '"quant_method":[[:space:]]*"exl3"'
expect_grep q/config.json '"swiglu_limit":[[:space:]]*10\.0,'

expect_exit 0 "$G" chat --model "$TMP/q" --backend cpu --max-tokens 8 --no-save --output-format jsonl --prompt "Hello, quantized model."
expect_grep out '"type":[[:space:]]*"turn_end"'
expect_grep out '"type":"done","finish":"(stop|length)".*"generated_tokens":[1-8],'

E=model.language_model.layers.1.mlp.experts.0.down_proj
expect_exit 0 "$G" dump-tensor --model "$TMP/q" --name "$E.weight" --out "$TMP/down.f32"
expect_grep out "$E.weight \\[128, 128\\] EXL3"
[ "$(stat -c %s "$TMP/down.f32")" -eq $((128 * 128 * 4)) ] && pass || fail "down.f32 size"
finish
