#!/bin/bash
# fuzz.sh: builds the engine's libFuzzer targets (safetensors reader, config parser) with
# clang's sanitizers and runs each for a bounded time. Usage: tools/engine/fuzz.sh [SECONDS]
# CONFIG_H=FILE: the configured config.h (default: the source root's, an in-tree configure).
set -eu
cd "$(dirname "$0")/../.."
secs=${1:-30}
cfg=${CONFIG_H:-config.h}
[ -f "$cfg" ] || { echo "fuzz.sh: no $cfg: configure in the source root first, or give CONFIG_H=BUILD_DIR/config.h" >&2; exit 2; }
out=${TMPDIR:-/tmp}/glmchat-fuzz
mkdir -p "$out"
cflags="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. -Iengine -include $cfg $(pkg-config --cflags libcjson)"
libs="$(pkg-config --libs libcjson) -lm"
clang $cflags tests/fuzz/fuzz_safetensors.c engine/model/safetensors.c engine/error.c $libs -o "$out/fuzz_safetensors"
clang $cflags tests/fuzz/fuzz_model_config.c engine/model/config.c engine/error.c $libs -o "$out/fuzz_model_config"
mkdir -p "$out/corpus_st" "$out/corpus_cfg"
cp tests/fixtures/models/softplus-kpool1-hc1/reference.safetensors "$out/corpus_st/" 2>/dev/null || true
cp tests/fixtures/fp8/fp8_blocks.safetensors "$out/corpus_st/" 2>/dev/null || true
cp tests/fixtures/models/*/config.json "$out/corpus_cfg/" 2>/dev/null || true
for f in tests/fixtures/models/*/config.json; do cp "$f" "$out/corpus_cfg/$(basename "$(dirname "$f")").json"; done
"$out/fuzz_safetensors" -max_total_time="$secs" -max_len=65536 "$out/corpus_st"
"$out/fuzz_model_config" -max_total_time="$secs" -max_len=16384 "$out/corpus_cfg"
