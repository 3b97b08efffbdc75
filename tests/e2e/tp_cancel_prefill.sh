#!/bin/bash
# tp_cancel_prefill.sh: Ctrl-C while a head and a real worker prefill a long prompt (mkmodel small,
# ~7k tokens, CPU ranks) stops both inside the piece they run: the head exits 130 within
# seconds, the worker says its head's user canceled the prompt at a layer (the ranks agreed on
# it), and the worker then serves a new head whose greedy reply is one rank's. With a prompt cache
# directory configured (the same one for both processes here) each rank keeps its part of the
# pieces that ran in its own files there, and the head says the prompt's first tokens are kept.
. "$(dirname "$0")/lib.sh"
G=$GLMCHAT_BIN
M="$TMP/small"
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
. "$(dirname "$0")/tp_lib.sh"
export GLMCHAT_DB="$TMP/chat.db"
expect_exit 0 "$G" mkmodel --out "$M" --preset small --seed 3
# A piece of 1,024 tokens takes seconds on two CPU ranks; a cancel inside it stops before the
# next of its 8 layers.
BOUND_S=5
mkdir -p "$XDG_CONFIG_HOME/glmchat"
# a prompt cache directory: each rank keeps its part of the canceled prompt's pieces there
printf 'temperature = 0\nprompt_cache_dir = %s\n' "$TMP/kept" >"$XDG_CONFIG_HOME/glmchat/config"
long_words 1500 "$TMP/long.txt"

# the worker takes its engine keys from flags and GLMCHAT_* (no config file): the same directory
GLMCHAT_PROMPT_CACHE_DIR="$TMP/kept" start_worker "$M"
# SIGINT 0.3 s after the prompt line that ends the first piece (both ranks are then inside the
# second); "STATUS SECONDS" (signal to exit) to $TMP/result
python3 - "$TMP" "$G" --model "$M" --backend cpu --peer "127.0.0.1:$PORT" chat --output-format jsonl \
    --prompt "$(cat "$TMP/long.txt")" <<'PY'
import signal, subprocess, sys, time
tmp, argv = sys.argv[1], sys.argv[2:]
err = open(tmp + "/err", "w")
p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, stdin=subprocess.DEVNULL)
seen = []
for line in p.stdout:
    seen.append(line)
    if '"type":"prompt","done":1024,' in line:
        break
time.sleep(0.3)
t0 = time.monotonic()
p.send_signal(signal.SIGINT)
seen.append(p.stdout.read())
p.wait()
open(tmp + "/out", "w").write("".join(seen))
open(tmp + "/result", "w").write("%d %.2f\n" % (p.returncode, time.monotonic() - t0))
PY
read -r rc secs <"$TMP/result"
echo "two ranks: exit $rc, ${secs} s from SIGINT to exit"
if [ "$rc" = 130 ]; then pass; else fail "exit $rc, expected 130; stderr: $(head -c 300 "$TMP/err")"; fi
if python3 -c "import sys; sys.exit(0 if float('$secs') <= $BOUND_S else 1)"; then pass
else fail "${secs} s from SIGINT to exit, above $BOUND_S s"; fi
expect_grep out '^\{"type":"prompt","done":0,"total":[0-9]+\}$'
if grep -q 'not used with --peer' "$TMP/err"; then fail "the head says ranks do not use the cache: $(cat "$TMP/err")"; else pass; fi
expect_grep err "the prompt's first [0-9]+ of [0-9]+ tokens ran and are kept in $TMP/kept"
# the head's part and the worker's, apart (the worker writes in the background: wait for it)
for _ in $(seq 100); do ls "$TMP/kept"/*.rank1of2.kept >/dev/null 2>&1 && break; sleep 0.05; done
ls "$TMP/kept"/*-1024.rank0of2.kept >/dev/null 2>&1 && ls "$TMP/kept"/*-1024.rank1of2.kept >/dev/null 2>&1 &&
    pass || fail "no kept-state file of each rank for the 1,024 tokens that ran: $(ls "$TMP/kept" 2>&1)"
# the worker stopped inside the piece, where the head did (not at the piece's end)
for _ in $(seq 100); do grep -q "canceled its prompt" "$TMP/worker.err" && break; sleep 0.05; done
if grep -Eq "the head's user canceled its prompt: the prompt was canceled at layer [0-9]+ of [0-9]+" \
    "$TMP/worker.err"; then pass
else fail "the worker did not stop at a layer: $(tail -c 400 "$TMP/worker.err")"; fi
if kill -0 "$worker" 2>/dev/null; then pass; else fail "the worker exited: $(tail -c 400 "$TMP/worker.err")"; fi

# the worker serves the next head: a greedy reply equal to one rank's
reply() {
    python3 -c '
import json, sys
print("".join(e.get("text", "") for e in map(json.loads, open(sys.argv[1])) if e.get("type") == "content"))' "$1"
}
expect_exit 0 "$G" --model "$M" --backend cpu chat --no-save --output-format jsonl --max-tokens 16 \
    --prompt "Tell me a story."
reply "$TMP/out" >"$TMP/one.txt"
expect_exit 0 "$G" --model "$M" --backend cpu --peer "127.0.0.1:$PORT" chat --no-save --output-format jsonl \
    --max-tokens 16 --prompt "Tell me a story."
reply "$TMP/out" >"$TMP/two.txt"
if [ -s "$TMP/one.txt" ] && cmp -s "$TMP/one.txt" "$TMP/two.txt"; then pass
else fail "after the cancel, two ranks replied '$(cat "$TMP/two.txt")', one rank '$(cat "$TMP/one.txt")'"; fi
stop_worker
finish
