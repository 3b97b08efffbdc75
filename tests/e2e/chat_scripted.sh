#!/bin/bash
# chat_scripted.sh: a scripted multi-turn session (prompts on stdin, recorded replies through the
# test hook): the answers on stdout, reasoning on stderr, the transcript in storage part by part,
# kept reasoning in the next request, -c, per-conversation settings, jsonl and --no-save.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
G=$GLMCHAT_BIN

cat >"$CHAT_REPLIES" <<'R'
{"type":"reasoning","text":"thinking one\n  "}
{"type":"content","text":"Answer "}
{"type":"content","text":"one."}
{"type":"done","finish":"stop","prompt_tokens":11,"generated_tokens":4}
{"type":"reasoning","text":"thinking two"}
{"type":"content","text":"Answer two.\n"}
{"type":"done","finish":"stop"}
{"type":"content","text":"Answer three."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Answer four."}
{"type":"done","finish":"stop"}
{"type":"reasoning","text":"r5"}
{"type":"content","text":"Answer five."}
{"type":"done","finish":"length"}
{"type":"content","text":"In memory only."}
{"type":"done","finish":"stop"}
R

# CRLF line ends (a file from Windows): the CR goes with the LF, a '\' before them still continues
expect_exit_in 0 $'first question\r\nsecond \\\r\nquestion, two lines\r\n\r\n' "$G" chat --lines
expect_same out $'Answer one.\nAnswer two.\n'
expect_grep err '^thinking one$'
expect_grep err '^thinking two$'

expect_exit 0 "$G" export 1 --format json -o "$TMP/conv1.json"
check_py "transcript after two turns" '
import json, os
c = json.load(open(os.environ["TMP"] + "/conv1.json"))
m = c["messages"]
def parts(i): return [(p["kind"], p["text"]) for p in m[i]["parts"]]
want = [("user", [("text", "first question")]),
        ("assistant", [("reasoning", "thinking one\n  "), ("text", "Answer one.")]),
        ("user", [("text", "second \nquestion, two lines")]),
        ("assistant", [("reasoning", "thinking two"), ("text", "Answer two.\n")])]
if len(m) != 4: print("FAIL: %d messages" % len(m))
for i, (role, ps) in enumerate(want):
    if m[i]["role"] != role: print("FAIL: message %d is %s" % (i, m[i]["role"]))
    if parts(i) != ps: print("FAIL: message %d parts %r" % (i, parts(i)))
    if i and m[i]["parent"] != m[i-1]["id"]: print("FAIL: message %d parent" % i)
a = m[1]
if a["status"] != "complete" or a["finish_reason"] != "stop": print("FAIL: status", a["status"], a["finish_reason"])
if a["prompt_tokens"] != 11 or a["completion_tokens"] != 4: print("FAIL: tokens", a["prompt_tokens"], a["completion_tokens"])
if a["model"] != "recorded-replies": print("FAIL: model", a["model"])
if c["title"] != "first question": print("FAIL: title", c["title"])
if json.loads(c["settings_json"]) != {"think": True, "effort": "max"}: print("FAIL: settings", c["settings_json"])
'
check_py "kept reasoning in the second request" '
import json, os
reqs = [json.loads(l) for l in open(os.environ["TMP"] + "/requests.jsonl")]
if len(reqs) != 2: print("FAIL: %d requests" % len(reqs))
msgs = reqs[1]["messages"]
if [x["role"] for x in msgs] != ["user", "assistant", "user"]: print("FAIL: roles", msgs)
if msgs[1].get("reasoning") != "thinking one\n  ": print("FAIL: reasoning %r" % msgs[1].get("reasoning"))
if msgs[1].get("content") != "Answer one.": print("FAIL: content %r" % msgs[1].get("content"))
if reqs[1]["tools"] != []: print("FAIL: tools offered without --allow-tools")
'

# -c continues, and per-conversation settings stick without the flags.
expect_exit 0 "$G" chat -c --think off --effort low --system "Be terse." --prompt "third"
expect_same out $'Answer three.\n'
expect_exit 0 "$G" chat -c --prompt "fourth" --reasoning none
expect_same out $'Answer four.\n'
expect_empty err
check_py "settings and -c" '
import json, os
reqs = [json.loads(l) for l in open(os.environ["TMP"] + "/requests.jsonl")]
for r in reqs[2:4]:
    if r["think"] is not False or r["effort"] != "low": print("FAIL: think/effort", r["think"], r["effort"])
    if r["messages"][0] != {"role": "system", "content": "Be terse."}: print("FAIL: system", r["messages"][0])
if len(reqs[3]["messages"]) != 8: print("FAIL: the fourth request has %d messages" % len(reqs[3]["messages"]))
'

# jsonl: one event a line, in order, for the same conversation.
expect_exit 0 "$G" chat --conversation 1 --output-format jsonl --max-tokens 5 --prompt "fifth"
check_py "jsonl events" '
import json, os
lines = open(os.environ["TMP"] + "/out").read().splitlines()
ev = [json.loads(l) for l in lines]
types = [e["type"] for e in ev]
if types != ["session", "user", "assistant", "reasoning", "content", "done", "turn_end"]: print("FAIL: types", types)
if ev[0]["conversation"] != 1 or ev[0]["version"] != 1 or ev[0]["continued"] is not True: print("FAIL: session", ev[0])
if ev[1]["text"] != "fifth": print("FAIL: user", ev[1])
if ev[5]["finish"] != "length" or ev[6]["finish"] != "length": print("FAIL: finish", ev[5], ev[6])
if ev[6]["message"] != ev[2]["message"]: print("FAIL: turn_end message", ev[6], ev[2])
reqs = [json.loads(l) for l in open(os.environ["TMP"] + "/requests.jsonl")]
if reqs[4]["max_tokens"] != 5: print("FAIL: max_tokens", reqs[4]["max_tokens"])
'

# --no-save: answered, nothing stored.
expect_exit 0 "$G" list --json
cp "$TMP/out" "$TMP/list_before"
expect_exit 0 "$G" chat --no-save --prompt "ephemeral"
expect_same out $'In memory only.\n'
expect_exit 0 "$G" list --json
if cmp -s "$TMP/out" "$TMP/list_before"; then pass; else fail "--no-save changed the conversation list"; fi

finish
