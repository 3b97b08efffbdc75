#!/bin/sh
# gpu_run_cli.sh: tests/gpu/run.sh, the GPU tests' entry point, where no GPU is needed: its suite
# list, its refusals (exit 2 before anything is built or run) and its table and exit status
# after a suite that fails at once (same_bits.sh without a baseline).
. "$GLMCHAT_SRCDIR/tests/e2e/lib.sh"

RUN="$GLMCHAT_SRCDIR/tests/gpu/run.sh"
# never a CUDA build here: every run takes its (absent) binaries from GLMCHAT_PREBUILT
export GLMCHAT_PREBUILT="$TMP/prebuilt" GPU_BUILD_DIR="$TMP/gpu"
unset GLMCHAT_BASELINE GPU_BENCH

expect_exit 0 "$RUN" --list
[ "$(awk '{print $1}' "$TMP/out" | tr '\n' ' ')" = "exl3 engine spec two_ranks nranks bits " ] && pass ||
    fail "the suites are not listed in their order: $(cat "$TMP/out")"
expect_exit 0 "$RUN" --help
expect_grep out 'only S,S\] \[--skip S,S\] \[--no-bench\]'
expect_grep out 'GPU_TIMEOUT_<SUITE>'

expect_exit 2 "$RUN" --only engine,foo
expect_grep err "--only: no suite named 'foo' \(suites: exl3 engine spec two_ranks nranks bits\)"
expect_exit 2 "$RUN" --skip
expect_grep err '--skip needs a comma-separated list of suites'
expect_exit 2 "$RUN" --only spec --skip spec
expect_grep err "leave no suite to run"
expect_exit 2 "$RUN" --frobnicate
expect_grep err "unknown option '--frobnicate'"
expect_exit 2 "$RUN" "$TMP/a" "$TMP/b"
expect_grep err "one OUT_DIR only"
expect_exit 2 env GPU_TIMEOUT_ENGINE=soon "$RUN" --only engine,spec
expect_grep err "GPU_TIMEOUT_ENGINE='soon' is not a number of seconds"
expect_empty out # refused before any build or suite
[ ! -e "$TMP/gpu" ] && pass || fail "a refused run made $TMP/gpu"

# bits without GLMCHAT_BASELINE: skipped among all suites, run (and failed) when asked for by name
expect_exit 1 "$RUN" --only bits "$TMP/out-bits"
expect_grep out "FAIL: GLMCHAT_BASELINE='' names no executable glmchat"
expect_grep out '^bits +FAIL \(exit 1\) +[0-9]+ +'"$TMP/out-bits/bits.log"'$'
expect_grep out '^RESULT: FAIL'
grep -q "names no executable glmchat" "$TMP/out-bits/bits.log" && pass || fail "bits.log lacks the suite's output"
# nranks on a machine of one GPU: not run, said so, and never counted as passed
expect_exit 77 env GLMCHAT_GPU_COUNT=1 "$RUN" --only nranks "$TMP/out-nranks"
expect_grep out '^== suite nranks: not run: needs 2 GPUs, found 1$'
expect_grep out '^nranks +SKIP \(needs 2 GPUs, found 1\)'
expect_grep out '^RESULT: NOT RUN \(0 passed, not run: nranks\)'
# the script alone says the same, and a count below NRANKS is named
expect_exit 77 env GLMCHAT_GPU_COUNT=1 "$GLMCHAT_SRCDIR/tests/gpu/nranks.sh" "$TMP/out-alone"
expect_grep out '^SKIP: needs 2 GPUs, found 1 '
expect_exit 77 env GLMCHAT_GPU_COUNT=2 NRANKS=3 "$GLMCHAT_SRCDIR/tests/gpu/nranks.sh" "$TMP/out-alone"
expect_grep out '^SKIP: needs 3 GPUs \(NRANKS\), found 2$'
[ ! -e "$TMP/out-alone" ] && pass || fail "a skipped nranks.sh made its output folder"
finish
