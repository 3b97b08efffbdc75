#!/bin/bash
# chat_tui_export.sh: /export in the TUI (a real terminal under tmux) and `glmchat export -o`:
# the format from the command or from the file's name, a folder, "~/", names with spaces,
# replacing a file (said so), mode 0600, and the errors (no format, a path that cannot be written);
# `glmchat export -o` likewise, a folder included.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tui_lib.sh"
. "$(dirname "$0")/chat_lib.sh"
tui_chat_setup

cat >"$CHAT_REPLIES" <<'R'
{"type":"content","text":"Exported reply text."}
{"type":"done","finish":"stop"}
R

# is_format FILE FORMAT: FILE holds a transcript in FORMAT (json, html or md) and is mode 0600.
is_format() {
    check_py "$1 as $2" "
import json, os, stat
p = '$1'
if not os.path.exists(p): print('no file'); raise SystemExit
if stat.S_IMODE(os.stat(p).st_mode) != 0o600: print('mode %o' % stat.S_IMODE(os.stat(p).st_mode))
t = open(p, encoding='utf-8').read()
if '$2' == 'json':
    d = json.loads(t)
    if d.get('format') != 'glmchat-conversation': print('not a glmchat JSON export')
elif '$2' == 'html':
    if not t.startswith('<!DOCTYPE html>'): print('not HTML: %r' % t[:40])
else:
    if t.startswith('{') or t.startswith('<'): print('not Markdown: %r' % t[:40])
if 'Exported reply text.' not in t: print('the reply is missing')
"
}

tui_start
type_text "$RUN HOME='$HOME' '$G'"
keys Enter
expect_screen 'ready' 5 "the TUI is up"
type_text "/export"; keys Enter
expect_screen 'nothing to export yet' 3 "an empty conversation has nothing to export"
type_text "hello"; keys Enter
expect_screen 'Exported reply text\.' 5 "the reply"
expect_screen 'ready' 5 "it ended"

type_text "/export"; keys Enter
expect_screen "wrote $TMP/ws/glmchat-1\\.md \\(Markdown\\)" 3 "/export alone: Markdown here, the full path said"
is_format "$TMP/ws/glmchat-1.md" md
type_text "/export notes.html"; keys Enter
expect_screen 'notes\.html \(HTML\)' 3 "/export FILE.html: the name says HTML"
is_format "$TMP/ws/notes.html" html
type_text "/export notes.JSON"; keys Enter
expect_screen 'notes\.JSON \(JSON\)' 3 "the extension in any case"
is_format "$TMP/ws/notes.JSON" json
type_text "/export json ~/My Notes.txt"; keys Enter
expect_screen 'home/My Notes\.txt \(JSON\)' 3 "a format first, then ~/ and a name with a space"
is_format "$HOME/My Notes.txt" json
mkdir -p "$TMP/exports"
type_text "/export html $TMP/exports"; keys Enter
expect_screen 'exports/glmchat-1\.html \(HTML\)' 3 "a folder takes glmchat-ID.FORMAT"
is_format "$TMP/exports/glmchat-1.html" html
type_text "/export md notes.html"; keys Enter
expect_screen 'notes\.html \(Markdown; it' 3 "the format given wins over the name"
expect_screen 'replaced the file that was there\)' 2 "replacing a file is said"
is_format "$TMP/ws/notes.html" md
type_text "/export notes.txt"; keys Enter
expect_screen "'notes\\.txt' is not a format \\(md, json, html\\)" 3 "a name that says no format: an error"
expect_screen 'say which: /export md notes\.txt' 2 "and how to say it"
if [ -e "$TMP/ws/notes.txt" ]; then fail "notes.txt was written"; else pass; fi
type_text "/export md $TMP/no/such/dir/x.md"; keys Enter
expect_screen '/export: cannot write .*x\.md:' 3 "a path that cannot be written: an error"
expect_screen 'No such file or directory' 2 "naming why"
keys C-d
expect_screen 'PROMPT\$ *$' 5 "Ctrl-D leaves"

# glmchat export -o: the file's name says the format unless --format does; else JSON.
expect_exit 0 "$G" export 1 -o "$TMP/cli.html"
is_format "$TMP/cli.html" html
expect_exit 0 "$G" export 1 -o "$TMP/cli.md"
is_format "$TMP/cli.md" md
expect_exit 0 "$G" export 1 -o "$TMP/cli.txt"
is_format "$TMP/cli.txt" json
expect_exit 0 "$G" export 1 --format md -o "$TMP/cli2.json"
is_format "$TMP/cli2.json" md
# a folder takes glmchat-ID.FORMAT (JSON unless --format says), --all glmchat-all.FORMAT
expect_exit 0 "$G" export 1 -o "$TMP/exports"
is_format "$TMP/exports/glmchat-1.json" json
expect_exit 0 "$G" export --all --format html -o "$TMP/exports/"
is_format "$TMP/exports/glmchat-all.html" html
ls "$TMP/exports" | grep -q tmp- && fail "a temporary file was left in the folder" || pass
finish
