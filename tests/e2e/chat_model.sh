#!/bin/bash
# chat_model.sh: a scripted session on a real (tiny, random-weight) model made by mkmodel, run
# by the CPU engine: two turns, jsonl events, the transcript in storage part by part, and the
# stored numbers. Skips (77) while this build's engine cannot generate yet.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
unset GLMCHAT_TEST_REPLIES GLMCHAT_TEST_REQUESTS
G=$GLMCHAT_BIN
M="$TMP/model"

if ! "$G" mkmodel --out "$M" --preset tiny --seed 7 >"$TMP/out" 2>"$TMP/err"; then
    echo "mkmodel cannot make a model here: $(head -c 200 "$TMP/err"); skipped"
    exit 77
fi
"$G" --model "$M" --backend cpu chat --no-save --max-tokens 2 --prompt probe >"$TMP/out" 2>"$TMP/err"
if grep -q 'glm_generate needs' "$TMP/err"; then
    echo "the engine cannot generate in this build yet; skipped"
    exit 77
fi

expect_exit 0 "$G" --model "$M" --backend cpu chat --output-format jsonl --max-tokens 12 --think off --prompt "Hello, tiny model."
cp "$TMP/out" "$TMP/turn1.jsonl"
expect_exit 0 "$G" --model "$M" --backend cpu chat -c --output-format jsonl --max-tokens 12 --prompt "And again."
cp "$TMP/out" "$TMP/turn2.jsonl"
expect_exit 0 "$G" export 1 --format json -o "$TMP/conv.json"
check_py "the model's replies, streamed and stored" '
import base64, json, os
tmp = os.environ["TMP"]
def text_of(p):
    # storage writes a part holding NUL or invalid UTF-8 as text_b64 (storage/FORMATS.md)
    return p["text"] if "text" in p else base64.b64decode(p["text_b64"]).decode("utf-8")
conv = json.load(open(tmp + "/conv.json"))
m = conv["messages"]
if [x["role"] for x in m] != ["user", "assistant", "user", "assistant"]: print("FAIL: roles", [x["role"] for x in m])
for turn, a in (("turn1", m[1]), ("turn2", m[3])):
    ev = [json.loads(l) for l in open(tmp + "/" + turn + ".jsonl")]
    types = [e["type"] for e in ev]
    if types[0] != "session" or types[-1] != "turn_end": print("FAIL: %s types %r" % (turn, types))
    streamed = "".join(e["text"] for e in ev if e["type"] == "content")
    thought = "".join(e["text"] for e in ev if e["type"] == "reasoning")
    stored = "".join(text_of(p) for p in a["parts"] if p["kind"] == "text")
    stored_r = "".join(text_of(p) for p in a["parts"] if p["kind"] == "reasoning")
    if streamed != stored or thought != stored_r: print("FAIL: %s stored %r != streamed %r" % (turn, stored, streamed))
    done = [e for e in ev if e["type"] == "done"][-1]
    if done["finish"] not in ("stop", "length"): print("FAIL: finish", done)
    if a["finish_reason"] != done["finish"] or a["status"] != "complete": print("FAIL: status", a["status"], a["finish_reason"])
    if not 0 < a["completion_tokens"] <= 12: print("FAIL: completion_tokens", a["completion_tokens"])
    if a["prompt_tokens"] is None or a["prompt_tokens"] <= 0: print("FAIL: prompt_tokens", a["prompt_tokens"])
if json.loads(conv["settings_json"])["think"] is not False: print("FAIL: think", conv["settings_json"])
if m[3]["prompt_tokens"] <= m[1]["prompt_tokens"]: print("FAIL: the second prompt is not longer", m[1]["prompt_tokens"], m[3]["prompt_tokens"])
'
finish
