#!/bin/sh
# tests/gpu/variants.sh: after tests/gpu/run.sh BUILD_DIR, builds benchmark variants of the MoE
# kernel (old fp16 pairing decode, 3 blocks per SM, load-only without decode or mma; others via
# EXL3_VARIANTS="name:-DFLAG ...", e.g. -DEXL3_PREFETCH=8, -DEXL3_GU_SPLIT=8) and prints
# their rows: where the MoE decode's time goes. Usage: tests/gpu/variants.sh [BUILD_DIR]
set -eu
src=$(pwd)
build=${1:-"$src/build-gpu"}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
fl="-std=c++17 -O3 -gencode arch=compute_${CUDA_ARCHS:-90},code=sm_${CUDA_ARCHS:-90} -I$src -I$src/kernels"
variants=${EXL3_VARIANTS:-"halves0:-DEXL3_SPLIT_HALVES=0 minb3:-DEXL3_MOE_MIN_BLOCKS=3
          loadonly:-DEXL3_BENCH_LOAD_ONLY"}
for v in $variants; do
    name=${v%%:*}
    mkdir -p "$build/$name"
    "$nvcc" $fl $(echo "${v#*:}" | tr ',' ' ') -c -o "$build/$name/moe.o" "$src/kernels/exl3_moe.cu" &
done
wait
cudalib=$(dirname "$(dirname "$nvcc")")/lib64
for v in $variants; do
    name=${v%%:*}
    gcc -o "$build/$name/bench" "$build/bench_exl3.o" "$build/device.o" "$build/exl3_gemm.o" \
        "$build/$name/moe.o" -L"$cudalib" -lcudart_static -ldl -lrt -lstdc++ -lm -pthread
    echo "== variant $name (${v#*:})"
    timeout 60 "$build/$name/bench" 300 | grep moe
done
