#!/bin/bash
# fuzz_setting.sh: builds the libFuzzer targets of the setting value parser (base/setting.c)
# and of the config file parser that uses it, with clang's sanitizers, and runs each for a
# bounded time. Usage: tests/fuzz/fuzz_setting.sh [SECONDS] (from a configured source tree, or
# with CONFIG_H pointing at a build's config.h).
set -eu
cd "$(dirname "$0")/../.."
secs=${1:-60}
out=${TMPDIR:-/tmp}/glmchat-fuzz-setting
cfg=${CONFIG_H:-config.h}
mkdir -p "$out/corpus_setting" "$out/corpus_config"
flags="-g -O1 -std=c11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. -Iengine -include $cfg"
clang $flags tests/fuzz/fuzz_setting.c base/setting.c -o "$out/fuzz_setting"
clang $flags $(pkg-config --cflags libcjson) tests/fuzz/fuzz_config.c app/config.c base/setting.c base/errbuf.c \
    engine/error.c -lm -o "$out/fuzz_config"
# seeds: numbers and choices as they are given
printf '\0\x40\x01\0\0\0\0\0\0\0\x10\x27\0\0\0\0\0\0\x0042' >"$out/corpus_setting/int"
printf '\x01\x40\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x0018446744073709551615' >"$out/corpus_setting/u64"
printf '\x02\x40\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x00bf16\0fp8|bf16|f32' >"$out/corpus_setting/choice"
printf 'context = 4096\nkv_cache = bf16\nprompt_cache_disk_mb = 64\nseed = 7\n' >"$out/corpus_config/cfg"
"$out/fuzz_setting" -max_total_time="$secs" -max_len=512 "$out/corpus_setting"
"$out/fuzz_config" -max_total_time="$secs" -max_len=4096 "$out/corpus_config"
