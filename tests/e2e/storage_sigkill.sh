#!/bin/bash
# storage_sigkill.sh: kills a process writing conversations with SIGKILL at random moments, 30
# times over one database; every id it reported committed must exist and integrity_check pass.
. "$(dirname "$0")/lib.sh"
W=$GLMCHAT_BUILDDIR/tests/unit/test_storage_writer
DB=$TMP/crash/glmchat.db
KILLS=30
for i in $(seq 1 $KILLS); do
    "$W" write "$DB" "$i" >"$TMP/ids.$i" 2>"$TMP/werr.$i" &
    pid=$!
    # 20-400 ms: some kills land while opening, most while parts and checkpoints are written.
    sleep "0.$(printf '%03d' $((20 + RANDOM % 380)))"
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    if [ -s "$TMP/werr.$i" ]; then fail "writer $i reported: $(head -c 300 "$TMP/werr.$i")"; fi
    cat "$TMP/ids.$i" >>"$TMP/ids.all"
    if "$W" verify "$DB" "$TMP/ids.all" >"$TMP/out" 2>"$TMP/err"; then
        pass
    else
        fail "after kill $i: $(head -c 400 "$TMP/err")"
    fi
done
expect_grep out '^verified [0-9]+ committed ids, 0 missing$'
# The kills must have landed on real work, or the test proves nothing.
n=$(grep -c '^P ' "$TMP/ids.all")
if [ "$n" -ge $((KILLS * 5)) ]; then pass; else fail "only $n parts were written across $KILLS runs"; fi
echo "storage_sigkill: $KILLS kills, $n parts committed and found"
finish
