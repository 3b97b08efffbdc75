#!/bin/bash
# storage_cli.sh: `glmchat list`, `search`, `export` and `import` on real database files: output
# shapes, the lossless JSON round trip through the CLI, usage and runtime errors.
. "$(dirname "$0")/lib.sh"
G=$GLMCHAT_BIN
export GLMCHAT_DB=$TMP/db/glmchat.db

for c in list search export import; do
    expect_exit 0 "$G" $c --help
    expect_grep out "^Usage: glmchat $c"
done

# Reading commands never create a database: a mistyped --db is named, not made.
expect_exit 1 "$G" list
expect_grep err "^glmchat: no database at $TMP/db/glmchat.db: nothing has been saved there"
expect_exit 1 "$G" search paris
expect_grep err "^glmchat: no database at $TMP/db/glmchat.db: "
expect_exit 1 "$G" export --all --format md
expect_grep err "^glmchat: no database at $TMP/db/glmchat.db: "
expect_exit 1 "$G" --db "$TMP/typo.db" list --json
expect_grep err "^glmchat: no database at $TMP/typo.db: "
expect_empty out
if [ ! -e "$TMP/db" ] && [ ! -e "$TMP/typo.db" ]; then pass; else fail "a reading command created a database"; fi

cat >"$TMP/in.json" <<'JSON'
{
  "format": "glmchat-conversation",
  "version": 1,
  "id": 41,
  "title": "Trip <planning> & \"more\"",
  "model": "glm-5.3-flash",
  "system_prompt": null,
  "settings_json": "{\"temperature\": 0.6}",
  "created_at": 1764690000000,
  "updated_at": 1764690005000,
  "current_leaf": 3,
  "messages": [
    {"id": 1, "parent": null, "role": "user", "status": "complete", "created_at": 1764690000000,
     "parts": [{"kind": "text", "text": "Plan a day in Paris", "created_at": 1764690000001}]},
    {"id": 2, "parent": 1, "role": "assistant", "status": "canceled", "created_at": 1764690001000,
     "parts": [{"kind": "text", "text": "First try", "created_at": 1764690001001}]},
    {"id": 3, "parent": 1, "role": "assistant", "status": "complete", "model": "glm-5.3-flash",
     "finish_reason": "stop", "created_at": 1764690002000, "finished_at": 1764690004000,
     "completion_tokens": 12, "gen_ms": 400,
     "parts": [
       {"kind": "reasoning", "text": "They like Montmartre.\n", "created_at": 1764690002001},
       {"kind": "tool_call", "name": "weather", "call_id": "call_1", "arguments": "{\"city\":\"Paris\"}", "created_at": 1764690002002},
       {"kind": "tool_result", "name": "weather", "call_id": "call_1", "text": "drizzle", "is_error": false, "created_at": 1764690002003},
       {"kind": "text", "text_b64": "U3VubnkhIP8=", "created_at": 1764690002004}
     ]}
  ]
}
JSON

expect_exit 0 "$G" import "$TMP/in.json"
expect_grep out '^1$'
if [ "$(stat -c %a "$TMP/db")" = 700 ]; then pass; else fail "database directory is not mode 700"; fi
expect_exit 0 "$G" list
expect_grep out '^ +ID +UPDATED \(UTC\) +MSGS +TITLE$'
expect_grep out '^ +1  2025-12-02 15:40 +3  Trip <planning> & "more"$'
expect_exit 0 "$G" list --json
expect_grep out '"id":1,"title":"Trip <planning> & \\"more\\"".*"messages":3'

expect_exit 0 "$G" search montmartre
expect_grep out '^conversation 1, message 3 \(assistant, reasoning\): Trip'
expect_grep out '\[Montmartre\]'
expect_exit 0 "$G" search --json PARIS day
expect_grep out '"conversation":1,"message":1,.*"kind":"text"'
expect_exit 0 "$G" search --json drizzle   # tool results are not indexed
expect_grep out '^\[\]$'
expect_exit 0 "$G" search '"unbalanced' 'NEAR('
# options after the words, as every command takes them
expect_exit 0 "$G" search PARIS day --json --limit 1
expect_grep out '^\[\{"conversation":1,"message":1,.*\}\]$'
expect_exit 0 "$G" search -- --json
expect_empty out
expect_grep err "nothing matches '--json'"
expect_exit 2 "$G" search
expect_grep err 'needs a QUERY'

# Lossless: export, import, export again: identical but for the top-level id.
expect_exit 0 "$G" export 1 --format json -o "$TMP/a.json"
expect_empty out
if [ "$(stat -c %a "$TMP/a.json")" = 600 ]; then pass; else fail "export file is not mode 600"; fi
expect_exit 0 "$G" import "$TMP/a.json"
expect_grep out '^2$'
expect_exit 0 "$G" export 2 -o "$TMP/b.json"
sed 's/^  "id": [0-9]*,$/  "id": N,/' "$TMP/a.json" >"$TMP/a.norm"
sed 's/^  "id": [0-9]*,$/  "id": N,/' "$TMP/b.json" >"$TMP/b.norm"
if cmp -s "$TMP/a.norm" "$TMP/b.norm"; then pass; else fail "re-export differs: $(diff "$TMP/a.norm" "$TMP/b.norm" | head -5)"; fi
if ! cmp -s "$TMP/a.json" "$TMP/b.json"; then pass; else fail "the id should differ"; fi
expect_grep_file() { if grep -Eq -- "$2" "$1"; then pass; else fail "$1 lacks /$2/"; fi; }
expect_grep_file "$TMP/a.json" '"text_b64": "U3VubnkhIP8="'
expect_grep_file "$TMP/a.json" '"arguments": "\{\\"city\\":\\"Paris\\"\}"'

expect_exit 0 "$G" export --all --format json -o "$TMP/all.json"
expect_exit 0 "$G" import "$TMP/all.json"
expect_grep out '^3$'
expect_grep out '^4$'

expect_exit 0 "$G" export 1 --format md
expect_grep out '^# Trip <planning> & "more"$'
expect_grep out '^<summary>Reasoning</summary>$'
expect_grep out '^\*\*Tool call\*\* `` weather `` id `` call_1 ``$'
expect_grep out '^\{"city":"Paris"\}$'
expect_grep out '^drizzle$'
expect_exit 0 "$G" export --all --format html -o "$TMP/all.html"
expect_grep_file "$TMP/all.html" '<h1>Trip &lt;planning&gt; &amp; &quot;more&quot;</h1>'
if grep -Eq '<script|<link|src="|href="' "$TMP/all.html"; then fail "HTML refers to outside assets"; else pass; fi

expect_exit 2 "$G" export --format md
expect_grep err 'needs a conversation ID'
expect_exit 2 "$G" export one
expect_grep err "'one' is not a conversation id"
expect_exit 2 "$G" export 1 --format pdf
expect_grep err "'--format' takes md, json or html, not 'pdf'"
expect_exit 2 "$G" export 1 --all
expect_exit 1 "$G" export 99
expect_grep err 'conversation 99 does not exist'
expect_exit 1 "$G" import "$TMP/missing.json"
expect_grep err "cannot read $TMP/missing.json"
printf '{"format": "glmchat-conversation", "version": 1, "messages": [' >"$TMP/cut.json"
expect_exit 1 "$G" import "$TMP/cut.json"
expect_grep err 'not valid JSON'

# An id is never given twice: after the newest conversation (4) is deleted, the next one is 5,
# and `export 4` (from a script or shell history) fails instead of exporting another one.
expect_exit 0 "$G" delete --yes 4
expect_exit 0 "$G" import "$TMP/in.json"
expect_grep out '^5$'
expect_exit 1 "$G" export 4
expect_grep err 'conversation 4 does not exist'

# A file that is not a database is refused, named, and left as it was.
printf 'these are my notes\n%.0s' $(seq 200) >"$TMP/notes.txt"
cp "$TMP/notes.txt" "$TMP/notes.orig"
expect_exit 1 "$G" --db "$TMP/notes.txt" list
expect_grep err "$TMP/notes.txt is not a glmchat database"
if cmp -s "$TMP/notes.txt" "$TMP/notes.orig"; then pass; else fail "notes.txt was modified"; fi
finish
