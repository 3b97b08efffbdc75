#!/bin/sh
# tests/gpu/exl3.sh: builds glmchat's EXL3 kernels on a GPU machine, checks them against the CPU
# reference (tests/gpu/test_exl3_gpu.c) and runs the benchmark (bench/bench_exl3.cu); table last.
# One suite of tests/gpu/run.sh, which runs them all.
# Usage: tests/gpu/exl3.sh [BUILD_DIR]   (from the source root; CUDA_ARCHS defaults to 90).
# GLMCHAT_PREBUILT=DIR takes test_exl3_gpu and bench_exl3 from DIR instead of building;
# GPU_BENCH=0 skips the benchmark.
set -eu
src=$(pwd)
build=${1:-"$src/build-gpu"}
archs=${CUDA_ARCHS:-90}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
mkdir -p "$build"
test_bin="$build/tests/gpu/test_exl3_gpu"
bench_bin="$build/bench/bench_exl3"

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader || true
"$nvcc" --version | tail -1
for tool in gcc autoreconf pkg-config; do
    printf '%s: %s\n' "$tool" "$(command -v $tool || echo missing)"
done
for pkg in check libcjson sqlite3 ncursesw libpcre2-8; do
    if command -v pkg-config >/dev/null && pkg-config --exists $pkg; then echo "$pkg: yes"; else echo "$pkg: no"; fi
done

gencode=""
for a in $archs; do gencode="$gencode -gencode arch=compute_$a,code=sm_$a"; done
start=$(date +%s)
if [ -n "${GLMCHAT_PREBUILT:-}" ]; then
    echo "== build: none, the binaries of GLMCHAT_PREBUILT=$GLMCHAT_PREBUILT"
    test_bin="$GLMCHAT_PREBUILT/test_exl3_gpu"
    bench_bin="$GLMCHAT_PREBUILT/bench_exl3"
    export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64
elif [ -z "${GLMCHAT_GPU_PLAIN:-}" ] && command -v autoreconf >/dev/null &&
    command -v pkg-config >/dev/null &&
    pkg-config --exists check libcjson sqlite3; then
    echo "== build: ./configure CUDA_ARCHS=\"$archs\""
    (autoreconf -fi && cd "$build" && "$src/configure" -q CUDA_ARCHS="$archs" &&
        make -j"$(nproc)" tests/gpu/test_exl3_gpu bench/bench_exl3) >"$build/build.log" 2>&1 ||
        { tail -30 "$build/build.log"; exit 1; }
else
    echo "== build: autotools or -dev packages missing; plain nvcc and gcc for sm $archs"
    nvflags="-std=c++17 -O3 $gencode -Xcompiler -Wall,-Wextra,-Werror -I$src -I$src/kernels"
    mkdir -p "$build/tests/gpu" "$build/bench"
    rm -f "$build"/*.o
    for f in device exl3_gemm exl3_moe; do
        "$nvcc" $nvflags -c -o "$build/$f.o" "$src/kernels/$f.cu" &
    done
    "$nvcc" $nvflags -c -o "$build/bench_exl3.o" "$src/bench/bench_exl3.cu" &
    "$nvcc" $nvflags -c -o "$build/exl3_grouped_ref.o" "$src/tests/gpu/exl3_grouped_ref.cu" &
    cflags="-std=c11 -O2 -pthread -Wall -Wextra -Werror -DPACKAGE_VERSION=\"gpu-test\" -I$src -I$src/engine"
    csrc="engine/error.c engine/model/exl3_decode.c engine/model/exl3_matvec.c
          engine/model/exl3_quantize.c engine/model/hadamard.c tests/gpu/test_exl3_gpu.c"
    objs=""
    for f in $csrc; do
        o="$build/$(basename "$f" .c).o"
        gcc $cflags -c -o "$o" "$src/$f" &
        objs="$objs $o"
    done
    wait
    for o in $objs "$build/device.o" "$build/exl3_gemm.o" "$build/exl3_moe.o" "$build/bench_exl3.o" \
        "$build/exl3_grouped_ref.o"; do
        [ -f "$o" ] || { echo "build failed: no $o"; exit 1; }
    done
    cudalib=$(dirname "$(dirname "$nvcc")")/lib64
    libs="-L$cudalib -lcudart_static -ldl -lrt -lstdc++ -lm -pthread"
    gcc -o "$build/tests/gpu/test_exl3_gpu" $objs "$build/exl3_grouped_ref.o" "$build/device.o" \
        "$build/exl3_gemm.o" "$build/exl3_moe.o" $libs
    gcc -o "$build/bench/bench_exl3" "$build/bench_exl3.o" "$build/device.o" \
        "$build/exl3_gemm.o" "$build/exl3_moe.o" $libs
fi
echo "build took $(( $(date +%s) - start )) s"

echo "== correctness: GPU kernels vs the CPU reference"
status=0
timeout 300 "$test_bin" || status=$?

if [ "${GPU_BENCH:-1}" = 0 ]; then
    echo "== benchmark: skipped (GPU_BENCH=0)"
else
    echo "== benchmark"
    timeout 120 "$bench_bin" "${BENCH_ITERS:-300}" || status=1
fi
exit $status
