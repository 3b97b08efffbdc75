#!/bin/sh
# gpu_ab_cli.sh: tests/gpu/pack.sh and tests/gpu/ab.sh where no GPU is needed: a bundle of this
# build's glmchat with the libraries a bare machine may lack (the packed glmchat runs on them
# alone), and each script's refusals, named, before anything runs.
. "$GLMCHAT_SRCDIR/tests/e2e/lib.sh"

PACK="$GLMCHAT_SRCDIR/tests/gpu/pack.sh"
AB="$GLMCHAT_SRCDIR/tests/gpu/ab.sh"
B="$GLMCHAT_BUILDDIR"

expect_exit 2 "$PACK"
expect_grep err 'usage: tests/gpu/pack.sh OUT.tar.xz NAME=BUILD_DIR'
expect_exit 2 "$PACK" "$TMP/x.tar" "main=$B"
expect_grep err "the bundle '$TMP/x.tar' must end in .tar.xz"
expect_exit 2 "$PACK" "$TMP/x.tar.xz" "$B"
expect_grep err "'$B' is not NAME=BUILD_DIR"
expect_exit 2 "$PACK" "$TMP/x.tar.xz" "lib=$B"
expect_grep err "'lib': a name is letters, digits, _ and - \(not lib\)"
expect_exit 2 "$PACK" "$TMP/x.tar.xz" "main=$TMP"
expect_grep err "$TMP has no glmchat: build it there first"
expect_exit 2 "$PACK" "$TMP/x.tar.xz" "main=$B" "main=$B"
expect_grep err "the name 'main' is given twice"
# a build whose program is older than its source (relinked by make, not yet done) is refused
mkdir -p "$TMP/stale/bench" && cp "$B/glmchat" "$TMP/stale/glmchat" && cp "$B/glmchat" "$TMP/stale/bench/prog" &&
    printf 'glmchat: src.c\n\tcp src.c glmchat\nbench/prog: src.c\n\tcp src.c bench/prog\n' > "$TMP/stale/Makefile" &&
    touch -d '2000-01-01' "$TMP/stale/glmchat" && touch -d '2001-01-01' "$TMP/stale/src.c" &&
    touch -d '2000-01-01' "$TMP/stale/bench/prog" && pass || fail "cannot make a stale build"
expect_exit 2 "$PACK" "$TMP/x.tar.xz" "main=$TMP/stale"
expect_grep err "main's programs in $TMP/stale are older than their sources: run make -C $TMP/stale check TESTS= first"
touch "$TMP/stale/glmchat" "$TMP/stale/bench/prog" # up to date again: packed
expect_exit 0 "$PACK" "$TMP/fresh.tar.xz" "main=$TMP/stale"
[ ! -e "$TMP/x.tar.xz" ] && pass || fail "a refused pack wrote its bundle"

expect_exit 0 "$PACK" "$TMP/ab.tar.xz" "main=$B" "cand=$B"
expect_grep out "^packed cand main into $TMP/ab.tar.xz"
mkdir "$TMP/unpacked" && tar -xJf "$TMP/ab.tar.xz" -C "$TMP/unpacked" && pass || fail "the bundle does not unpack"
# the packed glmchat is stripped, runs on the bundle's libraries, and says the build's version
[ -x "$TMP/unpacked/cand/glmchat" ] && pass || fail "the bundle has no cand/glmchat"
for f in "$TMP"/unpacked/cand/*; do # programs only (an in-tree build keeps scripts beside them)
    [ "$(head -c 4 "$f" | tr -d '\177')" = ELF ] && pass || fail "the bundle packed $f, not a program"
done
expect_exit 0 env LD_LIBRARY_PATH="$TMP/unpacked/lib" "$TMP/unpacked/cand/glmchat" --version
"$GLMCHAT_BIN" --version | head -1 >"$TMP/want"
head -1 "$TMP/out" | cmp -s - "$TMP/want" && pass || fail "the packed glmchat's version differs: $(head -1 "$TMP/out")"
if ldd "$GLMCHAT_BIN" | grep -q 'libsqlite3'; then
    [ -e "$TMP/unpacked/lib/libsqlite3.so.0" ] && pass || fail "the bundle lacks glmchat's libsqlite3"
fi
[ -z "$(ls "$TMP/unpacked/lib" | grep -E '^(libc|libm|libstdc\+\+|ld-linux)[.-]')" ] && pass ||
    fail "the bundle carries the C runtime: $(ls "$TMP/unpacked/lib")"

expect_exit 2 "$AB"
expect_grep err 'usage: tests/gpu/ab.sh BUNDLE.tar.xz \[A B\]'
expect_exit 2 "$AB" "$TMP/none.tar.xz"
expect_grep err "no bundle $TMP/none.tar.xz"
expect_exit 2 "$AB" "$TMP/ab.tar.xz" main main
expect_grep err "A and B are both 'main'"
echo "not a bundle" >"$TMP/bad.tar.xz"
expect_exit 2 "$AB" "$TMP/bad.tar.xz"
expect_grep err "is not a tests/gpu/pack.sh bundle"
if [ -x "$B/tests/gpu/test_decode_gpu" ] && [ -x "$B/bench/bench_cuda_engine" ]; then
    expect_exit 2 "$AB" "$TMP/ab.tar.xz" main other
    expect_grep err "the bundle has no other/glmchat \(it holds: cand main \)"
else # a build without the GPU programs: its bundle is refused by name
    expect_exit 2 "$AB" "$TMP/ab.tar.xz"
    expect_grep err "the bundle has no main/test_decode_gpu"
fi
finish
