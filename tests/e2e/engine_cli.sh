#!/bin/bash
# engine_cli.sh: the engine's commands end to end: logits (one pass and prefill + decode),
# mkmodel (complete, deterministic, sharded), dump-tensor, and their errors.
. "$(dirname "$0")/lib.sh"
G=$GLMCHAT_BIN
FX=$GLMCHAT_SRCDIR/tests/fixtures/models/softplus-kpool1-hc1

expect_exit 0 "$G" logits --help
expect_grep out '^Usage: glmchat logits'
expect_exit 2 "$G" logits --model "$FX"
expect_grep err 'needs --model DIR, --tokens-file F and --out F.f32'

echo "5 17 200 3 3 9 101 44 2 7 250 11" >"$TMP/ids.txt"
expect_exit 0 "$G" logits --model "$FX" --tokens-file "$TMP/ids.txt" --out "$TMP/full.f32"
expect_empty err
[ "$(stat -c %s "$TMP/full.f32")" -eq $((12 * 256 * 4)) ] && pass || fail "full.f32 size"
expect_exit 0 "$G" --model "$FX" logits --tokens-file "$TMP/ids.txt" --prefill 5 --out "$TMP/c.f32"
[ "$(stat -c %s "$TMP/c.f32")" -eq $((12 * 256 * 4)) ] && pass || fail "c.f32 size"
expect_exit 2 "$G" logits --model "$FX" --tokens-file "$TMP/ids.txt" --prefill 13 --out "$TMP/x"
expect_grep err 'more than the 12 tokens'
echo "1 999 2" >"$TMP/bad.txt"
expect_exit 1 "$G" logits --model "$FX" --tokens-file "$TMP/bad.txt" --out "$TMP/x"
expect_grep err 'token id 999 at position 1 is outside the vocabulary'
expect_exit 1 "$G" --backend cuda logits --model "$FX" --tokens-file "$TMP/ids.txt" --out "$TMP/x"
expect_grep err 'no CUDA GPU is present here|built without CUDA'
expect_exit 1 "$G" logits --model "$TMP" --tokens-file "$TMP/ids.txt" --out "$TMP/x"
expect_grep err "config.json"

# mkmodel: a complete model directory, the same bytes for the same seed
expect_exit 0 "$G" mkmodel --out "$TMP/m1" --seed 3
expect_empty err
for f in config.json generation_config.json tokenizer.json model.safetensors; do
    [ -s "$TMP/m1/$f" ] && pass || fail "mkmodel wrote no $f"
done
expect_exit 0 grep -q '"<|endoftext|>"' "$TMP/m1/tokenizer.json"
expect_exit 0 grep -q '154855' "$TMP/m1/tokenizer.json"
expect_exit 0 grep -q '154829' "$TMP/m1/generation_config.json"
expect_exit 0 "$G" mkmodel --out "$TMP/m2" --seed 3
expect_exit 0 cmp "$TMP/m1/model.safetensors" "$TMP/m2/model.safetensors"
expect_exit 0 "$G" mkmodel --out "$TMP/m3" --seed 4
expect_exit 1 cmp -s "$TMP/m1/model.safetensors" "$TMP/m3/model.safetensors"
expect_exit 0 "$G" mkmodel --out "$TMP/m4" --seed 3 --shard-mb 8
[ -s "$TMP/m4/model.safetensors.index.json" ] && pass || fail "no index for a sharded model"
ls "$TMP"/m4/model-0000*-of-0000*.safetensors >/dev/null 2>&1 && pass || fail "no shards"
echo "154822 154824 154826 1 2 3 300 154827 5 6" >"$TMP/glm.txt"
expect_exit 0 "$G" logits --model "$TMP/m1" --tokens-file "$TMP/glm.txt" --prefill 4 --out "$TMP/a.f32"
expect_exit 0 "$G" logits --model "$TMP/m4" --tokens-file "$TMP/glm.txt" --prefill 4 --out "$TMP/b.f32"
expect_exit 0 cmp "$TMP/a.f32" "$TMP/b.f32"
[ "$(stat -c %s "$TMP/a.f32")" -eq $((10 * 154880 * 4)) ] && pass || fail "a.f32 size"
expect_exit 2 "$G" mkmodel --out "$TMP/m5" --preset huge
expect_grep err "unknown preset 'huge'"
expect_exit 2 "$G" mkmodel --out "$TMP/m5" --dtype f8
expect_exit 2 "$G" mkmodel

# dump-tensor: shape on stdout, float32 data
N=model.language_model.layers.1.self_attn.kv_b_proj.weight
expect_exit 0 "$G" dump-tensor --model "$FX" --name $N --out "$TMP/t.f32"
expect_grep out "^$N \[32, 16\] F32$"
[ "$(stat -c %s "$TMP/t.f32")" -eq $((32 * 16 * 4)) ] && pass || fail "t.f32 size"
expect_exit 0 "$G" dump-tensor --model "$TMP/m4" --name lm_head.weight --out "$TMP/h.f32"
expect_grep out '^lm_head.weight \[154880, 32\] F32$'
expect_exit 1 "$G" dump-tensor --model "$FX" --name no.such.tensor --out "$TMP/t.f32"
expect_grep err 'has no tensor no.such.tensor'
finish
