#!/bin/bash
# engine_reuse.sh: prompt reuse. A second turn in the same process prefills only what the
# session does not hold, and its reply equals, byte for byte, the reply after a full prefill
# (a fresh process continuing the same conversation), greedy and seeded-sampled. With a prompt
# cache directory, fresh processes resume from kept-state files, and bad files are refused
# loudly (the file and the reason) without changing a reply. Drafted decoding (GLMCHAT_DRAFT copy
# or mtp) gives the same replies as plain decoding.
. "$(dirname "$0")/lib.sh"
unset GLMCHAT_TEST_REPLIES GLMCHAT_TEST_REQUESTS
G=$GLMCHAT_BIN
M="$TMP/model"
expect_exit 0 "$G" mkmodel --out "$M" --preset tiny --seed 11

replies() { # FILE: each turn's streamed text, one JSON string a line; then reused counts
    python3 - "$1" <<'PY'
import json, sys
cur, reused = [], []
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["type"] in ("content", "reasoning", "tool_call_begin", "tool_call_delta"):
        cur.append(e.get("text", ""))
    elif e["type"] == "done":
        reused.append(e["reused_tokens"])
    elif e["type"] == "turn_end":
        print(json.dumps("".join(cur)))
        cur = []
print("reused", *reused)
PY
}

for mode in greedy sampled; do
    if [ $mode = greedy ]; then export GLMCHAT_TEMPERATURE=0; unset GLMCHAT_SEED
    else export GLMCHAT_TEMPERATURE=0.9 GLMCHAT_SEED=1234; fi
    printf 'Hello there, model\nA second question\nA third one\n' >"$TMP/prompts"
    "$G" --db "$TMP/one-$mode.db" --model "$M" --backend cpu chat --lines --output-format jsonl \
        --max-tokens 24 <"$TMP/prompts" >"$TMP/out" 2>"$TMP/err"
    [ $? -eq 0 ] && pass || fail "$mode: a three-turn session from stdin failed: $(head -c 300 "$TMP/err")"
    replies "$TMP/out" >"$TMP/kept-$mode"
    : >"$TMP/fresh-$mode.jsonl"
    cont=""
    while read -r p; do
        expect_exit 0 "$G" --db "$TMP/two-$mode.db" --model "$M" --backend cpu chat $cont \
            --output-format jsonl --max-tokens 24 --prompt "$p"
        cat "$TMP/out" >>"$TMP/fresh-$mode.jsonl"
        cont=-c
    done <"$TMP/prompts"
    replies "$TMP/fresh-$mode.jsonl" >"$TMP/full-$mode"
    if diff <(grep -v '^reused' "$TMP/kept-$mode") <(grep -v '^reused' "$TMP/full-$mode") >"$TMP/diff"; then
        pass
    else
        fail "$mode: replies after reuse differ from replies after a full prefill: $(head -c 600 "$TMP/diff")"
    fi
    [ "$(grep -c . "$TMP/kept-$mode")" -eq 4 ] && pass || fail "$mode: expected 3 replies: $(cat "$TMP/kept-$mode")"
    # Turns 2 and 3 reuse a prefix; full prefills reuse nothing.
    if grep -Eq '^reused 0 [1-9][0-9]* [1-9][0-9]*$' "$TMP/kept-$mode"; then pass; else
        fail "$mode: in-process turns did not reuse the kept prompt: $(grep reused "$TMP/kept-$mode")"; fi
    grep -q '^reused 0 0 0$' "$TMP/full-$mode" && pass || fail "$mode: fresh processes reused: $(grep reused "$TMP/full-$mode")"
done

# Drafted decoding: copy drafts on the tiny model, MTP drafts on one with an MTP layer (which
# drafts every step): the same three-turn session gives the same replies, greedy and seeded.
expect_exit 0 "$G" mkmodel --out "$TMP/mtp" --preset tiny-mtp --seed 12
session() { # MODEL DRAFT (empty: the config file's) DB OUT
    GLMCHAT_DRAFT=$2 "$G" --db "$3" --model "$1" --backend cpu chat --lines --output-format jsonl \
        --max-tokens 24 <"$TMP/prompts" >"$4" 2>"$TMP/err"
    [ $? -eq 0 ] && pass || fail "$2 drafts on $1: the session failed: $(head -c 300 "$TMP/err")"
}
for mode in greedy sampled; do
    if [ $mode = greedy ]; then export GLMCHAT_TEMPERATURE=0; unset GLMCHAT_SEED
    else export GLMCHAT_TEMPERATURE=0.9 GLMCHAT_SEED=1234; fi
    session "$M" copy "$TMP/copy-$mode.db" "$TMP/out"
    replies "$TMP/out" >"$TMP/drafted"
    diff "$TMP/drafted" "$TMP/kept-$mode" >"$TMP/diff" && pass ||
        fail "$mode: replies with copy drafts differ: $(head -c 600 "$TMP/diff")"
    session "$TMP/mtp" off "$TMP/mtp-off-$mode.db" "$TMP/out"
    replies "$TMP/out" >"$TMP/mtp-plain"
    cp "$TMP/mtp-plain" "$TMP/mtp-plain-$mode"
    cp "$TMP/out" "$TMP/mtp-off.jsonl"
    session "$TMP/mtp" mtp "$TMP/mtp-on-$mode.db" "$TMP/out"
    replies "$TMP/out" >"$TMP/mtp-drafted"
    # each reply's stats say what drafting did so far (windows, drafts checked and accepted; the
    # model with an MTP layer drafts every reply); undrafted replies carry no such fields
    res=$(python3 - "$TMP/out" "$TMP/mtp-off.jsonl" <<'PY'
import json, sys
def stats(p):
    return [e for e in map(json.loads, open(p)) if e["type"] in ("stats", "done")]
on, off = stats(sys.argv[1]), stats(sys.argv[2])
bad = [e for e in on if not (0 <= e.get("drafts_accepted", -1) <= e.get("drafts_proposed", -1) and
       e.get("draft_windows", -1) >= (1 if e["type"] == "done" else 0))]
if not on or bad: print("drafted stats: %r" % (bad or on)[:2])
if any("draft_windows" in e for e in off): print("undrafted stats carry draft fields: %r" % off[:1])
PY
)
    [ -z "$res" ] && pass || fail "$mode: $res"
    # --output-format json's usage sums them over the turn's steps
    GLMCHAT_DRAFT=mtp "$G" --db "$TMP/mtp-json-$mode.db" --model "$TMP/mtp" --backend cpu chat \
        --output-format json --max-tokens 24 --prompt "Hello there, model" >"$TMP/json" 2>"$TMP/err"
    res=$(python3 - "$TMP/json" <<'PY'
import json, sys
u = json.load(open(sys.argv[1]))["usage"]
if not (u.get("draft_windows", 0) > 0 and 0 <= u.get("drafts_accepted", -1) <= u.get("drafts_proposed", -1)):
    print("json usage: %r" % u)
PY
)
    [ -z "$res" ] && pass || fail "$mode: $res $(head -c 300 "$TMP/err")"
    diff "$TMP/mtp-drafted" "$TMP/mtp-plain" >"$TMP/diff" && pass ||
        fail "$mode: replies with MTP drafts differ: $(head -c 600 "$TMP/diff")"
    [ "$(grep -c . "$TMP/mtp-plain")" -eq 4 ] && pass || fail "$mode: MTP model replies: $(cat "$TMP/mtp-plain")"
done

# The same through the config file: draft, prompt_cache_mb and prompt_cache_dir.
mkdir -p "$XDG_CONFIG_HOME/glmchat"
printf 'draft = mtp\nprompt_cache_mb = 64\nprompt_cache_dir = %s\n' "$TMP/kept-cfg" >"$XDG_CONFIG_HOME/glmchat/config"
export GLMCHAT_TEMPERATURE=0; unset GLMCHAT_SEED
session "$TMP/mtp" "" "$TMP/cfg.db" "$TMP/out"
replies "$TMP/out" >"$TMP/cfg-replies"
diff <(grep -v '^reused' "$TMP/cfg-replies") <(grep -v '^reused' "$TMP/mtp-plain-greedy") \
    >"$TMP/diff" && pass || fail "config draft = mtp: replies differ: $(head -c 600 "$TMP/diff")"
ls "$TMP/kept-cfg"/*.kept >/dev/null 2>&1 && pass || fail "config prompt_cache_dir: no kept-state files"
rm "$XDG_CONFIG_HOME/glmchat/config"

# Drafting that cannot run is refused by name, never silently turned off.
export GLMCHAT_DRAFT=bogus
expect_exit 1 "$G" --db "$TMP/refuse.db" --model "$M" --backend cpu chat --prompt hi --no-save
expect_grep err "GLMCHAT_DRAFT: 'draft' takes off, copy or mtp, not 'bogus'"
export GLMCHAT_DRAFT=mtp
expect_exit 1 "$G" --db "$TMP/refuse.db" --model "$M" --backend cpu chat --prompt hi --no-save
expect_grep err "draft = mtp: .* has no MTP layer"
unset GLMCHAT_DRAFT

# The disk tier: each turn in a fresh process, kept states in a directory.
export GLMCHAT_TEMPERATURE=0 GLMCHAT_PROMPT_CACHE_DIR="$TMP/kept"
unset GLMCHAT_SEED
: >"$TMP/disk.jsonl"
cont=""
while read -r p; do
    expect_exit 0 "$G" --db "$TMP/three.db" --model "$M" --backend cpu chat $cont \
        --output-format jsonl --max-tokens 24 --prompt "$p"
    cat "$TMP/out" >>"$TMP/disk.jsonl"
    cont=-c
done <"$TMP/prompts"
replies "$TMP/disk.jsonl" >"$TMP/disk"
diff <(grep -v '^reused' "$TMP/disk") <(grep -v '^reused' "$TMP/full-greedy") >"$TMP/diff" && pass ||
    fail "replies resumed from kept-state files differ from full prefills: $(head -c 600 "$TMP/diff")"
grep -Eq '^reused 0 [1-9][0-9]* [1-9][0-9]*$' "$TMP/disk" && pass ||
    fail "fresh processes did not resume from kept-state files: $(grep reused "$TMP/disk")"
n_files=$(ls "$TMP/kept" | grep -c '\.kept$')
[ "$n_files" -ge 3 ] && pass || fail "expected kept-state files, found $n_files: $(ls "$TMP/kept")"

# Damaged files: one corrupted, one truncated, one not a kept-state file at all. The shortest
# state (HASH-LENGTH.kept) is the first any later prompt resumes from, so its checksum is read.
set -- $(ls "$TMP"/kept/*.kept | sort -t- -k2 -n)
python3 - "$1" "$2" "$TMP/kept/garbage.kept" <<'PY'
import sys
corrupt, short, garbage = sys.argv[1:4]
b = bytearray(open(corrupt, "rb").read()); b[-5] ^= 0x10; open(corrupt, "wb").write(b)
b = open(short, "rb").read(); open(short, "wb").write(b[: len(b) - 7])
open(garbage, "wb").write(b"this is not a kept state; " * 4)
PY
: >"$TMP/damaged.jsonl"
cont=""
while read -r p; do
    "$G" --db "$TMP/four.db" --model "$M" --backend cpu chat $cont --output-format jsonl \
        --max-tokens 24 --prompt "$p" </dev/null >"$TMP/out" 2>>"$TMP/damaged.err"
    [ $? -eq 0 ] && pass || fail "a run with damaged kept-state files failed: $(tail -c 300 "$TMP/damaged.err")"
    cat "$TMP/out" >>"$TMP/damaged.jsonl"
    cont=-c
done <"$TMP/prompts"
replies "$TMP/damaged.jsonl" >"$TMP/damaged"
diff <(grep -v '^reused' "$TMP/damaged") <(grep -v '^reused' "$TMP/full-greedy") >"$TMP/diff" && pass ||
    fail "replies with damaged kept-state files differ: $(head -c 600 "$TMP/diff")"
expect_grep damaged.err "garbage.kept refused: not a kept-state file \(no GLMKEPT1 signature\); deleted"
expect_grep damaged.err "$(basename "$2") refused: truncated.*; deleted"
expect_grep damaged.err "$(basename "$1") refused: checksum mismatch: the file is corrupted; deleted"
[ ! -e "$TMP/kept/garbage.kept" ] && pass || fail "a damaged kept-state file was not deleted"
[ "$(grep -c 'refused' "$TMP/damaged.err")" -eq 3 ] && pass ||
    fail "damaged files were refused more than once: $(grep refused "$TMP/damaged.err")"

# The disk budget (prompt_cache_disk_mb): 0 writes no file, and no temporary file is left.
GLMCHAT_PROMPT_CACHE_DIR="$TMP/kept0" GLMCHAT_PROMPT_CACHE_DISK_MB=0 expect_exit 0 "$G" --db "$TMP/five.db" \
    --model "$M" --backend cpu chat --output-format jsonl --max-tokens 4 --prompt "Hello there, model"
[ -d "$TMP/kept0" ] && [ -z "$(ls -A "$TMP/kept0")" ] && pass ||
    fail "prompt_cache_disk_mb 0 wrote files: $(ls -A "$TMP/kept0")"
[ -z "$(ls "$TMP/kept" | grep '\.tmp$')" ] && pass || fail "temporary files left: $(ls "$TMP/kept")"
GLMCHAT_PROMPT_CACHE_DISK_MB=lots expect_exit 1 "$G" --db "$TMP/five.db" --model "$M" --backend cpu \
    chat --prompt hi --no-save
expect_grep err "GLMCHAT_PROMPT_CACHE_DISK_MB: 'prompt_cache_disk_mb' takes a whole number from 0 to 16777216, not 'lots'"
unset GLMCHAT_PROMPT_CACHE_DIR
finish
