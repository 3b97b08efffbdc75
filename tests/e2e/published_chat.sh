#!/bin/bash
# published_chat.sh: `glmchat mkmodel --like` writes the published checkpoints' structure (EXL3
# 4-bit and official FP8), and glmchat chats one token on each.
. "$(dirname "$0")/lib.sh"
unset GLMCHAT_TEST_REPLIES GLMCHAT_TEST_REQUESTS
G=$GLMCHAT_BIN

expect_exit 0 "$G" mkmodel --out "$TMP/e" --preset tiny --like exl3-published
[ -f "$TMP/e/model.safetensors.index.json" ] && pass || fail "no index"
[ "$(ls "$TMP/e"/model-*-of-*.safetensors | wc -l)" -ge 2 ] && pass || fail "not sharded"
expect_grep e/config.json '"head_bits":[[:space:]]*16'
expect_grep e/config.json '"scope":[[:space:]]*"glm53_routed_experts_only"'
expect_grep e/config.json '"linear_attn_config"'
expect_grep e/model.safetensors.index.json 'layers\.8\.mlp\.experts\.0\.gate_proj\.mcg'
expect_grep e/model.safetensors.index.json 'model\.visual\.patch_embed\.proj\.weight'
expect_exit 0 "$G" chat --model "$TMP/e" --backend cpu --max-tokens 1 --no-save --output-format jsonl --prompt "Hello."
expect_grep out '"type":"done","finish":"(stop|length)".*"generated_tokens":1,'

expect_exit 0 "$G" mkmodel --out "$TMP/f" --preset tiny --like fp8-official
expect_grep f/config.json '"quant_method":[[:space:]]*"fp8"'
expect_grep f/model.safetensors.index.json 'layers\.3\.self_attn\.q_a_proj\.weight_scale_inv'
expect_exit 0 "$G" chat --model "$TMP/f" --backend cpu --max-tokens 1 --no-save --output-format jsonl --prompt "Hello."
expect_grep out '"type":"done","finish":"(stop|length)".*"generated_tokens":1,'

expect_exit 2 "$G" mkmodel --out "$TMP/x" --preset tiny --like gguf
expect_grep err "unknown layout 'gguf'"
finish
