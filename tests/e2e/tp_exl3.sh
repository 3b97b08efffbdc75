#!/bin/bash
# tp_exl3.sh: an EXL3 model (mkmodel tiny-exl3-tp, experts quantized) split across two real
# processes over TCP loopback: rank 0's logits match one rank's within float32 rounding and equal
# the worker's bit for bit, and a greedy reply on two ranks equals one rank's.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
unset GLMCHAT_TEST_REPLIES GLMCHAT_TEST_REQUESTS
G=$GLMCHAT_BIN
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT

. "$(dirname "$0")/tp_lib.sh"

M="$TMP/model" Q="$TMP/exl3"
expect_exit 0 "$G" mkmodel --out "$M" --preset tiny-exl3-tp --seed 11
expect_exit 0 "$G" quantize --in "$M" --out "$Q" --threads 2
expect_grep out 'quantized 6 of [0-9]+ tensors to EXL3'

echo "1 5 9 200 17 33 2 7 100 45 3 8 11 64 300 12" >"$TMP/tokens"
expect_exit 0 "$G" logits --model "$Q" --threads 1 --tokens-file "$TMP/tokens" --prefill 9 --out "$TMP/one.f32"
start_worker "$Q" --dump-logits "$TMP/worker.f32"
expect_exit 0 "$G" --peer 127.0.0.1:$PORT logits --model "$Q" --threads 1 --tokens-file "$TMP/tokens" \
    --prefill 9 --out "$TMP/two.f32"
stop_worker
check_py "two ranks' EXL3 logits against one rank's" '
import os, struct
tmp = os.environ["TMP"]
def f32(name):
    b = open(tmp + "/" + name, "rb").read()
    return struct.unpack("<%df" % (len(b) // 4), b)
one, two, w = f32("one.f32"), f32("two.f32"), f32("worker.f32")
if len(one) != len(two) or len(one) == 0: print("FAIL: sizes", len(one), len(two))
scale = max(abs(x) for x in one)
diff = max(abs(x - y) for x, y in zip(one, two))
if not diff / scale <= 1e-5: print("FAIL: max |diff| %g against max |logit| %g" % (diff, scale))
if diff == 0 and one != two: print("FAIL: unreachable")
if open(tmp + "/two.f32", "rb").read() != open(tmp + "/worker.f32", "rb").read(): print("FAIL: rank 1 logits differ from rank 0")
print("max |diff| %g of max |logit| %g" % (diff, scale), file=open(tmp + "/diff.txt", "w"))
'
echo "tp_exl3: two ranks against one: $(cat "$TMP/diff.txt" 2>/dev/null)"

# A greedy reply, one rank and two.
mkdir -p "$XDG_CONFIG_HOME/glmchat"
printf 'temperature = 0\n' >"$XDG_CONFIG_HOME/glmchat/config"
expect_exit 0 "$G" --db "$TMP/one.db" --model "$Q" chat --output-format jsonl --max-tokens 40 --think off --prompt "Tell me a story."
cp "$TMP/out" "$TMP/chat1.jsonl"
start_worker "$Q"
expect_exit 0 "$G" --db "$TMP/two.db" --model "$Q" --peer 127.0.0.1:$PORT chat --output-format jsonl --max-tokens 40 --think off --prompt "Tell me a story."
cp "$TMP/out" "$TMP/chat2.jsonl"
stop_worker
check_py "a two-rank EXL3 reply equals one rank's" '
import json, os
tmp = os.environ["TMP"]
def reply(name):
    ev = [json.loads(l) for l in open(tmp + "/" + name)]
    return "".join(e.get("text", "") for e in ev if e["type"] in ("content", "reasoning"))
a, b = reply("chat1.jsonl"), reply("chat2.jsonl")
if not a: print("FAIL: the one-rank reply is empty")
if a != b: print("FAIL: %r != %r" % (a, b))
'
finish
