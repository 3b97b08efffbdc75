#!/bin/bash
# tp_nccl_cli.sh: `--transport nccl` where it cannot run: a build without CUDA or without nccl.h,
# or the cpu backend, is refused by name before any worker is reached or any port is opened, on a
# head and on a worker; the option and the config key name nccl among the transports.
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/lib.sh"
G="$GLMCHAT_BIN"
MODEL="$GLMCHAT_SRCDIR/tests/fixtures/models/tiny-A"
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
[ -d "$MODEL" ] || { fail "fixture $MODEL is missing"; finish; }

# what this build says: no CUDA, CUDA without nccl.h, or NCCL built in (then the cpu backend is
# what is refused)
CONFIG_H="$GLMCHAT_BUILDDIR/config.h"
if grep -q '^#define HAVE_NCCL 1' "$CONFIG_H"; then
    WHY='--transport nccl needs --backend cuda \(its collectives run on the GPUs\); the cpu backend.s ranks use --transport tcp'
elif grep -q '^#define HAVE_CUDA 1' "$CONFIG_H"; then
    WHY='--transport nccl: this glmchat.s CUDA toolkit had no nccl.h when it was built; build it again with NCCL installed, or use --transport tcp'
else
    WHY='--transport nccl: this glmchat was built without CUDA \(the nccl transport runs on the GPUs\); build it with CUDA and NCCL, or use --transport tcp'
fi

expect_exit 0 "$G" --help
expect_grep out '--transport rdma\|tcp\|nccl'
expect_exit 0 "$G" worker --help
expect_grep out '--transport KIND +rdma, tcp or nccl'
expect_exit 2 "$G" worker --listen 127.0.0.1:0 --model "$MODEL" --transport infiniband
expect_grep err "option '--transport' takes rdma, tcp or nccl, not 'infiniband'"

# a worker refuses at start, before it listens
expect_exit 1 timeout 30 "$G" --backend cpu worker --listen 127.0.0.1:0 --model "$MODEL" --transport nccl
expect_grep err "$WHY"
grep -q 'listening on' "$TMP/err" && fail "the worker listened before refusing nccl" || pass

# a head refuses before reaching its workers: nothing listens at these ports
echo "1 5 9 200 17 33" >"$TMP/tokens"
expect_exit 1 timeout 30 "$G" --backend cpu --transport nccl --peer 127.0.0.1:9,127.0.0.1:10 logits \
    --model "$MODEL" --tokens-file "$TMP/tokens" --out "$TMP/refused.f32"
expect_grep err "$WHY"
grep -q 'cannot reach' "$TMP/err" && fail "the head tried its workers before refusing nccl" || pass
[ -e "$TMP/refused.f32" ] && fail "a refused head wrote logits" || pass

# the config file's transport key takes nccl and is refused the same way
mkdir -p "$XDG_CONFIG_HOME/glmchat"
printf 'transport = nccl\npeer = 127.0.0.1:9\n' >"$XDG_CONFIG_HOME/glmchat/config"
expect_exit 1 timeout 30 "$G" --backend cpu --db "$TMP/c.db" --model "$MODEL" chat --output-format jsonl \
    --max-tokens 3 --prompt "hi"
expect_grep err "$WHY"
printf 'transport = carrier-pigeon\n' >"$XDG_CONFIG_HOME/glmchat/config"
expect_exit 1 timeout 30 "$G" --backend cpu --db "$TMP/c.db" --model "$MODEL" chat --output-format jsonl \
    --max-tokens 3 --prompt "hi"
expect_grep err "config:1: 'transport' takes rdma, tcp or nccl, not 'carrier-pigeon'"

finish
