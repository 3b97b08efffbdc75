#!/bin/bash
# tp_worker_cli.sh: `glmchat worker` as a user meets it: usage errors, refusing a head with another
# model or other backend settings (a context limit, naming the difference), a head of the same
# model whose exchanges do not follow the model's forward told the ranks are out of step, a clean
# stop.
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/lib.sh"
G="$GLMCHAT_BIN"
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/tp_lib.sh"
PEER="$GLMCHAT_BUILDDIR/tests/tp/tp_peer"
MODEL="$GLMCHAT_SRCDIR/tests/fixtures/models/tiny-A"
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT

expect_exit 0 "$GLMCHAT_BIN" worker --help
expect_grep out '^usage: glmchat worker --listen HOST:PORT'
expect_exit 2 "$GLMCHAT_BIN" worker --model "$MODEL"
expect_grep err 'listen HOST:PORT is required'
expect_exit 2 "$GLMCHAT_BIN" worker --listen 127.0.0.1:0
expect_grep err 'model DIR is required'
expect_exit 1 "$GLMCHAT_BIN" worker --listen 127.0.0.1 --model "$MODEL"
expect_grep err "has no port"
expect_exit 1 "$GLMCHAT_BIN" worker --listen 127.0.0.1:0 --model "$TMP"
expect_grep err "cannot open .*config.json.*a model directory"

[ -d "$MODEL" ] || { fail "fixture $MODEL is missing"; finish; }
start_worker "$MODEL" # fails the test, saying why, when it does not listen
[ -n "$PORT" ] && pass

expect_exit 3 timeout 20 "$PEER" --role head --addr 127.0.0.1:$PORT --steps 1 --config-hash 5
expect_grep out "refused: the model's config.json differs: 0000000000000005 here, [0-9a-f]{16} on the worker"
# a glmchat head whose CPU backend keeps another context than the worker's: refused, both named
echo "1 5 9 200 17 33" >"$TMP/tokens"
GLMCHAT_CONTEXT=2048 expect_exit 1 "$GLMCHAT_BIN" --peer 127.0.0.1:$PORT logits --model "$MODEL" \
    --tokens-file "$TMP/tokens" --out "$TMP/refused.f32"
expect_grep err 'the context limit \(tokens\) differs: 2048 here, 4096 on the worker; give both the same --context \(or GLMCHAT_CONTEXT\)'
# a head whose CPU backend emulates the fp8 cache or q4 dense weights: refused, both named
expect_exit 1 "$GLMCHAT_BIN" --kv-cache fp8 --peer 127.0.0.1:$PORT logits --model "$MODEL" \
    --tokens-file "$TMP/tokens" --out "$TMP/refused.f32"
expect_grep err 'the cache and weight formats differ: fp8, bf16 dense weights here, f32, bf16 dense weights on the worker'
expect_exit 1 "$GLMCHAT_BIN" --dense q4 --peer 127.0.0.1:$PORT logits --model "$MODEL" \
    --tokens-file "$TMP/tokens" --out "$TMP/refused.f32"
expect_grep err 'the cache and weight formats differ: f32, q4 dense weights here, f32, bf16 dense weights on the worker; .*--dense \(or GLMCHAT_DENSE\)'
# same settings: served (tiny-A's max_position_embeddings is 4096, the CPU caches are f32)
expect_exit 0 "$GLMCHAT_BIN" --peer 127.0.0.1:$PORT logits --model "$MODEL" --tokens-file "$TMP/tokens" \
    --out "$TMP/served.f32"
# tp_peer sends the settings a CPU rank of tiny-A would (a 4096-token context, f32 caches)
expect_exit 4 timeout 20 "$PEER" --role head --addr 127.0.0.1:$PORT --steps 1 --model "$MODEL" \
    --context 4096 --kv-format 0
expect_grep out 'connected to .* over tcp'
expect_grep out 'FAILED after 0 steps: .*the ranks are out of step: exchange [0-9]+ of [0-9]+ bytes here'

kill -TERM $worker
for _ in $(seq 100); do kill -0 $worker 2>/dev/null || break; sleep 0.05; done
wait $worker
[ $? -eq 0 ] && pass || fail "worker did not stop cleanly on SIGTERM"
cp "$TMP/worker.err" "$TMP/w.err"
expect_grep w.err 'refused the head at 127.0.0.1:[0-9]+: the model.s config.json differs'
expect_grep w.err 'refused the head at 127.0.0.1:[0-9]+: the context limit \(tokens\) differs: 4096 here, 2048 on the head'
expect_grep w.err 'serving the head at'
expect_grep w.err 'glmchat worker: stopped'

finish
