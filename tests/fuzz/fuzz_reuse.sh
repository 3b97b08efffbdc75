#!/bin/bash
# fuzz_reuse.sh: builds the kept-state file parser's libFuzzer targets (the parser, and the disk
# tier on a real directory) with clang's sanitizers and runs each for a bounded time, from a
# corpus of real files. Usage: tests/fuzz/fuzz_reuse.sh [SECONDS]
set -eu
cd "$(dirname "$0")/../.."
secs=${1:-30}
cfg=${CONFIG_H:-config.h} # a build's config.h when configured out of tree
out=${TMPDIR:-/tmp}/glmchat-fuzz-reuse
mkdir -p "$out/corpus"
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. -Iengine -include "$cfg" tests/fuzz/fuzz_prompt_cache.c \
    engine/prefix_cache.c engine/error.c -lpthread -o "$out/fuzz_prompt_cache"
# seeds: kept-state files of a tiny model written by the real engine
if [ -x ./glmchat ] && [ -z "$(ls -A "$out/corpus")" ]; then
    ./glmchat mkmodel --out "$out/model" --preset tiny --seed 3 >/dev/null
    GLMCHAT_PROMPT_CACHE_DIR="$out/corpus" GLMCHAT_TEMPERATURE=0 HOME="$out/home" \
        XDG_DATA_HOME="$out/data" ./glmchat --db "$out/seed.db" --model "$out/model" --backend cpu \
        chat --output-format jsonl --max-tokens 2 --prompt "seed" >/dev/null || true
fi
"$out/fuzz_prompt_cache" -max_total_time="$secs" -max_len=65536 "$out/corpus"
# the same bytes as a file in a cache directory: indexed and restored exactly, or refused and deleted
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. -Iengine -include "$cfg" tests/fuzz/fuzz_prompt_cache_dir.c \
    engine/prefix_cache.c engine/error.c -lpthread -o "$out/fuzz_prompt_cache_dir"
TMPDIR="$out" "$out/fuzz_prompt_cache_dir" -max_total_time="$secs" -max_len=65536 "$out/corpus"
# CPU state snapshots loaded into a state of a fixture model; seeds: the states in the files. The
# engine is built as in a CPU-only configuration (the CUDA backend reduced to its refusal) into an
# instrumented archive, so the link takes the objects the target needs, whatever their number.
grep -v 'HAVE_CUDA' "$cfg" >"$out/config-cpu.h"
rm -rf "$out/engine-obj" && mkdir -p "$out/engine-obj"
n=0
for src in engine/*.c engine/cpu/*.c engine/model/*.c engine/text/*.c engine/tp/*.c \
        engine/cuda/backend_cuda.c engine/cuda/probe.c; do
    n=$((n + 1))
    clang -c -g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -I. -Iengine -include "$out/config-cpu.h" \
        $(pkg-config --cflags libcjson libpcre2-8 libibverbs) "$src" -o "$out/engine-obj/$n-$(basename "$src" .c).o"
done
rm -f "$out/libengine-fuzz.a"
ar rcs "$out/libengine-fuzz.a" "$out"/engine-obj/*.o
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. -Iengine -include "$out/config-cpu.h" \
    $(pkg-config --cflags libcjson) tests/fuzz/fuzz_cpu_snapshot.c "$out/libengine-fuzz.a" \
    $(pkg-config --libs libcjson libpcre2-8 libibverbs) -lpthread -lm -o "$out/fuzz_cpu_snapshot"
mkdir -p "$out/corpus_snap"
GLMCHAT_FUZZ_SEED="$out/corpus_snap/seed.snap" "$out/fuzz_cpu_snapshot" -max_total_time="$secs" -max_len=262144 "$out/corpus_snap"
