#!/bin/bash
# demo_cancel_prefill.sh: Ctrl-C while the CPU engine prefills a long prompt (the demo model, ~7.7k
# tokens) stops it within seconds: scripted chat and `chat --compact` exit 130 with the user
# message kept and the reply saved canceled (compact: nothing changed); with a prompt cache
# directory a new process sending the same prompt goes on from the pieces that ran; in the TUI
# it says how many of the prompt's tokens ran and are kept, and /retry goes on from them. The conversation
# goes on after each. Meanwhile the prefill's progress shows: jsonl
# "prompt" lines, the TUI's status line.
. "$(dirname "$0")/lib.sh"
G=$GLMCHAT_BIN
M="$GLMCHAT_BUILDDIR/models/demo"
export GLMCHAT_DB="$TMP/chat.db"
# A whole prefill of this prompt takes tens of seconds on the CPU engine; a canceled one stops
# before the next layer of its current 1024-token piece.
BOUND_S=5
mkdir -p "$XDG_CONFIG_HOME/glmchat"
printf 'temperature = 0\n' >"$XDG_CONFIG_HOME/glmchat/config"
long_words 3500 "$TMP/long.txt"

# interrupt MARKER ARGS...: runs glmchat ARGS with jsonl output, sends SIGINT 1 s after a line
# with MARKER (the engine is then prefilling), and writes "STATUS SECONDS" (signal to exit) to
# $TMP/result; stdout to $TMP/out, stderr to $TMP/err.
interrupt() {
    python3 - "$TMP" "$@" <<'PY'
import signal, subprocess, sys, time
tmp, marker, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
err = open(tmp + "/err", "w")
p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, stdin=subprocess.DEVNULL)
seen = []
for line in p.stdout:
    seen.append(line)
    if marker in line:
        break
time.sleep(1.0)
t0 = time.monotonic()
p.send_signal(signal.SIGINT)
seen.append(p.stdout.read())
p.wait()
open(tmp + "/out", "w").write("".join(seen))
open(tmp + "/result", "w").write("%d %.2f\n" % (p.returncode, time.monotonic() - t0))
PY
}

# within_bound WHAT: the run exited 130 within BOUND_S of the signal.
within_bound() {
    read -r rc secs <"$TMP/result"
    echo "$1: exit $rc, ${secs} s from SIGINT to exit"
    if [ "$rc" = 130 ]; then pass; else fail "$1: exit $rc, expected 130; stderr: $(head -c 300 "$TMP/err")"; fi
    if python3 -c "import sys; sys.exit(0 if float('$secs') <= $BOUND_S else 1)"; then pass
    else fail "$1: ${secs} s from SIGINT to exit, above $BOUND_S s"; fi
}

# ---- scripted chat ----
interrupt '"type":"assistant"' "$G" --model "$M" --backend cpu chat --output-format jsonl --prompt "$(cat "$TMP/long.txt")"
within_bound "scripted chat"
expect_grep err '^glmchat: interrupted; the partial reply is saved as message 2 of conversation 1$'
expect_grep out '"type":"done","finish":"canceled","prompt_tokens":[0-9]+,.*"generated_tokens":0'
# the prefill said how far it got: before its first piece, then after each (rising, none whole)
expect_grep out '^\{"type":"prompt","done":0,"total":[0-9]+\}$'
python3 - "$TMP/out" <<'PY' >"$TMP/check" 2>&1
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
p = [e for e in ev if e["type"] == "prompt"]
done = [e["done"] for e in p]
if not p or done != sorted(set(done)) or any(e["done"] >= e["total"] for e in p) \
        or len({e["total"] for e in p}) != 1:
    print("prompt events:", p)
PY
if [ ! -s "$TMP/check" ]; then pass; else fail "$(cat "$TMP/check")"; fi
expect_exit 0 "$G" export 1 --format json -o "$TMP/conv.json"
check_conv() {
    python3 - "$TMP/conv.json" "$TMP/long.txt" "$@" <<'PY' >"$TMP/check" 2>&1
import json, sys
conv, long_text, want = json.load(open(sys.argv[1])), open(sys.argv[2]).read().strip(), sys.argv[3:]
m = conv["messages"]
got = ["%s:%s" % (x["role"], x["status"]) for x in m]
if got != want: print("messages", got, "want", want)
if m[0]["parts"][0]["text"] != long_text: print("the user message was not kept whole")
if m[1]["finish_reason"] != "canceled" or m[1]["parts"]: print("reply", m[1]["finish_reason"], m[1]["parts"])
PY
    if [ ! -s "$TMP/check" ]; then pass; else fail "conversation 1: $(cat "$TMP/check")"; fi
}
check_conv user:complete assistant:canceled
if [ "$(sqlite3 "$GLMCHAT_DB" 'PRAGMA integrity_check')" = ok ]; then pass; else fail "integrity_check"; fi

# ---- with a prompt cache directory the pieces outlive the process: interrupted once its first
# piece ran, the same prompt in a new process goes on from them ----
mkdir -p "$TMP/pc/glmchat"
printf 'temperature = 0\nprompt_cache_dir = %s\n' "$TMP/pcache" >"$TMP/pc/glmchat/config"
python3 - "$G" "$M" "$TMP/long.txt" "$TMP/pc" "$TMP/pcache" >"$TMP/check" 2>&1 <<'PY'
import json, os, signal, subprocess, sys
g, m, text, cfg, cache = sys.argv[1:]
env = dict(os.environ, XDG_CONFIG_HOME=cfg)
argv = [g, "--model", m, "--backend", "cpu", "chat", "--no-save", "--output-format", "jsonl",
        "--max-tokens", "2", "--prompt", open(text).read()]
p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
kept = 0
for line in p.stdout:
    if line.startswith('{"type":"prompt"') and json.loads(line)["done"] > 0:
        kept = json.loads(line)["done"]
        p.send_signal(signal.SIGINT)
        break
p.stdout.read()
err = p.stderr.read()
if p.wait() != 130 or kept == 0:
    print("the first run: exit %d, kept %d" % (p.returncode, kept))
said = "glmchat: the prompt's first %d of " % kept
if said not in err or ("are kept in %s (prompt_cache_dir)" % cache) not in err:
    print("the first run's stderr does not say what it kept: %r" % err)
out = subprocess.run(argv, capture_output=True, text=True, env=env)
done = [json.loads(l) for l in out.stdout.splitlines() if l.startswith('{"type":"done"')]
if out.returncode != 0 or not done or done[0]["reused_tokens"] < kept:
    print("the second run: exit %d, done %s, the first kept %d" % (out.returncode, done, kept))
else:
    sys.stderr.write("interrupted after %d tokens; a new process reused %d of %d\n"
                     % (kept, done[0]["reused_tokens"], done[0]["prompt_tokens"]))
PY
if ! grep -q "^the " "$TMP/check"; then cat "$TMP/check"; pass; else fail "$(cat "$TMP/check")"; fi

# ---- chat --compact over it: the summary's prefill stops the same way, nothing is added ----
interrupt '"type":"session"' "$G" --model "$M" --backend cpu chat --compact --conversation 1 --output-format jsonl
within_bound "chat --compact"
expect_grep err '^glmchat: interrupted; the conversation is unchanged$'
expect_exit 0 "$G" export 1 --format json -o "$TMP/conv.json"
check_conv user:complete assistant:canceled

# ---- the conversation goes on: a short turn after the canceled one ----
expect_exit 0 "$G" --model "$M" --backend cpu chat --conversation 1 --max-tokens 4 --prompt "hi"
expect_exit 0 "$G" export 1 --format json -o "$TMP/conv.json"
check_conv user:complete assistant:canceled user:complete assistant:complete

# ---- the TUI: Ctrl-C during the prefill keeps what ran, and /retry goes on from it ----
if ! command -v tmux >/dev/null 2>&1; then
    echo "tmux not installed: the TUI part is skipped"
    finish
fi
. "$(dirname "$0")/tui_lib.sh"
tui_start
type_text "cd '$TMP' && env XDG_DATA_HOME='$XDG_DATA_HOME' XDG_CONFIG_HOME='$XDG_CONFIG_HOME' GLMCHAT_DB='$GLMCHAT_DB' '$G' --model '$M' --backend cpu chat --conversation 1"
keys Enter
expect_screen 'ready' 20 "the TUI started on the demo model"
# the next turn's prompt holds the long message again: a long prefill, canceled once its first
# piece ran (the status line past 0 tokens)
type_text "one more question"; keys Enter
expect_screen '● prefill [0-9]+% [0-9]+/[0-9]+' 5 "the status line shows the prefill's progress"
expect_screen '● prefill [0-9]+% [1-9][0-9]*/[0-9]+' 60 "the prefill's first piece ran"
start=$(date +%s.%N)
keys C-c
if wait_for 'canceled' "$BOUND_S"; then
    echo "TUI: the reply was canceled $(python3 -c "import time; print('%.2f' % (time.time() - $start))") s after Ctrl-C"
    pass
else
    fail "the TUI did not cancel within $BOUND_S s; screen:"; screen | sed 's/^/    |/' >&2
fi
expect_screen '│ ready$' 5 "the status line is ready for the next message"
# it says what it kept, and /retry goes on from there: its progress starts at the kept count
expect_screen 'canceled within the prompt: its first [0-9]+ of' 5 "the TUI says what the prompt kept"
kept=$(screen | grep -Eo 'its first [0-9]+ of' | grep -Eo '[0-9]+' | tail -1)
type_text "/retry"; keys Enter
if wait_for '● prefill [0-9]+% [0-9]+/[0-9]+' 10; then
    shown=$(screen | grep -Eo '● prefill [0-9]+% [0-9]+/' | grep -Eo '[0-9]+/' | tr -d / | tail -1)
    echo "TUI: kept ${kept:-?} tokens; /retry's progress showed $shown first"
    if [ -n "$kept" ] && [ "$kept" -gt 0 ] && [ "$shown" -ge "$kept" ]; then pass
    else fail "/retry's prefill showed $shown tokens done, under the $kept kept"; fi
else
    fail "/retry showed no prefill progress; screen:"; screen | sed 's/^/    |/' >&2
fi
keys Escape # (a second Ctrl-C within 2 s of the first would quit)
expect_screen '│ ready$' "$BOUND_S" "Esc canceled the /retry too"
keys C-d
expect_screen 'PROMPT\$ *$' 10 "Ctrl-D leaves the TUI"
expect_exit 0 "$G" export 1 --format json -o "$TMP/conv.json"
# the /retry's reply is the canceled one's sibling (a new branch), canceled as well
check_conv user:complete assistant:canceled user:complete assistant:complete user:complete assistant:canceled assistant:canceled
finish
