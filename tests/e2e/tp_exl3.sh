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

check_two_rank_logits "$Q" "two ranks' EXL3 logits against one rank's"
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
