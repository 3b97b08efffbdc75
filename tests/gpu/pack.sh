#!/bin/bash
# tests/gpu/pack.sh: on the build machine, bundles GPU test binaries to carry to a GPU machine
# (the device has no -dev packages): each NAME=BUILD_DIR's programs, stripped, under NAME/, and
# the shared libraries glmchat needs beyond the C runtime and CUDA's under lib/ (put that on
# LD_LIBRARY_PATH there; tests/gpu/ab.sh does). The programs: glmchat and the programs the build
# has made in tests/gpu/ and bench/ (make those targets first); a build without glmchat is refused.
# Usage: tests/gpu/pack.sh OUT.tar.xz NAME=BUILD_DIR [NAME=BUILD_DIR ...]
#   e.g. tests/gpu/pack.sh .dev/ab.tar.xz main=build-gpu90 cand=../wt/cand/build-gpu90
set -u
die() { echo "tests/gpu/pack.sh: $*" >&2; exit 2; }
[ $# -ge 2 ] || die "usage: tests/gpu/pack.sh OUT.tar.xz NAME=BUILD_DIR [NAME=BUILD_DIR ...]"
out=$1
shift
case $out in *.tar.xz) ;; *) die "the bundle '$out' must end in .tar.xz" ;; esac
stage=$(mktemp -d) || exit 1
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib"
first_glmchat=""
for arg in "$@"; do
    name=${arg%%=*} dir=${arg#*=}
    [ "$name" != "$arg" ] && [ -n "$name" ] && [ -n "$dir" ] || die "'$arg' is not NAME=BUILD_DIR"
    case $name in lib | *[!A-Za-z0-9_-]*) die "'$name': a name is letters, digits, _ and - (not lib)" ;; esac
    [ -e "$stage/$name" ] && die "the name '$name' is given twice"
    [ -x "$dir/glmchat" ] || die "$dir has no glmchat: build it there first (make glmchat)"
    mkdir -p "$stage/$name"
    progs=""
    for p in "$dir/glmchat" $(find "$dir/tests/gpu" "$dir/bench" -maxdepth 1 -type f -perm -u+x \
        2>/dev/null | sort); do
        # programs only: an in-tree build's tests/gpu/ also holds the executable scripts
        [ "$(head -c 4 "$p" | tr -d '\177')" = ELF ] || continue
        progs="$progs ${p#"$dir"/}"
    done
    # a program older than its sources (a kernel rebuilt, the bench not relinked) would be timed
    # as if it were the tree's: refused, naming the make that brings them up to date (config.h
    # left out: automake's rule for it never touches an unchanged one, so -q would always answer
    # that it needs remaking)
    if [ -f "$dir/Makefile" ] && ! make -C "$dir" -q -o config.h -o stamp-h1 $progs >/dev/null 2>&1; then
        die "$name's programs in $dir are older than their sources: run make -C $dir check TESTS= first"
    fi
    for rel in $progs; do
        strip -o "$stage/$name/$(basename "$rel")" "$dir/$rel" || die "strip failed on $dir/$rel"
    done
    [ -n "$first_glmchat" ] || first_glmchat=$dir/glmchat
done
# glmchat's libraries that a bare machine may lack: all but the C runtime, the loader and CUDA's
ldd "$first_glmchat" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case $(basename "$lib") in
        libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libgcc_s.so* | \
            libstdc++.so* | libcuda* | libcublas* | libnccl* | libnvidia*) ;;
        *) cp -L "$lib" "$stage/lib/" ;;
    esac
done
tar -cJf "$out" -C "$stage" . || die "cannot write $out"
echo "packed $(cd "$stage" && ls -d -- */ | tr -d / | grep -vx lib | tr "\n" " ")into $out ($(du -k "$out" | cut -f1) KiB)"
