#!/bin/bash
# tp_sessions.sh: one head keeps several conversation states over one worker (tests/tp/tp_sessions):
# interleaved, reset, cut back to a mark (a conversation switch) and freed states each match one
# rank, a state past the worker's 16 is refused by name, a long feed canceled partway keeps its
# pieces on both ranks; after the worker restarts, a state it lost is refused by name while the
# others go on; a reply drafted on two ranks, and on three, equals the undrafted one, from the
# engine and from the command line (draft = copy; mtp refused with a peer); a state kept on every
# rank restores on every rank, and one the restarted worker lost runs again. Then the TUI switches between
# conversations (/new, /open) over the one worker it connected to, each reply as one rank's.
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/lib.sh"
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/chat_lib.sh"
unset GLMCHAT_TEST_REPLIES GLMCHAT_TEST_REQUESTS
G=$GLMCHAT_BIN
SESSIONS="$GLMCHAT_BUILDDIR/tests/tp/tp_sessions"
A="$GLMCHAT_SRCDIR/tests/fixtures/models/tiny-A"
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/tp_lib.sh"

[ -d "$A" ] || { fail "fixture $A is missing"; finish; }
start_worker "$A"
# the restart tp_sessions asks for midway: the worker killed, another on the same port
cat >"$TMP/restart.sh" <<EOF
#!/bin/bash
old=\$(cat "$TMP/worker.pid"); kill -9 \$old; rm -f "$TMP/worker.port"
# the port is free once the old worker is gone or a zombie (its sockets closed); kill returns before
for _ in \$(seq 200); do
    [ -e /proc/\$old ] && [ "\$(cut -d' ' -f3 /proc/\$old/stat 2>/dev/null)" != Z ] || break
    sleep 0.05
done
"$G" worker --listen 127.0.0.1:$PORT --port-file "$TMP/worker.port" --model "$A" --threads 1 \\
    2>"$TMP/worker2.err" </dev/null >/dev/null &
echo \$! >"$TMP/worker.pid"
for _ in \$(seq 2400); do [ -s "$TMP/worker.port" ] && exit 0; sleep 0.05; done
exit 1
EOF
chmod +x "$TMP/restart.sh"
echo $worker >"$TMP/worker.pid"
expect_exit 0 timeout 180 "$SESSIONS" "$A" 127.0.0.1:$PORT "$TMP/restart.sh"
cat "$TMP/out"
expect_grep out '^PASS: conversation A at 16 tokens'
expect_grep out '^PASS: conversation B at 8 tokens'
expect_grep out '^PASS: conversation C \(A.s slot\) at 4 tokens'
expect_grep out '^PASS: conversation B at 9 tokens'
expect_grep out '^PASS: states past 16 refused after 14 more: a two-rank engine keeps at most 16'
expect_grep out '^PASS: the worker restarted'
expect_grep out '^PASS: conversation C \(A.s slot\) at 5 tokens'
expect_grep out '^PASS: a state built before the restart is refused: the worker at 127.0.0.1:[0-9]+ was reconnected'
expect_grep out '^PASS: conversation B at 4 tokens'
expect_grep out '^PASS: 0 failures'
worker=$(cat "$TMP/worker.pid")
kill -0 $worker 2>/dev/null && pass || fail "the restarted worker died: $(cat "$TMP/worker2.err")"
kill -TERM $worker
for _ in $(seq 100); do kill -0 $worker 2>/dev/null || break; sleep 0.05; done
cp "$TMP/worker2.err" "$TMP/w2.err"
expect_grep w2.err 'serving the head at'
if grep -q 'disagree' "$TMP/w2.err"; then fail "the restarted worker saw the ranks disagree: $(cat "$TMP/w2.err")"; else pass; fi
expect_grep out '^PASS: drafted decoding on 2 ranks: 48 tokens equal the undrafted reply'
# the prompt cache over ranks: each keeps its part; after the restart the worker's are gone
expect_grep out '^PASS: a kept state restored on every rank: the head restored 40 tokens'
expect_grep out '^PASS: a kept state restored on every rank at 46 tokens'
expect_grep out '^PASS: a kept state the workers lost, run again: the head restored 0 tokens'
expect_grep out '^PASS: a kept state the workers lost, run again at 46 tokens'
expect_grep out '^PASS: a state kept again after the workers restarted, restored: 46 tokens'

# Three ranks (two workers): the same states, and the drafted reply with each worker running the
# head's windows and going back inside them
start_workers 3 "$A"
expect_exit 0 timeout 180 "$SESSIONS" "$A" "$PEERS"
cp "$TMP/out" "$TMP/out3"
grep -E '^(FAIL|PASS: drafted)' "$TMP/out3"
expect_grep out3 '^PASS: drafted decoding on 3 ranks: 48 tokens equal the undrafted reply'
expect_grep out3 '^PASS: a kept state restored on every rank at 46 tokens'
expect_grep out3 '^PASS: 0 failures'
stop_workers

# Copy drafts asked for on the command line over two ranks (refused before): a scripted two-turn
# chat opens and replies as without drafts. tiny's random replies never repeat an earlier run of
# tokens here, so no window runs: this checks the drafting loop's plain steps over ranks only (the
# engine's check above is the one that drafts). draft = mtp with a peer is refused by name.
M2="$TMP/draft-model"
expect_exit 0 "$G" mkmodel --out "$M2" --preset tiny --seed 11
start_worker "$M2"
printf 'Count from one to twenty.\nAgain, backwards.\n' >"$TMP/prompts"
for d in off copy; do
    GLMCHAT_DRAFT=$d GLMCHAT_TEMPERATURE=0 "$G" --db "$TMP/d-$d.db" --model "$M2" --peer 127.0.0.1:$PORT \
        chat --lines --think off --output-format jsonl --max-tokens 40 <"$TMP/prompts" >"$TMP/d-$d.jsonl" 2>"$TMP/d-$d.err"
    [ $? -eq 0 ] && pass || fail "a two-rank chat with draft = $d failed: $(head -c 400 "$TMP/d-$d.err")"
done
check_py "copy drafts over two ranks reply as undrafted" '
import json, os
tmp = os.environ["TMP"]
def turns(name):
    out, cur = [], []
    for line in open(tmp + "/" + name):
        e = json.loads(line)
        if e["type"] in ("content", "reasoning"):
            cur.append(e.get("text", ""))
        elif e["type"] == "turn_end":
            out.append("".join(cur)); cur = []
    return out
a, b = turns("d-off.jsonl"), turns("d-copy.jsonl")
if len(a) != 2 or not all(a): print("FAIL: undrafted replies: %r" % a)
if a != b: print("FAIL: draft = copy over two ranks %r, undrafted %r" % (b, a))
'
GLMCHAT_DRAFT=mtp "$G" --db "$TMP/d-mtp.db" --model "$M2" --peer 127.0.0.1:$PORT chat --prompt "Hi" \
    >/dev/null 2>"$TMP/d-mtp.err"
rc=$?
[ $rc -ne 0 ] && grep -q 'draft = mtp runs on one rank only' "$TMP/d-mtp.err" && pass ||
    fail "draft = mtp with a peer: exit $rc, $(head -c 400 "$TMP/d-mtp.err")"
stop_worker

# The TUI switches conversations over the one worker it connected to: two conversations, then
# back to the first; every reply equals one rank's, and the worker served a single head.
command -v tmux >/dev/null 2>&1 || { echo "tp_sessions: tmux not installed: the TUI switch is NOT checked"; finish; }
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/tui_lib.sh"
trap 'kill -9 $(jobs -p) 2>/dev/null; tmx kill-server 2>/dev/null; rm -rf "$TMP"' EXIT
M="$TMP/model"
expect_exit 0 "$G" mkmodel --out "$M" --preset tiny --seed 11
mkdir -p "$XDG_CONFIG_HOME/glmchat"
printf 'temperature = 0\nmax_tokens = 16\nthink = off\n' >"$XDG_CONFIG_HOME/glmchat/config"
# wait_stored DB CONV N: until conversation CONV of DB holds N messages, the last complete (60 s).
wait_stored() {
    for _ in $(seq 1200); do
        "$G" --db "$TMP/$1.db" export "$2" --format json -o "$TMP/$1$2.json" 2>/dev/null &&
            python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["messages"]
sys.exit(0 if len(m) == int(sys.argv[2]) and m[-1]["status"] == "complete" else 1)' "$TMP/$1$2.json" "$3" &&
            return 0
        sleep 0.05
    done
    fail "conversation $2 of $1 never held $3 messages; screen:"
    screen | sed 's/^/    |/' >&2
    return 1
}
# tui_run DB [ARGS...]: two conversations, then back to the first, in one TUI process.
tui_run() {
    local db=$1
    shift
    tui_start
    type_text "env XDG_DATA_HOME='$XDG_DATA_HOME' XDG_CONFIG_HOME='$XDG_CONFIG_HOME' '$G' --db '$TMP/$db.db' --model '$M' $*"
    keys Enter
    expect_screen 'ready' 15 "the TUI is up ($db)"
    type_text "Story one."; keys Enter
    wait_stored $db 1 2
    type_text "/new"; keys Enter
    type_text "Story two."; keys Enter
    wait_stored $db 2 2
    type_text "/open 1"; keys Enter
    type_text "Go on."; keys Enter
    wait_stored $db 1 4
    keys C-d
    expect_screen 'PROMPT\$ *$' 5 "Ctrl-D leaves the TUI ($db)"
    tmx kill-server 2>/dev/null
}
tui_run one
start_worker "$M"
tui_run two --peer 127.0.0.1:$PORT
kill -0 $worker 2>/dev/null && pass || fail "the worker died across the switches: $(cat "$TMP/worker.err")"
stop_worker
cp "$TMP/worker.err" "$TMP/w3.err"
[ "$(grep -c 'serving the head at' "$TMP/w3.err")" = 1 ] && pass ||
    fail "the worker did not serve one head throughout: $(cat "$TMP/w3.err")"
check_py "switched conversations over one worker reply as one rank" '
import json, os
tmp = os.environ["TMP"]
def replies(name):
    m = json.load(open(tmp + "/" + name))["messages"]
    return [(x["role"], "".join(p.get("text", "") for p in x["parts"])) for x in m]
for c in ("1", "2"):
    a, b = replies("one%s.json" % c), replies("two%s.json" % c)
    if not a or not all(t for _, t in a): print("FAIL: one rank conversation %s: %s" % (c, a))
    if a != b: print("FAIL: conversation %s: one rank %r, the TUI over a worker %r" % (c, a, b))
'
finish
