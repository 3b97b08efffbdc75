#!/bin/sh
# engine_boundary.sh: app/ and ui/ reach the engine only through its public headers (glm.h for
# chats, glm_tokens.h for token-level commands); any other engine header they include fails here.
# Includes resolve as the compiler finds them: beside the file, then the top source directory,
# then engine/ (AM_CPPFLAGS has -I$(top_srcdir) -I$(top_srcdir)/engine).
. "$GLMCHAT_SRCDIR/tests/e2e/lib.sh"
SRC=$GLMCHAT_SRCDIR

PUBLIC="engine/glm.h engine/glm_tokens.h"
# Engine headers other than the public ones that app/ and ui/ may still include: none. Generic
# helpers live in base/ (UTF-8, settings, SHA-256); the engine's byte buffer (engine/text/tbuf.h)
# stays the engine's, and the commands read stdin with cli_read_stream (app/cli.h).
HELPERS=""
# Known leaks still to close, "FILE HEADER" a line (none now: keep it so). One that is fixed must
# be deleted here (a stale entry fails too).
KNOWN=""

# resolve ROOT FILE INCLUDE: the path (from ROOT) the compiler opens, or "?INCLUDE" when none.
resolve() {
    dir=$(dirname "$2")
    for cand in "$dir/$3" "$3" "engine/$3"; do
        if [ -e "$1/$cand" ]; then
            (cd "$1" && realpath -m --relative-to=. "$cand")
            return
        fi
    done
    echo "?$3"
}

# leaks ROOT: "FILE HEADER" for each engine header but the public ones and the helpers that a
# file of ROOT's app/ or ui/ includes, sorted.
leaks() {
    (cd "$1" && find app ui -name '*.[ch]' 2>/dev/null | sort) | while read -r f; do
        sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1/$f" |
        while read -r inc; do
            path=$(resolve "$1" "$f" "$inc")
            case $path in
            engine/*) ;;
            *) continue ;;
            esac
            case " $PUBLIC $HELPERS " in
            *" $path "*) continue ;;
            esac
            echo "$f $path"
        done
    done | sort -u
}

# The check sees a leak however it is spelled, and lets the public headers through.
mkdir -p "$TMP/tree/app" "$TMP/tree/ui" "$TMP/tree/engine/tp"
: >"$TMP/tree/engine/glm.h"
: >"$TMP/tree/engine/session.h"
: >"$TMP/tree/engine/tp/rank.h"
printf '#include "glm.h"\n#include "session.h"\n' >"$TMP/tree/app/a.c"
printf '#include "engine/glm.h"\n  #  include "engine/tp/rank.h"\n' >"$TMP/tree/ui/b.h"
got=$(leaks "$TMP/tree" | tr '\n' ';')
want="app/a.c engine/session.h;ui/b.h engine/tp/rank.h;"
[ "$got" = "$want" ] && pass || fail "the check found '$got' in its probe tree, not '$want'"

leaks "$SRC" >"$TMP/leaks"
printf '%s' "$KNOWN" | sed '/^$/d' | sort -u >"$TMP/known"
new=$(comm -23 "$TMP/leaks" "$TMP/known")
if [ -n "$new" ]; then
    fail "app/ and ui/ include engine internals (use engine/glm.h or engine/glm_tokens.h, or give the
engine a public entry point):
$new"
else
    pass
fi
stale=$(comm -13 "$TMP/leaks" "$TMP/known")
if [ -n "$stale" ]; then
    fail "tests/e2e/engine_boundary.sh lists leaks that are gone; delete them from KNOWN:
$stale"
else
    pass
fi
finish
