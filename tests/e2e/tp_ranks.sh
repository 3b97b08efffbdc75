#!/bin/bash
# tp_ranks.sh: the model split among 2, 3 and 4 real processes over TCP loopback (a head and its
# workers, star all-gathers through the head): rank 0's logits match one rank's within float32
# rounding and equal every worker's bit for bit (tiny-A: 4 heads, so 3 ranks take 2, 1, 1); greedy
# chats reply as one rank does; workers re-split for a head of another size; a worker dying stops
# the others; rdma, repeated and empty addresses and too many ranks are refused by name.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
unset GLMCHAT_TEST_REPLIES GLMCHAT_TEST_REQUESTS
G=$GLMCHAT_BIN
A="$GLMCHAT_SRCDIR/tests/fixtures/models/tiny-A"
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT

. "$(dirname "$0")/tp_lib.sh"

[ -d "$A" ] || { fail "fixture $A is missing"; finish; }
# Seed 3: random tiny models amplify float32 rounding differently; with seed 11 even the two-rank
# path (unchanged) is 5.9e-5 off one rank, past the 1e-5 the split is held to; seed 3 stays near 3e-6.
M="$TMP/model"
expect_exit 0 "$G" mkmodel --out "$M" --preset tiny-tp4 --seed 3
for n in 2 3 4; do
    check_n_rank_logits $n "$A" "$n ranks' logits against one rank's (tiny-A)"
    echo "tiny-A, $n ranks: $(cat "$TMP/diff.txt")"
    check_n_rank_logits $n "$M" "$n ranks' logits against one rank's (mkmodel tiny-tp4)"
    echo "tiny-tp4, $n ranks: $(cat "$TMP/diff.txt")"
done

# Greedy replies, one rank and three (the workers from the config's `peer = a,b`) and four
# (--peer once per worker).
mkdir -p "$XDG_CONFIG_HOME/glmchat"
printf 'temperature = 0\n' >"$XDG_CONFIG_HOME/glmchat/config"
expect_exit 0 "$G" --db "$TMP/one.db" --model "$M" chat --output-format jsonl --max-tokens 30 --think off --prompt "Tell me a story."
cp "$TMP/out" "$TMP/chat1.jsonl"
printf 'Go on.\n' >"$TMP/turns"
"$G" --db "$TMP/one.db" --model "$M" chat -c --output-format jsonl --max-tokens 15 <"$TMP/turns" >"$TMP/chat1b.jsonl" 2>"$TMP/err"
[ $? -eq 0 ] && pass || fail "a two-turn chat on one rank failed: $(cat "$TMP/err")"
start_workers 3 "$M"
printf 'temperature = 0\npeer = %s\n' "$PEERS" >"$XDG_CONFIG_HOME/glmchat/config"
expect_exit 0 "$G" --db "$TMP/three.db" --model "$M" chat --output-format jsonl --max-tokens 30 --think off --prompt "Tell me a story."
cp "$TMP/out" "$TMP/chat3.jsonl"
"$G" --db "$TMP/three.db" --model "$M" chat -c --output-format jsonl --max-tokens 15 <"$TMP/turns" >"$TMP/chat3b.jsonl" 2>"$TMP/err"
[ $? -eq 0 ] && pass || fail "a two-turn chat on three ranks failed: $(cat "$TMP/err")"
stop_workers
printf 'temperature = 0\n' >"$XDG_CONFIG_HOME/glmchat/config"
start_workers 4 "$M"
set -- ${PEERS//,/ }
expect_exit 0 "$G" --db "$TMP/four.db" --model "$M" --peer $1 --peer $2 --peer $3 chat --output-format jsonl --max-tokens 30 --think off --prompt "Tell me a story."
cp "$TMP/out" "$TMP/chat4.jsonl"
check_py "three and four ranks reply as one rank does" '
import json, os
tmp = os.environ["TMP"]
def reply(name):
    ev = [json.loads(l) for l in open(tmp + "/" + name)]
    return "".join(e.get("text", "") for e in ev if e["type"] in ("content", "reasoning"))
for one, other in (("chat1", "chat3"), ("chat1b", "chat3b"), ("chat1", "chat4")):
    a, b = reply(one + ".jsonl"), reply(other + ".jsonl")
    if not a: print("FAIL: the one-rank reply %s is empty" % one)
    if a != b: print("FAIL: %s %r != %s %r" % (one, a, other, b))
'

# The same workers for a head of three ranks, then of two: each re-splits as the head asks.
echo "1 5 9 200 17 33 2 7 100 45 3 8 11 64 300 12" >"$TMP/tokens"
expect_exit 0 "$G" logits --model "$M" --threads 1 --tokens-file "$TMP/tokens" --prefill 9 --out "$TMP/one.f32"
expect_exit 0 "$G" --peer "$1,$2" logits --model "$M" --threads 1 --tokens-file "$TMP/tokens" --prefill 9 --out "$TMP/r3.f32"
expect_exit 0 "$G" --peer "$1" logits --model "$M" --threads 1 --tokens-file "$TMP/tokens" --prefill 9 --out "$TMP/r2.f32"
stop_workers
check_py "workers re-split for heads of three and two ranks" '
import os, struct
tmp = os.environ["TMP"]
def f32(name):
    b = open(tmp + "/" + name, "rb").read()
    return struct.unpack("<%df" % (len(b) // 4), b)
one = f32("one.f32")
scale = max(abs(x) for x in one)
for name in ("r3.f32", "r2.f32"):
    got = f32(name)
    if len(got) != len(one) or max(abs(x - y) for x, y in zip(one, got)) / scale > 1e-5: print("FAIL:", name)
logs = [open(tmp + "/rank%d.err" % k).read() for k in (1, 2)]
for text in ("as rank 1 of 4", "rank 1 of 3: splitting", "as rank 1 of 3", "rank 1 of 2: splitting", "as rank 1 of 2"):
    if text not in logs[0]: print("FAIL: rank 1 log lacks %r: %s" % (text, logs[0]))
if "as rank 2 of 3" not in logs[1]: print("FAIL: rank 2 log:", logs[1])
'

# A worker dies mid-turn among three: the head stops with a clear error, the other worker is
# told and serves the next head (with a new worker in the dead one's place). The random model's
# replies end at a stop token after a few tokens; seed 56 makes this one 300-odd tokens, and the
# worker is killed as soon as both serve the head (during the prefill or the first tokens): killed
# after the first token instead, a short reply could end before the kill (a CI run saw it).
start_workers 3 "$M"
set -- ${PEERS//,/ }
read -r first second <<<"$workers"
"$G" --db "$TMP/kill.db" --model "$M" --peer "$PEERS" chat --output-format jsonl --max-tokens 100000 \
    --think off --seed 56 --prompt "Keep talking." >"$TMP/kill.out" 2>"$TMP/kill.err" &
head_pid=$!
for _ in $(seq 1000); do
    grep -q "serving the head" "$TMP/rank1.err" && grep -q "serving the head" "$TMP/rank2.err" && break
    sleep 0.02
done
kill -9 $second
grep -q '"finish":"stop"' "$TMP/kill.out" && fail "the reply had ended before the worker was killed: $(tail -c 300 "$TMP/kill.out")"
for _ in $(seq 300); do kill -0 $head_pid 2>/dev/null || break; sleep 0.05; done
if kill -0 $head_pid 2>/dev/null; then fail "the head still runs 15 s after a worker died"; kill -9 $head_pid; fi
wait $head_pid
rc=$?
[ $rc -eq 1 ] && pass || fail "head exited $rc after a worker died, not 1: $(cat "$TMP/kill.err")"
cp "$TMP/kill.err" "$TMP/err"
expect_grep err "worker at $2"
for _ in $(seq 300); do grep -q "waiting for\|reported" "$TMP/rank1.err" && break; sleep 0.05; done
cp "$TMP/rank1.err" "$TMP/err"
if ! grep -Eq "the head at [0-9.:]+ reported: the head lost worker 2 \(rank 2, at $2\)" "$TMP/err"; then
    # (a loaded CI run once found worker 1's own "exchange 2 with the head ... failed" here, its
    # cause cut off: the whole logs, to tell which rank waited on which)
    fail "worker 1 was not told the head lost worker 2. Worker 1: $(cat "$TMP/rank1.err") Head: $(cat "$TMP/kill.err")"
else
    pass
fi
WORKER_NAME=rank2b start_worker "$M"
expect_exit 0 "$G" --peer "$1,127.0.0.1:$PORT" logits --model "$M" --threads 1 --tokens-file "$TMP/tokens" --prefill 9 --out "$TMP/again.f32"
kill -TERM $first $worker 2>/dev/null
wait $first $worker 2>/dev/null

# Refused by name, before any connection.
expect_exit 1 "$G" --transport rdma --peer 127.0.0.1:9 --peer 127.0.0.1:10 logits --model "$M" --tokens-file "$TMP/tokens" --out "$TMP/x.f32"
expect_grep err 'rdma joins two ranks only .* with 2 workers .* use --transport tcp'
expect_exit 1 "$G" --peer 127.0.0.1:9,127.0.0.1:9 logits --model "$M" --tokens-file "$TMP/tokens" --out "$TMP/x.f32"
expect_grep err 'names the worker 127.0.0.1:9 twice'
expect_exit 1 "$G" --peer "127.0.0.1:9, " logits --model "$M" --tokens-file "$TMP/tokens" --out "$TMP/x.f32"
expect_grep err "address 2 is empty"
expect_exit 1 "$G" --peer 127.0.0.1:9,127.0.0.1:10,127.0.0.1:11,127.0.0.1:12 logits --model "$M" --tokens-file "$TMP/tokens" --out "$TMP/x.f32"
expect_grep err 'linear_num_heads \(KDA heads\) is 4, fewer than the 5 ranks'
finish
