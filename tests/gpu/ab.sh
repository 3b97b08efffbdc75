#!/bin/bash
# tests/gpu/ab.sh: on a GPU machine, a candidate build (B) against a baseline (A) from one bundle of
# tests/gpu/pack.sh, in one run: both test_decode_gpu (the decode kernels' bits, their times at
# 1-8 rows), B's test_cuda_spec on mkmodel small (verification windows and resumed turns equal
# plain decoding), both bench_cuda_engine; then a table of B against A: each timed product,
# the verification windows and the step. Exits 1 when a check of B fails or a program of
# either fails to run.
# Usage: tests/gpu/ab.sh BUNDLE.tar.xz [A B]   (names in the bundle; default: main cand)
#   BENCH_ARGS: the benches' arguments (default "16 1024 0 1024"); OUT: where the logs go
#   (default /tmp/ab); AB_SPEC=0 skips test_cuda_spec.
set -u
die() { echo "tests/gpu/ab.sh: $*" >&2; exit 2; }
[ $# -eq 1 ] || [ $# -eq 3 ] || die "usage: tests/gpu/ab.sh BUNDLE.tar.xz [A B]"
bundle=$1 a=${2:-main} b=${3:-cand}
[ -f "$bundle" ] || die "no bundle $bundle (make one with tests/gpu/pack.sh)"
[ "$a" != "$b" ] || die "A and B are both '$a'"
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
tar -xJf "$bundle" -C "$dir" || die "$bundle is not a tests/gpu/pack.sh bundle"
for v in "$a" "$b"; do
    for p in glmchat test_decode_gpu bench_cuda_engine; do
        [ -x "$dir/$v/$p" ] || die "the bundle has no $v/$p (it holds: $(ls "$dir" | grep -vx lib | tr '\n' ' '))"
    done
done
export LD_LIBRARY_PATH=$dir/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-/tmp/ab}
mkdir -p "$out" || exit 1
status=0
start=$(date +%s)
el() { echo "[$(($(date +%s) - start)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader || true
date -u
# run NAME LIMIT LOG PROGRAM ARGS...: a program under its limit; a failure to run fails the run
run() {
    local name=$1 secs=$2 log=$3
    shift 3
    el "$name"
    timeout "$secs" "$@" >"$log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || { echo "FAIL: $name exited with $rc (log: $log)"; tail -5 "$log"; status=1; }
}
for v in "$a" "$b"; do
    run "test_decode_gpu $v" 180 "$out/decode-$v.txt" "$dir/$v/test_decode_gpu"
    grep -E "^FAIL" "$out/decode-$v.txt" | head
done
if [ "${AB_SPEC:-1}" != 0 ] && [ -x "$dir/$b/test_cuda_spec" ]; then
    "$dir/$a/glmchat" mkmodel --out "$dir/small" --preset small --seed 3 >/dev/null || die "mkmodel failed"
    GLMCHAT_CUDA_KV=fp8 GLMCHAT_CUDA_DENSE=bf16 run "test_cuda_spec $b (mkmodel small)" 180 \
        "$out/spec-$b.txt" "$dir/$b/test_cuda_spec" "$dir/small" small
    grep -E "FAIL|passed" "$out/spec-$b.txt" | head -5
fi
for v in "$a" "$b"; do
    # shellcheck disable=SC2086 # BENCH_ARGS is a list of arguments
    run "bench_cuda_engine $v ${BENCH_ARGS:-16 1024 0 1024}" 400 "$out/bench-$v.txt" \
        "$dir/$v/bench_cuda_engine" ${BENCH_ARGS:-16 1024 0 1024}
done
el "done"
python3 - "$out" "$a" "$b" <<'PY' || status=1
import re, sys
out, a, b = sys.argv[1:]
def products(v):
    """test_decode_gpu's 'time jobs|matmul NAME 1 row: US us ...; R rows: US us (..)' lines."""
    got = {}
    for line in open("%s/decode-%s.txt" % (out, v), errors="replace"):
        m = re.match(r"time (jobs|matmul) (.*?)\s+1 row:\s+([\d.]+) us", line)
        if m:
            times = {1: float(m.group(3))}
            for r, us in re.findall(r"; (\d+) rows:\s+([\d.]+) us", line):
                times[int(r)] = float(us)
            got[m.group(1) + " " + m.group(2)] = times
    return got
def windows(v):
    """bench_cuda_engine's verification window rows and its graph step."""
    rows, step, inside = {}, None, False
    for line in open("%s/bench-%s.txt" % (out, v), errors="replace"):
        if line.startswith("-- verification windows at context"):
            inside = True
            continue
        m = re.match(r"\s*(\d+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+ \|", line)
        if inside and m:
            rows[int(m.group(1))] = float(m.group(2))
        elif inside and line.strip() and not line.lstrip().startswith("rows"):
            inside = False
        m = re.match(r"whole step \(graph\): ([\d.]+) us", line)
        if m:
            step = float(m.group(1))
    return rows, step
pa, pb = products(a), products(b)
print("== products: %s against %s, us (B / A)" % (b, a))
for name in pa:
    if name in pb:
        cells = ["%d: %.1f / %.1f (%.3f)" % (r, pb[name][r], pa[name][r], pb[name][r] / pa[name][r])
                 for r in sorted(pa[name]) if r in pb[name] and pa[name][r] > 0]
        print("%-52s %s" % (name[:52], "  ".join(cells)))
(wa, sa), (wb, sb) = windows(a), windows(b)
print("== verification windows and the step: %s against %s" % (b, a))
for r in sorted(wa):
    if r in wb:
        print("%3d rows: %10.1f us against %10.1f us (%.3f)" % (r, wb[r], wa[r], wb[r] / wa[r]))
if sa and sb:
    print("step (graph): %.1f us against %.1f us (%.3f)" % (sb, sa, sb / sa))
if not (pa and pb and wa and wb and sa and sb):
    print("FAIL: a log lacks its products, windows or step (see %s)" % out)
    sys.exit(1)
PY
echo "status $status, $(($(date +%s) - start)) s"
exit $status
