#!/bin/bash
# tests/gpu/run.sh: the one entry point of the GPU tests: builds glmchat with CUDA and the test
# programs once (or takes GLMCHAT_PREBUILT binaries), runs each suite in order under its own
# timeout and prints a PASS/FAIL table last; exits 1 when a suite failed or timed out.
# Suites, in order (each a script beside this one that also runs alone):
#   exl3       exl3.sh       the EXL3 kernels against the CPU reference; bench_exl3
#   engine     engine.sh     the CUDA backend against the CPU one, its kernels; bench_cuda_engine
#   spec       spec.sh       prompt reuse and drafted decoding; bench_cuda_spec
#   two_ranks  two_ranks.sh  a CUDA head and a CUDA worker over TCP loopback; bench_tp
#   nranks     nranks.sh     N CUDA ranks over NCCL, one GPU each; bench_tp_nccl (skipped, and
#                            counted as not run, with fewer than 2 GPUs: "needs 2 GPUs, found M")
#   bits       same_bits.sh  logits bit for bit against GLMCHAT_BASELINE (skipped unless it is set)
# Usage: tests/gpu/run.sh [--only S,S] [--skip S,S] [--no-bench] [--list] [OUT_DIR]
#   (from the source root). OUT_DIR (default build-gpu-all/out) gets SUITE.log and SUITE/ for
#   each suite. --no-bench: the checks only (GPU_BENCH=0 for every suite). The engine bench's
#   arguments come from BENCH_LAYERS, BENCH_PREFILL, BENCH_CHUNKS and BENCH_POSITIONS (engine.sh).
#   GPU_TIMEOUT_<SUITE>=SECONDS (e.g. GPU_TIMEOUT_ENGINE=900) changes a suite's limit (defaults:
#   exl3 600, engine 1500, spec 900, two_ranks 600, nranks 900, bits 600). GPU_BUILD_DIR (build-gpu-all) is
#   where it builds, with CUDA_ARCHS (90); GLMCHAT_PREBUILT=DIR skips the build (the suites take
#   every binary from DIR by its name); so does GLMCHAT_GPU_PLAIN=1 (exl3.sh then builds with
#   plain nvcc and gcc, the objects tests/gpu/variants.sh reuses).
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(pwd)
all_suites="exl3 engine spec two_ranks nranks bits"

usage() {
    sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

usage_error() {
    echo "tests/gpu/run.sh: $1 (--help for usage)" >&2
    exit 2
}

script_of() {
    case $1 in
        exl3) echo exl3.sh ;;
        engine) echo engine.sh ;;
        spec) echo spec.sh ;;
        two_ranks) echo two_ranks.sh ;;
        nranks) echo nranks.sh ;;
        bits) echo same_bits.sh ;;
    esac
}

default_timeout() {
    case $1 in
        engine) echo 1500 ;;
        spec | nranks) echo 900 ;;
        *) echo 600 ;;
    esac
}

# The make targets a suite's script runs.
targets_of() {
    case $1 in
        exl3) echo tests/gpu/test_exl3_gpu bench/bench_exl3 ;;
        engine) echo glmchat tests/gpu/test_cuda_engine bench/bench_cuda_engine \
            tests/gpu/test_cuda_emulate tests/gpu/test_mla_gpu tests/gpu/test_index_gpu \
            tests/gpu/test_gemm_rows tests/gpu/test_decode_gpu tests/gpu/test_kda_gpu \
            tests/gpu/test_hc_gpu tests/gpu/test_devices_gpu ;;
        spec) echo glmchat tests/gpu/test_cuda_spec bench/bench_cuda_spec ;;
        two_ranks) echo glmchat bench/bench_tp ;;
        nranks) echo glmchat bench/bench_tp_nccl ;;
        bits) echo glmchat ;;
    esac
}

# A comma-separated list of suite names, each checked (opt names the option for the error).
check_list() {
    local opt=$1 list=$2 s
    [ -n "$list" ] || usage_error "$opt needs a comma-separated list of suites ($all_suites)"
    for s in ${list//,/ }; do
        case " $all_suites " in
            *" $s "*) ;;
            *) usage_error "$opt: no suite named '$s' (suites: $all_suites)" ;;
        esac
    done
}

only="" skip="" out_dir=""
while [ $# -gt 0 ]; do
    case $1 in
        --only | --skip)
            [ $# -ge 2 ] || usage_error "$1 needs a comma-separated list of suites ($all_suites)"
            check_list "$1" "$2"
            if [ "$1" = --only ]; then only=$2; else skip=$2; fi
            shift 2 ;;
        --only=*) only=${1#--only=}; check_list --only "$only"; shift ;;
        --skip=*) skip=${1#--skip=}; check_list --skip "$skip"; shift ;;
        --no-bench) export GPU_BENCH=0; shift ;;
        --list)
            for s in $all_suites; do printf '%-10s tests/gpu/%s\n' "$s" "$(script_of "$s")"; done
            exit 0 ;;
        -h | --help) usage; exit 0 ;;
        -*) usage_error "unknown option '$1'" ;;
        *)
            [ -z "$out_dir" ] || usage_error "one OUT_DIR only ('$out_dir', then '$1')"
            out_dir=$1; shift ;;
    esac
done

selected=""
for s in $all_suites; do
    if [ -n "$only" ] && ! [[ ",$only," == *",$s,"* ]]; then continue; fi
    if [[ ",$skip," == *",$s,"* ]]; then continue; fi
    selected="$selected $s"
done
[ -n "$selected" ] || usage_error "--only '$only' and --skip '$skip' leave no suite to run"
declare -A result secs limit
for s in $selected; do
    var="GPU_TIMEOUT_${s^^}"
    limit[$s]=${!var:-$(default_timeout "$s")}
    [[ "${limit[$s]}" =~ ^[1-9][0-9]*$ ]] ||
        usage_error "$var='${limit[$s]}' is not a number of seconds"
done

build=${GPU_BUILD_DIR:-"$src/build-gpu-all"}
out=${out_dir:-"$build/out"}
mkdir -p "$build" "$out" || exit 1
out=$(cd "$out" && pwd)
start=$(date +%s)

# bits runs only against a baseline; named in --only without one, it runs and says why it fails
for s in $selected; do
    if [ "$s" = bits ] && [ -z "${GLMCHAT_BASELINE:-}" ] && ! [[ ",$only," == *",bits,"* ]]; then
        result[bits]="SKIP (GLMCHAT_BASELINE unset)"
    fi
done
# nranks needs one GPU a rank (GLMCHAT_GPU_COUNT stands in for nvidia-smi's count in tests)
gpu_count=${GLMCHAT_GPU_COUNT:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
if [[ " $selected " == *" nranks "* ]] && [ "$gpu_count" -lt 2 ]; then
    result[nranks]="SKIP (needs 2 GPUs, found $gpu_count)"
    echo "== suite nranks: not run: needs 2 GPUs, found $gpu_count"
fi

if [ -z "${GLMCHAT_PREBUILT:-}" ]; then
    targets=""
    for s in $selected; do
        [ -n "${result[$s]:-}" ] || targets="$targets $(targets_of "$s")"
    done
    targets=$(echo $targets | tr ' ' '\n' | sort -u | tr '\n' ' ')
    if [ -z "${GLMCHAT_GPU_PLAIN:-}" ] && command -v autoreconf >/dev/null &&
        command -v pkg-config >/dev/null && pkg-config --exists check libcjson sqlite3; then
        echo "== build ($build): ./configure CUDA_ARCHS=\"${CUDA_ARCHS:-90}\"; make $targets"
        if (autoreconf -fi && cd "$build" && "$src/configure" -q CUDA_ARCHS="${CUDA_ARCHS:-90}" &&
            make -j"$(nproc)" $targets) >"$out/build.log" 2>&1; then
            mkdir -p "$build/bin"
            for t in $targets; do ln -sf "$build/$t" "$build/bin/$(basename "$t")"; done
            export GLMCHAT_PREBUILT="$build/bin"
            echo "build took $(( $(date +%s) - start )) s"
        else
            tail -40 "$out/build.log"
            for s in $selected; do
                [ -n "${result[$s]:-}" ] || result[$s]="FAIL (the build: $out/build.log)"
            done
        fi
    else
        echo "== build: none here (GLMCHAT_GPU_PLAIN, or autotools or the -dev packages missing);" \
            "each suite builds on its own (exl3.sh with plain nvcc and gcc)"
    fi
fi

for s in $selected; do
    [ -z "${result[$s]:-}" ] || continue
    args=()
    [ "$s" = exl3 ] || args=("$out/$s")
    echo "== suite $s: tests/gpu/$(script_of "$s") (at most ${limit[$s]} s; log $out/$s.log)"
    t0=$(date +%s)
    timeout --kill-after=30 "${limit[$s]}" "$here/$(script_of "$s")" "${args[@]}" 2>&1 |
        tee "$out/$s.log"
    rc=${PIPESTATUS[0]}
    secs[$s]=$(( $(date +%s) - t0 ))
    case $rc in
        0) result[$s]=PASS ;;
        77) result[$s]="SKIP ($(grep -m1 '^SKIP: ' "$out/$s.log" | sed 's/^SKIP: //'))" ;;
        124 | 137) result[$s]="FAIL (timed out after ${limit[$s]} s)" ;;
        *) result[$s]="FAIL (exit $rc)" ;;
    esac
done

echo "== GPU suites: table"
status=0 passed=0 not_run=""
printf '%-10s %-36s %8s  %s\n' suite result seconds log
for s in $selected; do
    log="$out/$s.log"
    [ -f "$log" ] || log="-"
    printf '%-10s %-36s %8s  %s\n' "$s" "${result[$s]}" "${secs[$s]:--}" "$log"
    case ${result[$s]} in
        FAIL*) status=1 ;;
        SKIP*) not_run="$not_run $s" ;;
        PASS) passed=$((passed + 1)) ;;
    esac
done
# a skipped suite is not run, never passed: the line says which; nothing run at all exits 77
verdict=PASS
[ $status = 0 ] || verdict=FAIL
[ $status != 0 ] || [ $passed -gt 0 ] || { verdict="NOT RUN"; status=77; }
echo "RESULT: $verdict ($passed passed${not_run:+, not run:$not_run}), total $(( $(date +%s) - start )) s"
exit $status
