#!/bin/bash
# chat_escapes.sh: terminal escapes in model text, reasoning, tool calls and tool results (OSC 52
# clipboard writes, title changes, screen clears) reach the terminal escaped (^[) in scripted
# text mode, on stdout and stderr alike; jsonl keeps them exact.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
G=$GLMCHAT_BIN
WS="$TMP/ws"
mkdir -p "$WS"
printf 'workspace = %s\n' "$WS" >"$XDG_CONFIG_HOME/glmchat/config"
printf 'before\033]0;pwned-title\007after\r\n' >"$WS/evil.txt"

replies() {
    rm -f "$CHAT_REPLIES.next"
    cat >"$CHAT_REPLIES" <<'R'
{"type":"reasoning","text":"think \u001b[2J\u001b[H hidden"}
{"type":"tool_call","name":"read_file","arguments":{"path":"evil.txt","note":"\u001b[31m"}}
{"type":"done","finish":"tool_calls"}
{"type":"content","text":"copy: \u001b]52;c;ZXZpbA==\u0007 and "}
{"type":"content","text":"\u009b2J split C1, bell \u0007, tab\tok"}
{"type":"done","finish":"stop"}
R
}

replies
expect_exit 0 "$G" chat --allow-tools --prompt "show me"
# no escape byte, no BEL, no C1 reaches either stream
if LC_ALL=C grep -q $'[\x1b\x07\x0d]' "$TMP/out" "$TMP/err"; then
    fail "a raw control character reached the terminal: $(od -c "$TMP/out" "$TMP/err" | head -20)"
else
    pass
fi
if LC_ALL=C grep -q $'\xc2\x9b' "$TMP/out"; then fail "a raw C1 CSI reached stdout"; else pass; fi
expect_grep out '^copy: \^\[\]52;c;ZXZpbA==\^G and \\u009b2J split C1, bell \^G, tab	ok$'
expect_grep err 'think \^\[\[2J\^\[\[H hidden'
expect_grep err '^\[tool call\] read_file \{"path":"evil.txt","note":"\\u001b\[31m"\}$'
expect_grep err '^\[tool result\] read_file: before\^\[\]0;pwned-title\^Gafter\^M$'

# --reasoning stdout: the thinking is escaped there too
replies
expect_exit 0 "$G" chat --allow-tools --reasoning stdout --prompt "show me"
expect_grep out 'think \^\[\[2J\^\[\[H hidden'

# jsonl stays exact
replies
expect_exit 0 "$G" chat --allow-tools --output-format jsonl --prompt "show me"
check_py "jsonl keeps the bytes" '
import json, os
ev = [json.loads(l) for l in open(os.environ["TMP"] + "/out")]
text = "".join(e["text"] for e in ev if e["type"] == "content")
if text != "copy: \x1b]52;c;ZXZpbA==\x07 and \u009b2J split C1, bell \x07, tab\tok": print("FAIL: content %r" % text)
res = [e for e in ev if e["type"] == "tool_result"][0]["text"]
if res != "before\x1b]0;pwned-title\x07after\r\n": print("FAIL: tool result %r" % res)
'
finish
