#!/bin/sh
# man_completion.sh: glmchat.1 and the bash/zsh completions, generated from the command table:
# the page renders with no groff warning, names every command and each command's options; the
# completions offer every command the table has and each command's options; make install puts
# them in man1dir and the bash and zsh completion directories.
. "$GLMCHAT_SRCDIR/tests/e2e/lib.sh"
command -v groff >/dev/null 2>&1 || { echo "FAIL: groff is not installed (./dev.sh installs groff-base)"; exit 1; }

expect_exit 0 "$GLMCHAT_BIN" --man
cp "$TMP/out" "$TMP/glmchat.1"
groff -man -ww -Tutf8 -z "$TMP/glmchat.1" 2>"$TMP/groff.err"
[ ! -s "$TMP/groff.err" ] && pass || fail "groff warns: $(head -5 "$TMP/groff.err")"
if command -v man >/dev/null 2>&1; then
    MANWIDTH=100 man -l "$TMP/glmchat.1" >"$TMP/man.txt" 2>"$TMP/man.err"
    [ ! -s "$TMP/man.err" ] && pass || fail "man -l complains: $(head -5 "$TMP/man.err")"
else
    groff -man -Tutf8 "$TMP/glmchat.1" 2>/dev/null | sed 's/.\x08//g' >"$TMP/man.txt"
fi
grep -q '^GLMCHAT(1)' "$TMP/man.txt" && pass || fail "the page has no GLMCHAT(1) header"
# The chat TUI's commands and keys, from the tables the TUI runs.
grep -q '^CHAT COMMANDS' "$TMP/man.txt" && pass || fail "the page has no CHAT COMMANDS section"
grep -Eq '^ +/copy \[N\|all\]' "$TMP/man.txt" && pass || fail "the page lacks /copy [N|all]"
grep -Eq '^ +/quit or /exit' "$TMP/man.txt" && pass || fail "the page lacks /quit's alias"
grep -Eq '^ +Alt-K' "$TMP/man.txt" && pass || fail "the page lacks the Alt-K key"

# The commands, as the table lists them in --help.
"$GLMCHAT_BIN" --help | sed -n '/^Commands:/,/^$/p' | awk 'NF > 1 { print $1 }' >"$TMP/commands"
[ "$(wc -l <"$TMP/commands")" -ge 10 ] && pass || fail "--help lists too few commands: $(cat "$TMP/commands")"

# The bash completion, sourced in bash, asked as the shell asks.
"$GLMCHAT_BIN" --completion bash >"$TMP/glmchat.bash" && pass || fail "--completion bash failed"
complete_bash() { # WORD...: the candidates for the last word
    bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _glmchat; printf "%s\n" "${COMPREPLY[@]}"' \
        sh "$TMP/glmchat.bash" "$@"
}
complete_bash glmchat '' >"$TMP/first"
"$GLMCHAT_BIN" --completion zsh >"$TMP/_glmchat" && pass || fail "--completion zsh failed"
if command -v zsh >/dev/null 2>&1; then
    zsh -n "$TMP/_glmchat" && pass || fail "the zsh completion does not parse"
else
    fail "zsh is not installed (./dev.sh installs it): the zsh completion cannot be parsed"
fi
sed -n '/commands=(/,/^    )/p' "$TMP/_glmchat" >"$TMP/zsh_commands"

while read -r c; do
    grep -qxF ".SS \"glmchat $(echo "$c" | sed 's/-/\\-/g')\"" "$TMP/glmchat.1" && pass ||
        fail "the man page has no section for '$c'"
    grep -qx -- "$c" "$TMP/first" && pass || fail "the bash completion does not offer '$c'"
    grep -q "^        '$c:" "$TMP/zsh_commands" && pass || fail "the zsh completion does not offer '$c'"
    # each option the command's --help shows is in the page and completes after the command
    "$GLMCHAT_BIN" "$c" --help 2>/dev/null | grep -E '^ {2,8}-' | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u |
        while read -r o; do
            grep -qF -- "$(echo "$o" | sed 's/-/\\-/g')" "$TMP/glmchat.1" || echo "man: $c $o"
            complete_bash glmchat "$c" -- | grep -qx -- "$o" || echo "bash: $c $o"
        done >"$TMP/missing"
    [ ! -s "$TMP/missing" ] && pass || fail "options missing: $(cat "$TMP/missing")"
done <"$TMP/commands"

# Global options with a value are skipped when finding the command; files after -o.
complete_bash glmchat --db x.db exp | grep -qx export && pass || fail "no command after '--db FILE'"
complete_bash glmchat --model /m logits --tok | grep -qx -- --tokens-file && pass ||
    fail "logits' usage-line option --tokens-file does not complete"
complete_bash glmchat export --fo | grep -qx -- --format && pass || fail "export --fo does not give --format"

# The build made them and make install puts them where man and the shells look.
if [ -f "$GLMCHAT_BUILDDIR/Makefile" ]; then
    make -s -C "$GLMCHAT_BUILDDIR" install-man install-bashcompletionDATA install-zshcompletionDATA \
        DESTDIR="$TMP/inst" prefix=/usr >"$TMP/install.out" 2>&1 && pass ||
        fail "make install of the page and completions failed: $(tail -5 "$TMP/install.out")"
    cmp -s "$TMP/inst/usr/share/man/man1/glmchat.1" "$TMP/glmchat.1" && pass || fail "man1/glmchat.1 not installed (or stale)"
    cmp -s "$TMP/inst/usr/share/bash-completion/completions/glmchat" "$TMP/glmchat.bash" && pass ||
        fail "the bash completion is not installed (or stale)"
    cmp -s "$TMP/inst/usr/share/zsh/site-functions/_glmchat" "$TMP/_glmchat" && pass ||
        fail "the zsh completion is not installed (or stale)"
fi
finish
