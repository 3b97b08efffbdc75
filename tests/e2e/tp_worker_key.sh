#!/bin/bash
# tp_worker_key.sh: the worker's shared key and its port, with real processes on loopback: making
# and reading key files; no key off loopback refused; a wrong or missing key refused on both sides
# without naming a key; a head's captured handshake replayed and refused; idle connections not
# delaying a head; a scripted head going on to its next line after its worker failed.
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/lib.sh"
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/chat_lib.sh"
unset GLMCHAT_TEST_REPLIES GLMCHAT_TEST_REQUESTS
G="$GLMCHAT_BIN"
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/tp_lib.sh"
MODEL="$GLMCHAT_SRCDIR/tests/fixtures/models/tiny-A"
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
[ -d "$MODEL" ] || { fail "fixture $MODEL is missing"; finish; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# wait_line FILE REGEX N: until FILE has N lines matching REGEX (30 s).
wait_line() {
    for _ in $(seq 600); do [ "$(grep -Ec "$2" "$1" 2>/dev/null)" -ge "$3" ] && return 0; sleep 0.05; done
    return 1
}
echo "1 5 9 200 17 33" >"$TMP/tokens"
head_logits() { # head_logits KEYFILE|- : a head's logits through the worker at $PORT
    local key=()
    [ "$1" != - ] && key=(--key-file "$1")
    "$G" --peer 127.0.0.1:$PORT "${key[@]}" logits --model "$MODEL" --threads 1 \
        --tokens-file "$TMP/tokens" --out "$TMP/two.f32"
}

# 1. Key files: --new-key writes 64 hex digits with mode 0600 and never replaces a file.
expect_exit 0 "$G" worker --new-key "$TMP/key"
[ "$(stat -c %a "$TMP/key")" = 600 ] && pass || fail "--new-key made mode $(stat -c %a "$TMP/key")"
grep -Eq '^[0-9a-f]{64}$' "$TMP/key" && pass || fail "the key file is not 64 hex digits: $(cat "$TMP/key")"
cp "$TMP/key" "$TMP/key.before"
expect_exit 1 "$G" worker --new-key "$TMP/key"
expect_grep err 'never replaced'
cmp -s "$TMP/key" "$TMP/key.before" && pass || fail "--new-key replaced an existing key"
expect_exit 0 "$G" worker --new-key "$TMP/other"
cmp -s "$TMP/key" "$TMP/other" && fail "two new keys are equal" || pass
cp "$TMP/key" "$TMP/open" && chmod 644 "$TMP/open"
expect_exit 1 "$G" worker --listen 127.0.0.1:0 --key-file "$TMP/open" --model "$MODEL"
expect_grep err "key file .*/open has mode 0644: its group or others may use it.*chmod 600"

# 2. No key off loopback: refused before the model loads, saying how to make one.
expect_exit 1 "$G" worker --listen 0.0.0.0:0 --model "$MODEL"
expect_grep err 'refusing to listen on 0.0.0.0:0 without a key.*glmchat worker --new-key FILE.*--key-file'
expect_exit 1 "$G" worker --listen '[::]:0' --model "$MODEL"
expect_grep err 'refusing to listen on \[::\]:0 without a key'

# 3. A keyed worker: the right key is served; a wrong one, or none, is refused on both sides,
# and no message holds either key.
start_worker "$MODEL" --key-file "$TMP/key"
expect_exit 0 head_logits "$TMP/key"
expect_exit 1 head_logits "$TMP/other"
expect_grep err "the worker at 127.0.0.1:$PORT refused: the key differs.*give both ranks a copy of the same key file"
cp "$TMP/err" "$TMP/wrong.err"
expect_exit 1 head_logits -
expect_grep err "the worker at 127.0.0.1:$PORT requires a key: give this head --key-file FILE"
cp "$TMP/err" "$TMP/nokey.err"

# 4. A head's handshake captured by a relay and replayed to the worker is refused.
cat >"$TMP/relay.py" <<'PY'
import os, socket, sys, threading
port_file, target, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(8)
open(port_file + ".tmp", "w").write("%d\n" % srv.getsockname()[1])
os.rename(port_file + ".tmp", port_file)
def pump(a, b, rec):
    while True:
        try:
            d = a.recv(65536)
        except OSError:
            d = b""
        if not d:
            break
        if rec:
            rec.write(d)
            rec.flush()
        try:
            b.sendall(d)
        except OSError:
            break
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
n = 0
while True:
    c, _ = srv.accept()
    s = socket.create_connection(("127.0.0.1", target))
    rec = open("%s/conn%d.bin" % (out, n), "wb")
    n += 1
    threading.Thread(target=pump, args=(c, s, rec), daemon=True).start()
    threading.Thread(target=pump, args=(s, c, None), daemon=True).start()
PY
mkdir -p "$TMP/cap"
python3 "$TMP/relay.py" "$TMP/relay.port" "$PORT" "$TMP/cap" &
relay=$!
for _ in $(seq 100); do [ -s "$TMP/relay.port" ] && break; sleep 0.05; done
RPORT=$(cat "$TMP/relay.port")
expect_exit 0 "$G" --peer 127.0.0.1:$RPORT --key-file "$TMP/key" logits --model "$MODEL" --threads 1 \
    --tokens-file "$TMP/tokens" --out "$TMP/relayed.f32"
kill $relay; wait $relay 2>/dev/null
export PORT
check_py "the captured control stream, replayed, gets a CHALLENGE and then a refusal" '
import os, socket, struct
tmp = os.environ["TMP"]
stream = open(tmp + "/cap/conn0.bin", "rb").read()
if len(stream) < 100 or stream[:4] != b"GLTP": print("FAIL: nothing captured:", stream[:16])
s = socket.create_connection(("127.0.0.1", int(os.environ["PORT"])), timeout=5)
s.sendall(stream)
got, buf = [], b""
while True:
    try:
        d = s.recv(65536)
    except OSError:
        break
    if not d:
        break
    buf += d
while len(buf) >= 12:
    magic, typ, flags, n = struct.unpack("<IHHI", buf[:12])
    body, buf = buf[12:12 + n], buf[12 + n:]
    got.append((typ, body[6:].decode() if typ == 5 else ""))
types = [t for t, _ in got]
if types != [9, 5]: print("FAIL: the worker answered message types", types, "not CHALLENGE, ERROR:", got)
elif "the key differs" not in got[1][1]: print("FAIL: refusal text", got[1][1])

'
wait_line "$TMP/worker.err" 'refused a connection from 127.0.0.1:[0-9]+: the key differs' 1 &&
    pass || fail "the worker did not log the replay's refusal: $(cat "$TMP/worker.err")"
expect_grep worker.err 'refused a connection from 127.0.0.1:[0-9]+: the key differs'
cat "$TMP/worker.err" "$TMP/wrong.err" "$TMP/nokey.err" >"$TMP/all.err"
for k in key other; do
    if grep -qiF "$(cat "$TMP/$k")" "$TMP/all.err"; then fail "a message shows the $k file's key"; else pass; fi
done
stop_worker

# 5. A keyed head and a keyless worker (loopback): refused by the head, saying why.
start_worker "$MODEL"
expect_exit 1 head_logits "$TMP/key"
expect_grep err "the worker at 127.0.0.1:$PORT runs without a key but this head has one"

# 6. Idle connections (1, then 10) opened before a head: it is served as fast as without them.
cat >"$TMP/idle.py" <<'PY'
import os, socket, sys, time
port, n, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
open(ready, "w").write("ok\n")
time.sleep(60)
PY
t0=$(now_ms); expect_exit 0 head_logits -; base=$(( $(now_ms) - t0 ))
for n in 1 10; do
    rm -f "$TMP/idle.ready"
    python3 "$TMP/idle.py" $PORT $n "$TMP/idle.ready" &
    idle=$!
    for _ in $(seq 100); do [ -s "$TMP/idle.ready" ] && break; sleep 0.05; done
    t0=$(now_ms); expect_exit 0 head_logits -; took=$(( $(now_ms) - t0 ))
    echo "head with $n idle connection(s): $took ms, without: $base ms"
    [ $took -le $((base + 1000)) ] && pass || fail "$n idle connection(s) delayed the head: $took ms, $base ms without"
    kill $idle; wait $idle 2>/dev/null
done
stop_worker

# 7. A scripted head after its worker failed: the next line connects again; a reconnect that
# fails says so, and the exit status says a reply was lost.
M="$TMP/model"
expect_exit 0 "$G" mkmodel --out "$M" --preset tiny --seed 11
printf 'temperature = 0\nworker_key_file = %s\n' "$TMP/key" >"$XDG_CONFIG_HOME/glmchat/config"
start_worker "$M" --key-file "$TMP/key"
mkfifo "$TMP/feed"
trap '' PIPE # a head that exits early is reported below, not by the shell dying on a write
"$G" --db "$TMP/s.db" --model "$M" --peer 127.0.0.1:$PORT chat --lines --output-format jsonl --max-tokens 8 \
    --think off <"$TMP/feed" >"$TMP/s.jsonl" 2>"$TMP/s.err" &
head_pid=$!
exec 7>"$TMP/feed"
echo "First question." >&7
wait_line "$TMP/s.jsonl" '"turn_end"' 1 || fail "the first turn did not end: $(cat "$TMP/s.err")"
kill -STOP $worker            # the worker hangs: the second reply fails within the timeout
echo "Second question." >&7
wait_line "$TMP/s.jsonl" '"type": ?"error"' 1 || fail "the second turn did not fail: $(cat "$TMP/s.err")"
kill -9 $worker; kill -CONT $worker 2>/dev/null; wait $worker 2>/dev/null
WORKER_LISTEN=127.0.0.1:$PORT start_worker "$M" --key-file "$TMP/key"
echo "Third question." >&7
wait_line "$TMP/s.jsonl" '"turn_end"' 3 || fail "the line after the worker's failure got no reply: $(cat "$TMP/s.err")"
expect_grep worker.err 'serving the head at'
kill -9 $worker; wait $worker 2>/dev/null  # gone for good: the next line cannot reconnect
echo "Fourth question." >&7
exec 7>&-
wait $head_pid
rc=$?
[ $rc -eq 1 ] && pass || fail "the head exited $rc, not 1, after its last reply was lost: $(cat "$TMP/s.err")"
cp "$TMP/s.err" "$TMP/serr"
# The fourth line: the worker was killed (and reaped) while the link sat idle, so its close is
# already there; the head notices it before the turn and says the reconnect failed.
expect_grep serr 'cannot reach the worker at 127.0.0.1:[0-9]+ within'
expect_grep serr '2 of 4 replies failed because the worker did; the last one too, so start the worker and send it again'
check_py "four turns: the second and fourth failed, the third replied" '
import json, os
ev = [json.loads(l) for l in open(os.environ["TMP"] + "/s.jsonl")]
ends = [e["finish"] == "error" for e in ev if e["type"] == "turn_end"]
if ends != [False, True, False, True]: print("FAIL: turns that failed", ends, ev)
'
finish
