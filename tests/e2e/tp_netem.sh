#!/bin/bash
# tp_netem.sh: the two ranks in two network namespaces joined by a veth pair with 5 ms delay and 1%
# loss (tc netem): exchanges stay bit-identical, and a worker killed there is reported in time.
# Kernels without sch_netem get a tbf rate limit, nftables random drops and a 5 ms delaying TCP
# relay instead; the log says loudly which was used.
. "${GLMCHAT_SRCDIR:-.}/tests/e2e/lib.sh"
PEER="$GLMCHAT_BUILDDIR/tests/tp/tp_peer"

skip() { echo "tp_netem: SKIP: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "network namespaces need root (run make check as root, or in CI)"
command -v ip >/dev/null || skip "the ip command is missing (apt-get install iproute2)"

NS_A=glmtp_a_$$
NS_B=glmtp_b_$$
VETH_A=gtpa$$
VETH_B=gtpb$$
NET=10.$(( 100 + $$ % 100 )).$(( $$ / 100 % 250 ))
cleanup() {
    kill -9 $(jobs -p) 2>/dev/null
    ip netns del "$NS_A" 2>/dev/null
    ip netns del "$NS_B" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

ip netns add "$NS_A" 2>"$TMP/ns.err" || skip "cannot create a network namespace: $(cat "$TMP/ns.err")"
ip netns add "$NS_B" 2>"$TMP/ns.err" || skip "cannot create a network namespace: $(cat "$TMP/ns.err")"
ip link add "$VETH_A" netns "$NS_A" type veth peer name "$VETH_B" netns "$NS_B" 2>"$TMP/ns.err" ||
    skip "cannot create a veth pair between namespaces: $(cat "$TMP/ns.err")"
ip -n "$NS_A" addr add "$NET.1/24" dev "$VETH_A"
ip -n "$NS_B" addr add "$NET.2/24" dev "$VETH_B"
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set "$VETH_A" up
ip -n "$NS_B" link set "$VETH_B" up

# The impairment: netem delay and loss on both directions. Kernels built without sch_netem get
# the closest thing they have: nftables random drop for the loss, a tbf rate limit for a slow
# link, and a userspace relay that holds every chunk 5 ms each way for the delay.
command -v modprobe >/dev/null && modprobe sch_netem 2>/dev/null
impair() {
    local ns=$1 dev=$2
    if ip netns exec "$ns" tc qdisc add dev "$dev" root netem delay 5ms loss 1% 2>"$TMP/tc.err"; then
        echo "netem"
        return
    fi
    ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate 20mbit burst 32kbit latency 50ms 2>>"$TMP/tc.err" &&
        echo -n "tbf "
    if command -v nft >/dev/null &&
        ip netns exec "$ns" nft add table netdev glmtp 2>>"$TMP/tc.err" &&
        ip netns exec "$ns" nft add chain netdev glmtp ingress "{ type filter hook ingress device $dev priority 0 ; }" &&
        ip netns exec "$ns" nft add rule netdev glmtp ingress numgen random mod 100 '<' 1 counter drop; then
        echo "nft-loss"
        return
    fi
    echo "none"
}
mode_a=$(impair "$NS_A" "$VETH_A")
mode_b=$(impair "$NS_B" "$VETH_B")
case "$mode_a $mode_b" in *none*) fail "no way to impair the link (neither netem, tbf nor nftables)";; esac

# The delay without netem: a relay in the head's namespace, every chunk held 5 ms each way.
cat >"$TMP/relay.py" <<'PY'
import asyncio, sys, time
listen, target, delay = sys.argv[1], sys.argv[2], float(sys.argv[3]) / 1000
async def pump(reader, writer):
    queue = asyncio.Queue()
    async def deliver():
        while True:
            due, data = await queue.get()
            if data is None: break
            await asyncio.sleep(max(0, due - time.monotonic()))
            writer.write(data)
            await writer.drain()
        writer.close()
    task = asyncio.ensure_future(deliver())
    try:
        while True:
            data = await reader.read(65536)
            await queue.put((time.monotonic() + delay, data or None))
            if not data: break
    except ConnectionError:
        await queue.put((0, None))
    await task
async def serve(r1, w1):
    host, port = target.rsplit(":", 1)
    try:
        r2, w2 = await asyncio.open_connection(host, int(port))
    except OSError:
        w1.close(); return
    await asyncio.gather(pump(r1, w2), pump(r2, w1), return_exceptions=True)
async def main():
    host, port = listen.rsplit(":", 1)
    server = await asyncio.start_server(serve, host, int(port))
    print("relay ready", flush=True)
    async with server: await server.serve_forever()
asyncio.run(main())
PY
# via PORT: the address the head dials for the worker listening on PORT (through the relay
# when there is no netem).
relay_for() {
    if [ "$mode_a" = netem ]; then echo "$NET.2:$1"; return; fi
    ip netns exec "$NS_A" python3 "$TMP/relay.py" "$NET.1:$(($1 + 100))" "$NET.2:$1" 5 >"$TMP/relay$1.out" 2>&1 &
    for _ in $(seq 100); do grep -q 'relay ready' "$TMP/relay$1.out" && break; sleep 0.05; done
    grep -q 'relay ready' "$TMP/relay$1.out" || fail "the delay relay did not start: $(cat "$TMP/relay$1.out")"
    echo "$NET.1:$(($1 + 100))"
}
if [ "$mode_a" = netem ]; then
    used="tc netem: delay 5ms loss 1% on both veth ends"
else
    why=$(head -c 200 "$TMP/tc.err" | tr '\n' ' ')
    zcat /proc/config.gz 2>/dev/null | grep -q '^# CONFIG_NET_SCH_NETEM is not set' &&
        why="$why(this kernel is built without it: CONFIG_NET_SCH_NETEM is not set)"
    used="FALLBACK, NOT netem: $mode_a on both veth ends (1% random drops) + a userspace relay delaying 5 ms each way; sch_netem unavailable: $why"
fi
echo "################################################################################"
echo "tp_netem: impairment used: $used"
echo "################################################################################"
ip netns exec "$NS_A" ping -c 2 -W 2 "$NET.2" >"$TMP/ping.out" 2>&1 || true
grep -E 'rtt|packet loss' "$TMP/ping.out" || true

# The delay is in effect: 20 one-byte round trips to an echo in the worker's namespace take at
# least 20 x 2 x 5 ms.
ip netns exec "$NS_B" python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7069)); s.listen(1); print("echo ready", flush=True)
c, _ = s.accept()
while True:
    b = c.recv(1)
    if not b: break
    c.sendall(b)
' "$NET.2" >"$TMP/echo.out" 2>&1 &
for _ in $(seq 100); do grep -q 'echo ready' "$TMP/echo.out" && break; sleep 0.05; done
via=$(relay_for 7069)
rtt_ms=$(ip netns exec "$NS_A" python3 -c '
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
c = socket.create_connection((host, int(port)), timeout=10)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
t0 = time.monotonic()
for _ in range(20):
    c.sendall(b"x")
    if c.recv(1) != b"x": sys.exit(1)
print(int((time.monotonic() - t0) * 1000))
' "$via")
echo "20 round trips over the impaired link: ${rtt_ms:-?} ms"
[ -n "$rtt_ms" ] && [ "$rtt_ms" -ge 200 ] && pass ||
    fail "20 round trips took ${rtt_ms:-no} ms, under 20 x 10 ms: the 5 ms delay ($used) is not in effect"

# off loopback a worker needs a key, and the head proves it holds a copy
"$GLMCHAT_BIN" worker --new-key "$TMP/key" 2>/dev/null || fail "cannot make a key"
TIMING=(--timeout-ms 5000 --heartbeat-ms 500 --connect-ms 10000 --key-file "$TMP/key")

# 1. 300 exchanges over the impaired link: both ranks end with the same digest.
ip netns exec "$NS_B" "$PEER" --role worker --addr "$NET.2:7070" "${TIMING[@]}" --per-step 10 \
    >"$TMP/w1.out" 2>&1 &
w1=$!
t0=$(date +%s%N)
via=$(relay_for 7070)
expect_exit 0 timeout 60 ip netns exec "$NS_A" "$PEER" --role head --addr "$via" --steps 30 \
    --per-step 10 "${TIMING[@]}"
cp "$TMP/out" "$TMP/h1.out"
echo "300 exchanges in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
for ns in "$NS_A" "$NS_B"; do
    ip netns exec "$ns" tc -s qdisc show dev "$([ "$ns" = "$NS_A" ] && echo "$VETH_A" || echo "$VETH_B")" |
        grep -E 'qdisc|dropped' | tr -s ' ' | head -2
    ip netns exec "$ns" nft list chain netdev glmtp ingress 2>/dev/null | grep -o 'counter packets [0-9]* bytes [0-9]*' |
        sed 's/^/random drops: /'
done
for _ in $(seq 100); do kill -0 $w1 2>/dev/null || break; sleep 0.1; done
expect_grep h1.out 'exchanges 300 digest'
hd=$(sed -n 's/.*digest \([0-9a-f]*\).*/\1/p' "$TMP/h1.out")
wd=$(sed -n 's/.*digest \([0-9a-f]*\).*/\1/p' "$TMP/w1.out")
if [ -n "$hd" ] && [ "$hd" = "$wd" ]; then pass; else fail "digests differ: head '$hd', worker '$wd': $(cat "$TMP/w1.out")"; fi

# 2. The worker killed mid-run over the impaired link: the head reports it within the timeout.
ip netns exec "$NS_B" "$PEER" --role worker --addr "$NET.2:7071" "${TIMING[@]}" --per-step 10 \
    >"$TMP/w2.out" 2>&1 &
w2=$!
via=$(relay_for 7071)
ip netns exec "$NS_A" "$PEER" --role head --addr "$via" --steps 0 --per-step 10 "${TIMING[@]}" \
    >"$TMP/h2.out" 2>&1 &
h2=$!
sleep 2
kill -KILL $w2
t0=$(date +%s%N)
for _ in $(seq 200); do kill -0 $h2 2>/dev/null || break; sleep 0.05; done
took=$(( ($(date +%s%N) - t0) / 1000000 ))
if kill -0 $h2 2>/dev/null; then fail "the head still runs $took ms after its worker was killed"; kill -9 $h2; fi
wait $h2
rc=$?
[ $rc -eq 4 ] && pass || fail "head exited $rc: $(cat "$TMP/h2.out")"
[ $took -le 6000 ] && pass || fail "head took $took ms to notice"
expect_grep h2.out 'worker at .* (closed the connection|stopped answering|failed).*next message reconnects'
echo "killed worker noticed in $took ms"
echo "tp_netem: impairment used: $used"

finish
