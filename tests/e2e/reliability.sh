#!/bin/bash
# reliability.sh: glmchat under faults, as a user meets them: chats and imports killed with SIGKILL,
# databases with damaged pages, empty, mis-versioned or read-only, and hostile model directories.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
G=$GLMCHAT_BIN
SRC=$GLMCHAT_SRCDIR
KILLS=${RELIABILITY_KILLS:-24}
declare -A SECTION_CHECKS
section_start() { SECTION_BASE=$CHECKS; SECTION_FAILS=$FAILS; }
section_end() { SECTION_CHECKS[$1]="$((CHECKS - SECTION_BASE)) checks, $((FAILS - SECTION_FAILS)) failed"; }

# python3 one-liners on SQLite files: the test's own view of a database, not glmchat's.
sql() { python3 -c 'import sqlite3, sys
c = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
print("\n".join("|".join(map(str, r)) for r in c.execute(sys.argv[2])))' "$@"; }

# A conversation of 3000 messages to import: long enough that kills land inside the import.
python3 - "$TMP/big.json" <<'PY'
import json, sys
msgs = [{"id": i, "parent": i - 1 if i > 1 else None, "role": "user" if i % 2 else "assistant",
         "status": "complete", "created_at": 1764690000000 + i,
         "parts": [{"kind": "text", "text": "message %d of the import " % i + "lorem ipsum " * 20,
                    "created_at": 1764690000000 + i}]} for i in range(1, 3001)]
json.dump({"format": "glmchat-conversation", "version": 1, "title": "big import",
           "created_at": 1764690000000, "updated_at": 1764690009000, "current_leaf": 3000,
           "messages": msgs}, open(sys.argv[1], "w"))
PY
for i in $(seq 1 400); do
    printf '{"type":"reasoning","text":"thinking %d"}\n{"type":"content","text":"reply %d"}\n{"type":"done","finish":"stop"}\n' "$i" "$i"
done >"$CHAT_REPLIES"

# ---- 1. SIGKILL at random moments of chats and imports ----------------------------------------
# Every command that finished before its kill must have kept all it wrote; an import is whole or
# absent; the database passes check-db (the full integrity check) after every kill.
section_start
DB=$TMP/kill/glmchat.db
done_chats=0
done_imports=0
landed=0
# Kill moments are drawn within how long an uninterrupted run of each kind takes on this machine
# (timed once, in a database of its own), so the kills land while the command runs however fast
# the machine is.
run_ms() { # KIND: milliseconds of one whole import (KIND 0) or chat (KIND 1)
    local t0 t1
    t0=$(date +%s%3N)
    if [ "$1" -eq 0 ]; then
        "$G" --db "$TMP/timing.db" import "$TMP/big.json" >/dev/null 2>&1 </dev/null
    else
        rm -f "$CHAT_REPLIES.next"
        printf 'timing question\n' | GLMCHAT_TEST_REPLY_DELAY_MS=10 "$G" --db "$TMP/timing.db" chat \
            >/dev/null 2>&1
    fi
    t1=$(date +%s%3N)
    echo $((t1 - t0))
}
span_import=$(run_ms 0)
span_chat=$(run_ms 1)
for i in $(seq 1 "$KILLS"); do
    if [ $((i % 2)) -eq 0 ]; then
        "$G" --db "$DB" import "$TMP/big.json" >"$TMP/kout" 2>"$TMP/kerr" </dev/null &
    else
        rm -f "$CHAT_REPLIES.next" # the replay hook's own place in the script, not glmchat's
        printf 'turn%d question\n' "$i" |
            GLMCHAT_TEST_REPLY_DELAY_MS=10 "$G" --db "$DB" chat >"$TMP/kout" 2>"$TMP/kerr" &
    fi
    pid=$!
    span=$span_chat
    [ $((i % 2)) -eq 0 ] && span=$span_import
    span=$((span * 9 / 10 > 10 ? span * 9 / 10 : 10))
    ms=$((5 + RANDOM % span))
    sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
    kill -KILL "$pid" 2>/dev/null && landed=$((landed + 1))
    wait "$pid"
    rc=$?
    if [ "$rc" -eq 0 ] && [ $((i % 2)) -eq 0 ]; then done_imports=$((done_imports + 1)); fi
    if [ "$rc" -eq 0 ] && [ $((i % 2)) -eq 1 ]; then
        done_chats=$((done_chats + 1))
        echo "turn$i" >>"$TMP/chats.done"
    fi
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 137 ]; then fail "run $i exited $rc: $(head -c 300 "$TMP/kerr")"; fi
    # a kill before the first database was linked in leaves none: nothing can have been kept yet
    if [ -e "$DB" ]; then
        expect_exit 0 "$G" --db "$DB" check-db
    elif [ $((done_chats + done_imports)) -eq 0 ]; then
        pass
    else
        fail "run $i: the database is gone after $done_chats chats and $done_imports imports finished"
    fi
done
# no loss: each finished chat's question is stored, each import has all 3000 messages
for q in $(cat "$TMP/chats.done" 2>/dev/null); do
    expect_exit 0 "$G" --db "$DB" search --json "$q"
    expect_grep out '"kind":"text"'
done
expect_exit 0 "$G" --db "$DB" list --json
check_py "imports are whole or absent" '
import json, os
convs = json.load(open(os.environ["TMP"] + "/out"))
big = [c["messages"] for c in convs if c["title"] == "big import"]
if any(n != 3000 for n in big): print("partial imports:", [n for n in big if n != 3000])
if len(big) < '"$done_imports"': print("finished imports missing:", len(big), "<", '"$done_imports"')'
if [ "$landed" -ge $((KILLS / 3)) ]; then pass; else fail "only $landed of $KILLS kills hit a running process"; fi
section_end sigkill
echo "reliability: sigkill: $KILLS runs, $landed killed mid-run, $done_chats chats and $done_imports imports finished and kept"

# ---- 2. damaged pages: glmchat refuses to write, exits non-zero, leaves the file as it was ------
section_start
REF=$TMP/ref.db
"$G" --db "$REF" import "$TMP/big.json" >/dev/null 2>&1 || fail "import into the reference database"
rm -f "$CHAT_REPLIES.next"
printf 'a question\n' | "$G" --db "$REF" chat >/dev/null 2>&1 || fail "chat into the reference database"
"$G" --db "$REF" search lorem >/dev/null 2>&1 || fail "indexing the reference database"
pages=$(sql "$REF" 'PRAGMA page_count')
damaged=0
harmless=0
for k in $(seq 1 14); do
    page=$((2 + (k * 7919) % (pages - 1)))
    copy=$TMP/damaged$k.db
    cp "$REF" "$copy"
    # one page of pseudo-random bytes, different for every copy
    python3 -c 'import random, sys
path, page, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(seed)
with open(path, "r+b") as f:
    f.seek((page - 1) * 4096)
    f.write(bytes(random.randrange(256) for _ in range(4096)))' "$copy" "$page" "$k"
    if [ "$(sql "$copy" 'PRAGMA integrity_check' 2>/dev/null | head -1)" = ok ]; then
        harmless=$((harmless + 1)) # a free page: SQLite itself sees nothing wrong
        continue
    fi
    damaged=$((damaged + 1))
    cp "$copy" "$copy.orig"
    rm -f "$CHAT_REPLIES.next"
    printf 'write here\n' | "$G" --db "$copy" chat >"$TMP/out" 2>"$TMP/err"
    if [ $? -ne 0 ]; then pass; else fail "chat on damaged page $page exited 0"; fi
    expect_grep err "damaged.*\.recover"
    expect_exit 1 "$G" --db "$copy" import "$TMP/big.json"
    expect_exit 1 "$G" --db "$copy" check-db
    expect_grep err "damaged"
    if cmp -s "$copy" "$copy.orig"; then pass; else fail "damaged copy $k (page $page) was modified"; fi
done
if [ "$damaged" -ge 7 ]; then pass; else fail "only $damaged of 14 copies were damaged"; fi
section_end damaged
echo "reliability: damaged pages: $damaged damaged copies tried, $harmless copies SQLite finds intact skipped: ${SECTION_CHECKS[damaged]}"

# ---- 3. empty, mis-versioned and read-only databases -----------------------------------------
section_start
: >"$TMP/empty.db"
expect_exit 1 "$G" --db "$TMP/empty.db" list
expect_grep err 'empty file \(0 bytes\)'
if [ ! -s "$TMP/empty.db" ]; then pass; else fail "list initialised an empty file"; fi
cp "$REF" "$TMP/neg.db"
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("PRAGMA user_version = -5"); c.close()' "$TMP/neg.db"
expect_exit 1 "$G" --db "$TMP/neg.db" list
expect_grep err 'schema version -5, which no glmchat writes'
cp "$REF" "$TMP/future.db"
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("PRAGMA user_version = 99"); c.close()' "$TMP/future.db"
expect_exit 1 "$G" --db "$TMP/future.db" list
expect_grep err 'newer glmchat \(schema 99;'
# read-only: the file's mode, then its directory; root ignores both, so run as nobody
as_user() { if [ "$(id -u)" -eq 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; else "$@"; fi; }
mkdir -p "$TMP/ro"
chmod 755 "$TMP" "$TMP/ro"
cp "$REF" "$TMP/ro/glmchat.db"
chmod 444 "$TMP/ro/glmchat.db"
for how in file directory; do
    [ "$how" = directory ] && chmod 644 "$TMP/ro/glmchat.db" && chmod 555 "$TMP/ro"
    cp "$TMP/ro/glmchat.db" "$TMP/ro.orig"
    as_user "$G" --db "$TMP/ro/glmchat.db" list >"$TMP/out" 2>"$TMP/err"
    if [ $? -eq 0 ] && grep -q 'big import' "$TMP/out"; then pass; else fail "list on a read-only $how: $(head -c 300 "$TMP/err")"; fi
    as_user "$G" --db "$TMP/ro/glmchat.db" search question >"$TMP/out" 2>"$TMP/err"
    if [ $? -eq 0 ] && grep -q 'question' "$TMP/out"; then pass; else fail "search on a read-only $how: $(head -c 300 "$TMP/err")"; fi
    as_user "$G" --db "$TMP/ro/glmchat.db" search nothing-like-it >"$TMP/out" 2>"$TMP/err"
    if grep -q 'not in the search index' "$TMP/err"; then fail "a read-only $how with all indexed warned"; else pass; fi
    as_user "$G" --db "$TMP/ro/glmchat.db" export 1 --format md >"$TMP/out" 2>"$TMP/err"
    if [ $? -eq 0 ] && grep -q 'message 3000 of the import' "$TMP/out"; then pass; else fail "export on a read-only $how: $(head -c 300 "$TMP/err")"; fi
    as_user "$G" --db "$TMP/ro/glmchat.db" import "$TMP/big.json" >"$TMP/out" 2>"$TMP/err"
    if [ $? -eq 1 ] && grep -q 'cannot be written' "$TMP/err"; then pass; else fail "import into a read-only $how: $(head -c 300 "$TMP/err")"; fi
    if [ ! -e "$TMP/ro/glmchat.db-wal" ] && [ ! -e "$TMP/ro/glmchat.db-shm" ]; then pass; else fail "side files left beside a read-only $how"; fi
    if cmp -s "$TMP/ro/glmchat.db" "$TMP/ro.orig"; then pass; else fail "the read-only $how database changed"; fi
done
# a WAL holding a commit the file lacks (its writer killed): read through the -shm beside it, or
# refused with the way out when the directory allows neither reading nor making one
chmod 755 "$TMP/ro"
rm -f "$TMP/ro/glmchat.db"*
cp "$REF" "$TMP/ro/glmchat.db"
python3 -c 'import os, signal, sqlite3, sys
c = sqlite3.connect(sys.argv[1]); c.execute("PRAGMA wal_autocheckpoint = 0")
c.execute("UPDATE conversation SET title = ? WHERE id = 1", ("only in the wal",)); c.commit()
os.kill(os.getpid(), signal.SIGKILL)' "$TMP/ro/glmchat.db" 2>/dev/null
chmod 444 "$TMP/ro/glmchat.db"*
chmod 555 "$TMP/ro"
as_user "$G" --db "$TMP/ro/glmchat.db" list >"$TMP/out" 2>"$TMP/err"
if [ $? -eq 0 ] && grep -q 'only in the wal' "$TMP/out"; then pass; else fail "list through a read-only WAL: $(head -c 300 "$TMP/err")"; fi
chmod 755 "$TMP/ro" && rm -f "$TMP/ro/glmchat.db-shm" && chmod 555 "$TMP/ro"
as_user "$G" --db "$TMP/ro/glmchat.db" list >"$TMP/out" 2>"$TMP/err"
if [ $? -eq 1 ] && grep -q -- '-wal file holds changes' "$TMP/err"; then pass; else fail "a read-only WAL without -shm: $(head -c 300 "$TMP/err")"; fi
chmod 755 "$TMP/ro"
section_end databases

# ---- 4. hostile model directories: refused fast, with the field or limit named -----------------
section_start
hostile() { # hostile NAME NEEDLE CMD...: exits 1 within 20 s, stderr holding NEEDLE
    local name=$1 needle=$2; shift 2
    timeout 20 env -u GLMCHAT_TEST_REPLIES -u GLMCHAT_TEST_REQUESTS "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    local rc=$?
    if [ "$rc" -eq 1 ] && grep -Eq -- "$needle" "$TMP/err"; then pass; else
        fail "$name: exit $rc, stderr: $(head -c 300 "$TMP/err")"; fi
}
config_with() { # config_with DIR KEY VALUE: tiny-A with one config field replaced
    mkdir -p "$1"
    cp "$SRC/tests/fixtures/models/tiny-A/"*.json "$SRC/tests/fixtures/models/tiny-A/model.safetensors" "$1/"
    python3 -c 'import json, sys
p = sys.argv[1] + "/config.json"
c = json.load(open(p))
(c.get("text_config") or c)[sys.argv[2]] = json.loads(sys.argv[3])
json.dump(c, open(p, "w"))' "$1" "$2" "$3"
}
config_with "$TMP/m_sinkhorn" hc_sinkhorn_iters 999999999
hostile sinkhorn 'hc_sinkhorn_iters: 999999999 is out of range \(min 1, max 100\)' \
    "$G" --model "$TMP/m_sinkhorn" --backend cpu chat --no-save --max-tokens 1 --prompt hi
config_with "$TMP/m_vocab" vocab_size 1e12
hostile vocab 'vocab_size: 1000000000000 is out of range' \
    "$G" --model "$TMP/m_vocab" --backend cpu chat --no-save --max-tokens 1 --prompt hi
config_with "$TMP/m_layers" num_hidden_layers 100000
hostile layers 'num_hidden_layers: 100000 is out of range \(min 1, max 256\)' \
    "$G" --model "$TMP/m_layers" --backend cpu chat --no-save --max-tokens 1 --prompt hi
st_file() { # st_file PATH HEADER [DATA_BYTES [CLAIMED_LEN]]: a safetensors file by hand
    python3 -c 'import struct, sys
h = sys.argv[2].encode().decode("unicode_escape").encode("latin-1")
n = int(sys.argv[4]) if len(sys.argv) > 4 else len(h)
open(sys.argv[1], "wb").write(struct.pack("<Q", n) + h + bytes(int(sys.argv[3])))' "$@"
}
mkdir -p "$TMP/m_st"
cp "$SRC/tests/fixtures/models/tiny-A/config.json" "$TMP/m_st/"
st_case() { # st_case NAME NEEDLE HEADER [DATA [CLAIMED]]
    local name=$1 needle=$2; shift 2
    st_file "$TMP/m_st/model.safetensors" "$@"
    hostile "$name" "$needle" "$G" --model "$TMP/m_st" dump-tensor --name t --out "$TMP/t.f32"
}
st_case overflow 'overflows 64 bits' '{"t":{"dtype":"F32","shape":[9223372036854775807,2],"data_offsets":[0,0]}}' 8
st_case zero-byte-giant 'overflows 64 bits' '{"t":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}' 8
st_case overlap 'overlap' '{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}' 16
st_case nul 'NUL byte' '{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}\x00\x00\x00\x00' 4
st_case huge-header 'above glmchat.s limit of 100 MiB' '{}' 0 262144000
# a header that claims 250 MiB and has them: refused before any of it is parsed
python3 -c 'import struct, sys
f = open(sys.argv[1], "wb"); f.write(struct.pack("<Q", 250 << 20)); f.truncate(8 + (250 << 20))' "$TMP/m_st/model.safetensors"
hostile real-huge-header 'above glmchat.s limit of 100 MiB' /usr/bin/time -f '%M' -o "$TMP/rss" \
    "$G" --model "$TMP/m_st" dump-tensor --name t --out "$TMP/t.f32"
rss=$(tail -1 "$TMP/rss" 2>/dev/null)
if [ "${rss:-0}" -gt 0 ] && [ "$rss" -lt 65536 ]; then pass; else fail "refusing a 250 MiB header took '$rss' KiB"; fi
mkdir -p "$TMP/m_tok"
cp "$SRC/tests/fixtures/models/tiny-A/config.json" "$TMP/m_tok/"
truncate -s 65M "$TMP/m_tok/tokenizer.json"
hostile big-tokenizer 'tokenizer.json is [0-9]+ bytes, above glmchat.s limit of 64 MiB' \
    sh -c "echo hi | '$G' --model '$TMP/m_tok' tokenize"
section_end model
echo "reliability: hostile models: ${SECTION_CHECKS[model]}"

echo "reliability: summary: sigkill ${SECTION_CHECKS[sigkill]}; damaged ${SECTION_CHECKS[damaged]}; databases ${SECTION_CHECKS[databases]}; model ${SECTION_CHECKS[model]}"
finish
