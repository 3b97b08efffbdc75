#!/bin/bash
# chat_workspace.sh: the file tools answer alike for a path outside the workspace whether it
# exists or not (nothing tells what is out there); run_command keeps the bytes after a NUL in
# its output and says how many NULs it escaped.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/chat_lib.sh"
G=$GLMCHAT_BIN
WS="$TMP/ws"
OUT="$TMP/outside"
mkdir -p "$WS" "$OUT/dir"
echo secret >"$OUT/secret"
ln -s "$OUT" "$WS/link"
printf 'workspace = %s\napproval = auto\n' "$WS" >"$XDG_CONFIG_HOME/glmchat/config"

# call TOOL ARGS_JSON: the text of its result, in $TMP/result.
call() {
    rm -f "$CHAT_REPLIES.next"
    printf '{"type":"tool_call","name":"%s","arguments":%s}\n{"type":"done","finish":"tool_calls"}\n{"type":"content","text":"ok"}\n{"type":"done","finish":"stop"}\n' \
        "$1" "$2" >"$CHAT_REPLIES"
    "$G" chat --allow-tools --output-format jsonl --prompt "call" </dev/null >"$TMP/out" 2>"$TMP/err"
    python3 -c '
import json, sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e["type"] == "tool_result": print(e["text"], end="")' "$TMP/out" >"$TMP/result"
}

# same_answer TOOL KEY PATH_A PATH_B [EXTRA]: the answers differ only in the path named.
same_answer() {
    call "$1" "{\"$2\":\"$3\"${5:-}}"
    sed "s|$3|PATH|g" "$TMP/result" >"$TMP/a"
    call "$1" "{\"$2\":\"$4\"${5:-}}"
    sed "s|$4|PATH|g" "$TMP/result" >"$TMP/b"
    if cmp -s "$TMP/a" "$TMP/b"; then pass; else fail "$1 tells $3 from $4: '$(cat "$TMP/a")' vs '$(cat "$TMP/b")'"; fi
    grep -q 'is outside the workspace' "$TMP/a" && pass || fail "$1 $3: $(cat "$TMP/a")"
}

same_answer read_file path "$OUT/secret" "$OUT/missing"
same_answer read_file path "$OUT/dir" "$OUT/missing-dir/x"
same_answer read_file path "../outside/secret" "../outside/missing"
same_answer read_file path "link/secret" "link/missing"
same_answer list_directory path "$OUT/dir" "$OUT/missing-dir"
same_answer search_files path "$OUT/secret" "$OUT/missing" ',"pattern":"s"'
same_answer write_file path "$OUT/dir/new" "$OUT/missing-dir/new" ',"content":"x"'
same_answer write_file path "link/dir/new" "link/missing-dir/new" ',"content":"x"'
if [ -e "$OUT/dir/new" ]; then fail "write_file wrote outside the workspace"; else pass; fi
# inside the workspace a missing file is said plainly
call read_file '{"path":"missing.txt"}'
grep -q 'No such file' "$TMP/result" && pass || fail "a missing file inside: $(cat "$TMP/result")"

# NUL bytes in a command's output: the bytes after them are kept, the NULs counted.
call run_command '{"command":"printf \"a\\000b\\000tail\""}'
check_py "NULs in the output" '
import os
r = open(os.environ["TMP"] + "/result").read()
want = "a\\0b\\0tail\n[2 NUL bytes in the output are shown as \\0]\n[exit status 0]"
if r != want: print("FAIL: %r, expected %r" % (r, want))
'
finish
