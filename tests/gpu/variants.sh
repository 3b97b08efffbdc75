#!/bin/sh
# tests/gpu/variants.sh: after tests/gpu/exl3.sh BUILD_DIR has made its plain nvcc objects there
# (GLMCHAT_GPU_PLAIN=1, or a machine without autotools), builds variants of the MoE kernel and
# prints where its time goes, against two ceilings measured in each variant's own run.
# Variants (EXL3_VARIANTS="name:-DFLAG,-DFLAG ..." overrides): the default build, load-only (no
# decode, no mma) and compute-only (no trellis read: decode + mma on register data, the
# decode-compute ceiling); the last two are measurement builds (their outputs are meaningless).
# With cuobjdump and python3 there, each variant's SASS hot loops are counted (hotloop.py:
# instructions a tile and a weight of the one-row mcg kernel's strips).
# A variant named name@FILE builds kernels/FILE in place of exl3_moe.cu (a candidate kernel with
# the same API, timed against the default in one run).
# EXL3_VARIANT_TEST="name ...": those variants also run the full GPU correctness test.
# Usage: tests/gpu/variants.sh [BUILD_DIR]
set -eu
src=$(pwd)
build=${1:-"$src/build-gpu"}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
fl="-std=c++17 -O3 -gencode arch=compute_${CUDA_ARCHS:-90},code=sm_${CUDA_ARCHS:-90} -I$src -I$src/kernels"
variants=${EXL3_VARIANTS:-"default: loadonly:-DEXL3_BENCH_LOAD_ONLY compute:-DEXL3_BENCH_COMPUTE_ONLY"}
# a variant's name (before any @FILE) and source
vname() { n=${1%%:*}; echo "${n%%@*}"; }
vsrc() { n=${1%%:*}; case $n in *@*) echo "$src/kernels/${n#*@}" ;; *) echo "$src/kernels/exl3_moe.cu" ;; esac; }
for v in $variants; do
    name=$(vname "$v")
    mkdir -p "$build/$name"
    "$nvcc" $fl $(echo "${v#*:}" | tr ',' ' ') -c -o "$build/$name/moe.o" "$(vsrc "$v")" &
done
wait
cudalib=$(dirname "$(dirname "$nvcc")")/lib64
libs="-L$cudalib -lcudart_static -ldl -lrt -lstdc++ -lm -pthread"
testobjs="$build/error.o $build/exl3_decode.o $build/exl3_matvec.o $build/exl3_quantize.o
          $build/hadamard.o $build/test_exl3_gpu.o"
status=0
for v in $variants; do
    name=$(vname "$v")
    gcc -o "$build/$name/bench" "$build/bench_exl3.o" "$build/device.o" "$build/exl3_gemm.o" \
        "$build/$name/moe.o" $libs
    echo "== variant $name (${v#*:})"
    timeout 60 "$build/$name/bench" "${BENCH_ITERS:-300}" >"$build/$name/bench.txt" || status=1
    grep -E "moe|copy ceiling" "$build/$name/bench.txt" || true
    if echo " ${EXL3_VARIANT_TEST:-} " | grep -q " $name "; then
        gcc -o "$build/$name/test" $testobjs "$build/device.o" "$build/exl3_gemm.o" \
            "$build/$name/moe.o" $libs
        timeout 120 "$build/$name/test" >"$build/$name/test.txt" 2>&1 || status=1
        grep -E "moe .*rows 16 .*call|moe bits|PASS|FAIL" "$build/$name/test.txt" | tail -8
    fi
    if command -v cuobjdump >/dev/null && command -v python3 >/dev/null; then
        # the one-row (8-row) strips are the loops with 2 mma a tile; R16 loops show 4 a tile
        cuobjdump -sass "$build/$name/moe.o" >"$build/$name/sass.txt" 2>/dev/null &&
            python3 "$src/tests/gpu/hotloop.py" "$build/$name/sass.txt" moe_kernelILi4ELi1E 2 ||
            true
    fi
done

# The table: each variant's MoE rows against its own run's copy ceiling, and against
# max(trellis bytes / copy bandwidth, compute-only time) of that run (the compute variant's time).
echo "== MoE decode, H=4096 I=2048 8 experts a row, 4 bits mcg"
echo "| variant | rows | us | of copy BW | of max(copy, compute) ceiling | bound |"
echo "|---|---|---|---|---|---|"
for v in $variants; do
    name=$(vname "$v")
    comp="$build/compute/bench.txt"
    awk -v name="$name" -v comp="$comp" '
        function rowsof(line,   f) { split(line, f, "|"); return f[3] + 0 }
        function field(line, i,   f) { split(line, f, "|"); return f[i] + 0 }
        BEGIN {
            while ((getline l < comp) > 0)
                if (l ~ /^\| moe/) cus[rowsof(l)] = field(l, 4)
        }
        /^\| moe/ {
            r = rowsof($0); us = field($0, 4); gbs = field($0, 5); frac = field($0, 6) / 100
            copy_us = us * frac               # trellis bytes / copy bandwidth, in us
            ceil_us = copy_us; bound = "bandwidth"
            if (r in cus && cus[r] > ceil_us) { ceil_us = cus[r]; bound = "compute" }
            printf "| %s | %d | %.1f | %.3f | %.3f | %s (copy %.1f us, compute %.1f us) |\n",
                name, r, us, frac, ceil_us / us, bound, copy_us, (r in cus) ? cus[r] : 0
        }' "$build/$name/bench.txt"
done
exit $status
