#!/bin/bash
# run_fuzz_import.sh: builds the JSON importer's libFuzzer target with clang (ASan, UBSan) and
# runs it for SECONDS (default 60) from the seed. Usage: tests/fuzz/run_fuzz_import.sh [SECONDS]
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${GLMCHAT_BUILDDIR:-$src}
work=${FUZZ_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/glmchat-fuzz-import.XXXXXX")}
config=-D_GNU_SOURCE
[ -f "$build/config.h" ] && config="-include $build/config.h"
mkdir -p "$work/corpus"
cp "$src/tests/fuzz/import_seed.json" "$work/corpus/"
clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    $config -I"$src" "$src"/storage/*.c "$src/tests/fuzz/fuzz_import.c" \
    $(pkg-config --cflags --libs sqlite3 libcjson) -lm -o "$work/fuzz_import"
cd "$work"
./fuzz_import -max_total_time="${1:-60}" -max_len=65536 -timeout=10 -print_final_stats=1 corpus
echo "run_fuzz_import: no crash in ${1:-60} s; corpus and binary in $work"
