#!/bin/bash
# engine_settings.sh: --context and --kv-cache end to end: their checks, the precedence
# flag > GLMCHAT_* variable (and the older GLMCHAT_CUDA_* names) > config file > default, the
# context's refusals on the CPU backend, a reply stopping where the context is full, the CPU
# backend emulating the fp8 and bf16 caches (other logits, the same for the same format however
# it is asked for), and --dense with GLMCHAT_DENSE and the older GLMCHAT_CUDA_DENSE.
. "$(dirname "$0")/lib.sh"
G=$GLMCHAT_BIN
FX=$GLMCHAT_SRCDIR/tests/fixtures/models/softplus-kpool1-hc1
unset GLMCHAT_CONTEXT GLMCHAT_CUDA_CONTEXT GLMCHAT_KV_CACHE GLMCHAT_CUDA_KV GLMCHAT_DENSE GLMCHAT_CUDA_DENSE

# the flags' own checks: usage errors naming the flag and the value
expect_exit 2 "$G" --context abc list
expect_grep err "option '--context' takes a whole number from 1 to 1073741824, not 'abc'"
expect_exit 2 "$G" list --context=0
expect_grep err "'--context' takes a whole number from 1 to 1073741824, not '0'"
expect_exit 2 "$G" --kv-cache fp4 list
expect_grep err "option '--kv-cache' takes fp8, bf16 or f32, not 'fp4'"
expect_exit 2 "$G" list --kv-cache
expect_grep err "'--kv-cache' needs a value"
expect_exit 0 "$G" --help
expect_grep out '--context N'
expect_grep out '--kv-cache fp8\|bf16\|f32'
expect_grep out '--dense bf16\|q4'
expect_exit 2 "$G" --dense q3 list
expect_grep err "option '--dense' takes bf16 or q4, not 'q3'"

# logits (no config file): flag > variable > older variable > the model's window
echo "5 17 200 3 3 9 101 44 2 7 250 11" >"$TMP/ids.txt"
logits() { expect_exit "$1" "$G" "${@:2}" logits --model "$FX" --tokens-file "$TMP/ids.txt" --out "$TMP/l.f32"; }
logits 1 --context 8
expect_grep err "12 more tokens after the 0 held would make 12, over the context of 8 tokens"
logits 0 --context 12
GLMCHAT_CONTEXT=8 logits 1
expect_grep err "over the context of 8 tokens"
GLMCHAT_CUDA_CONTEXT=8 logits 1
expect_grep err "over the context of 8 tokens"
GLMCHAT_CONTEXT=12 GLMCHAT_CUDA_CONTEXT=8 logits 0
GLMCHAT_CONTEXT=8 logits 0 --context 12
GLMCHAT_CONTEXT=lots logits 1
expect_grep err "GLMCHAT_CONTEXT: 'context' takes a whole number from 1 to 1073741824, not 'lots'"
# prefill then decode: the decode steps are counted too
expect_exit 1 "$G" --context 11 logits --model "$FX" --tokens-file "$TMP/ids.txt" --prefill 4 --out "$TMP/l.f32"
expect_grep err "1 more tokens after the 11 held would make 12, over the context of 11"
# the CPU backend's cache formats: each its own logits, the same whichever way it was asked for
same() { cmp -s "$1" "$2" && pass || fail "$1 and $2 differ"; }
differ() { cmp -s "$1" "$2" && fail "$1 and $2 are equal" || pass; }
logits 0 --backend cpu --kv-cache f32 && cp "$TMP/l.f32" "$TMP/f32.f32"
logits 0 --backend cpu --kv-cache bf16 && cp "$TMP/l.f32" "$TMP/bf16.f32"
logits 0 --backend cpu --kv-cache fp8 && cp "$TMP/l.f32" "$TMP/fp8.f32"
differ "$TMP/f32.f32" "$TMP/bf16.f32"
differ "$TMP/f32.f32" "$TMP/fp8.f32"
differ "$TMP/bf16.f32" "$TMP/fp8.f32"
GLMCHAT_CUDA_KV=fp8 logits 0 --backend cpu
same "$TMP/l.f32" "$TMP/fp8.f32"
GLMCHAT_KV_CACHE=f32 GLMCHAT_CUDA_KV=fp8 logits 0 --backend cpu
same "$TMP/l.f32" "$TMP/f32.f32"
logits 0 --backend cpu
same "$TMP/l.f32" "$TMP/f32.f32"
# --dense and its variables (this fixture's widths are not multiples of 128: q4 keeps them)
logits 0 --backend cpu --dense q4
GLMCHAT_DENSE=q5 logits 1 --backend cpu
expect_grep err "GLMCHAT_DENSE: 'dense' takes bf16 or q4, not 'q5'"
GLMCHAT_CUDA_DENSE=q5 logits 1 --backend cpu
expect_grep err "GLMCHAT_CUDA_DENSE: 'dense' takes bf16 or q4, not 'q5'"
GLMCHAT_CUDA_DENSE=q5 logits 0 --backend cpu --dense bf16
GLMCHAT_KV_CACHE=fp16 logits 1 --backend cpu
expect_grep err "GLMCHAT_KV_CACHE: 'kv_cache' takes fp8, bf16 or f32, not 'fp16'"
# the variables the engine and its kernels used to read themselves: now glmchat reads them
# (app/config.c), checked whichever backend runs, and the engine's lines come back on stderr
GLMCHAT_CUDA_VERBOSE=1 logits 0 --backend cpu --context 64
expect_grep err "^glmchat: engine: cpu backend, context 64 tokens, kv cache f32, dense bf16, drafting off"
GLMCHAT_VERBOSE=off GLMCHAT_CUDA_VERBOSE=1 logits 0 --backend cpu
[ -s "$TMP/err" ] && fail "verbose off still logged: $(cat "$TMP/err")" || pass
GLMCHAT_CUDA_GEMM=auto logits 1 --backend cpu
expect_grep err "GLMCHAT_CUDA_GEMM: 'cuda_gemm' takes fixed, show, nosplit, cublas, three or onepart, not 'auto'"
GLMCHAT_RDMA_GID_INDEX=3x logits 1 --backend cpu
expect_grep err "GLMCHAT_RDMA_GID_INDEX: 'rdma_gid_index' takes a whole number from 0 to 255, not '3x'"
GLMCHAT_CUDA_GRAPH=0 GLMCHAT_CUDA_PDL=0 GLMCHAT_CUDA_KV_INDEX=f32 GLMCHAT_RDMA_GID_INDEX=3 \
    GLMCHAT_RDMA_HCA=mlx5_0 logits 0 --backend cpu
same "$TMP/l.f32" "$TMP/f32.f32"
# the removed cuda_attend (its tensor-core kernel lost its timed run): its variable names no key
# now, and like any such GLMCHAT_* variable it is read by nothing (a value it once refused passes)
GLMCHAT_CUDA_ATTEND=fast logits 0 --backend cpu
same "$TMP/l.f32" "$TMP/f32.f32"

# chat (the embedded demo model, greedy): its prompt below renders to 15 tokens
mkdir -p "$XDG_CONFIG_HOME/glmchat"
CONFIG=$XDG_CONFIG_HOME/glmchat/config
chat() {
    expect_exit "$1" "$G" --backend cpu "${@:2}" chat --no-save --output-format jsonl --think off \
        --max-tokens 50 --prompt "How much is 2 plus 2?"
}
printf 'temperature = 0\ncontext = 10\n' >"$CONFIG"
chat 1
expect_grep err "your message was not sent: it is 15 tokens, and the context holds 10 \(--context, context in the config"
# the variable beats the file: 5 tokens of room, the reply stops there
GLMCHAT_CONTEXT=20 chat 0
expect_grep out '"type":"done","finish":"length","prompt_tokens":15,"reused_tokens":0,"generated_tokens":5,'
GLMCHAT_CUDA_CONTEXT=20 chat 0
expect_grep out '"generated_tokens":5,'
# the flag beats the variable
GLMCHAT_CONTEXT=20 chat 0 --context 18
expect_grep out '"finish":"length","prompt_tokens":15,"reused_tokens":0,"generated_tokens":3,'
GLMCHAT_CONTEXT=20 chat 1 --context 15
expect_grep err "your message was not sent: it is 15 tokens, and the context holds 15"
# text mode: said once, and a cut at the context is told from one at --max-tokens
expect_exit 1 "$G" --backend cpu --context 15 chat --no-save --think off --prompt "How much is 2 plus 2?"
[ "$(grep -c 'it is 15 tokens, and the context holds' "$TMP/err")" -eq 1 ] && pass || fail "the refusal was not said once: $(cat "$TMP/err")"
expect_exit 0 "$G" --backend cpu --context 17 chat --no-save --think off --max-tokens 50 --prompt "How much is 2 plus 2?"
expect_grep err "the reply was cut where the context window of 17 tokens is full \(--context\)"
expect_exit 0 "$G" --backend cpu --context 400 chat --no-save --think off --max-tokens 1 --prompt "How much is 2 plus 2?"
expect_grep err "the reply was cut at the token limit \(--max-tokens 1\)"
# no --max-tokens: generation_config.json's max_new_tokens, else 32768, each cut to the context,
# and the message names the limit that cut (a copy of the demo model with its own generation config)
DEMO=$(dirname "$G")/models/demo
mkdir "$TMP/demo2" && ln -s "$DEMO"/* "$TMP/demo2/" && rm "$TMP/demo2/generation_config.json"
printf '{"eos_token_id": [154820, 154827, 154829], "max_new_tokens": 3, "do_sample": false}\n' \
    >"$TMP/demo2/generation_config.json"
printf 'temperature = 0\n' >"$CONFIG"
ask() { expect_exit 0 "$G" --backend cpu --model "$TMP/demo2" "$@" chat --no-save --think off --prompt "How much is 2 plus 2?"; }
ask --context 400
expect_grep err "cut at the token limit of 3 \(max_new_tokens in the model's generation_config.json; --max-tokens N to change it\)"
ask --context 17
expect_grep err "the reply was cut where the context window of 17 tokens is full"
printf 'temperature = 0\nmax_tokens = 2\n' >"$CONFIG"
ask --context 400
expect_grep err "cut at the token limit of 2 \(max_tokens in the config file or GLMCHAT_MAX_TOKENS\)"
printf 'temperature = 0\n' >"$CONFIG"
printf '{"eos_token_id": [154820, 154827, 154829], "do_sample": false}\n' >"$TMP/demo2/generation_config.json"
ask --context 20
expect_grep err "the reply was cut where the context window of 20 tokens is full"
expect_exit 0 "$G" --backend cpu --model "$TMP/demo2" --context 20 chat --no-save --think off \
    --output-format jsonl --prompt "How much is 2 plus 2?"
expect_grep out '"type":"done","finish":"length",.*"generated_tokens":5,.*"max_tokens":5,"limit":"context"'
expect_exit 0 "$G" --backend cpu --model "$TMP/demo2" --context 400 chat --no-save --think off \
    --output-format jsonl --max-tokens 2 --prompt "How much is 2 plus 2?"
expect_grep out '"max_tokens":2,"limit":"max_tokens"'
GLMCHAT_CONTEXT=x chat 1
expect_grep err "GLMCHAT_CONTEXT: 'context' takes a whole number from 1 to 1073741824, not 'x'"
printf 'temperature = 0\ncontext = 0\n' >"$CONFIG"
chat 1
expect_grep err "config:2: 'context' takes a whole number from 1 to 1073741824, not '0'"
printf 'temperature = 0\nkv_cache = bf16\ndense = q4\n' >"$CONFIG"
chat 0
expect_grep out '"type":"done"'
GLMCHAT_CUDA_DENSE=q9 chat 1
expect_grep err "GLMCHAT_CUDA_DENSE: 'dense' takes bf16 or q4, not 'q9'"
GLMCHAT_KV_CACHE=f32 chat 0
chat 0 --kv-cache f32
GLMCHAT_CUDA_KV=fp8 chat 0 --kv-cache f32
expect_grep out '"type":"done"' # the flag's f32 won: no refusal
printf 'temperature = 0\nkv_cache = fp16\n' >"$CONFIG"
chat 1
expect_grep err "config:2: 'kv_cache' takes fp8, bf16 or f32, not 'fp16'"
# the dev keys in the config file: the scripted chat prints the engine's lines on stderr
printf 'temperature = 0\nverbose = on\ncuda_graph = off\n' >"$CONFIG"
chat 0
expect_grep err "^glmchat: engine: cpu backend, context"
expect_grep out '"type":"done"'
printf 'temperature = 0\ncuda_attend = mma\n' >"$CONFIG"
chat 1
expect_grep err "config:2: unknown key 'cuda_attend'; the keys are: "
printf 'temperature = 0\ncuda_graph = maybe\n' >"$CONFIG"
chat 1
expect_grep err "config:2: 'cuda_graph' takes on or off, not 'maybe'"
finish
