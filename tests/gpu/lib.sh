# tests/gpu/lib.sh: the preamble the GPU suites share (sourced, bash): the machine and the time,
# then the binaries: taken from GLMCHAT_PREBUILT=DIR, or built here; the rank suites' table.
# gpu_start NAME OUT_DIR TARGET...: sets src (the source root: the working directory), build
# (BUILD_DIR, else $src/build-gpu-NAME), out (OUT_DIR, else $build/out), start (seconds), puts
# the CUDA libraries on LD_LIBRARY_PATH and, without GLMCHAT_PREBUILT, configures with
# CUDA_ARCHS (90) and makes the TARGETs (the build log's tail on failure: returns 1).
# gpu_bin TARGET: the path of a target's binary (GLMCHAT_PREBUILT/its name, or build/TARGET).
gpu_start() {
    local name=$1 out_dir=$2
    shift 2
    src=$(pwd)
    build=${BUILD_DIR:-"$src/build-gpu-$name"}
    out=${out_dir:-"$build/out"}
    mkdir -p "$build" "$out" || return 1
    local archs=${CUDA_ARCHS:-90}
    export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64
    echo "== machine"
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader || true
    date -u
    start=$(date +%s)
    if [ -n "${GLMCHAT_PREBUILT:-}" ]; then
        return 0
    fi
    echo "== build: ./configure CUDA_ARCHS=\"$archs\""
    (autoreconf -fi && cd "$build" && "$src/configure" -q CUDA_ARCHS="$archs" &&
        make -j"$(nproc)" "$@") >"$build/build.log" 2>&1 ||
        { tail -40 "$build/build.log"; return 1; }
    echo "build took $(( $(date +%s) - start )) s"
}

gpu_bin() {
    if [ -n "${GLMCHAT_PREBUILT:-}" ]; then
        echo "$GLMCHAT_PREBUILT/$(basename "$1")"
    else
        echo "$build/$1"
    fi
}

# gpu_version BIN: the first line of BIN --version; returns 1, saying so, if BIN does not run (a
# pipe into head would hide that).
gpu_version() {
    local version
    version=$("$1" --version) || { echo "FAIL: $1 --version did not run"; return 1; }
    echo "${version%%$'\n'*}"
}

# gpu_finish TITLE FILE: a suite's last lines: FILE (its table) under "== TITLE", the status and
# the run's seconds; exits with status.
gpu_finish() {
    echo "== $1"
    cat "$2"
    echo "status $status, total $(( $(date +%s) - start )) s"
    exit "$status"
}

# tp_start, after gpu_start and with G (glmchat's path) set: what tests/gpu/two_ranks.sh and
# tests/gpu/nranks.sh begin with: glmchat's version line, f32 caches (the ranks' logits then
# compare at float32 rounding) in a window that fits, status 0, an empty table ($out/table.txt,
# say appends a line to it) and an empty models folder (models=$build/models). Returns 1 if
# glmchat does not run or the folder cannot be made.
tp_start() {
    gpu_version "$G" || return 1
    export GLMCHAT_CUDA_KV=f32 GLMCHAT_CUDA_CONTEXT=4096
    status=0
    table="$out/table.txt"
    : >"$table" || return 1
    models="$build/models"
    rm -rf "$models"
    mkdir -p "$models" || return 1
}
say() { echo "$*" | tee -a "$table"; }
