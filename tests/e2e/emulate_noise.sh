#!/bin/sh
# emulate_noise.sh: test_cuda_emulate's one-part noise floor and judge where no GPU is: the noise
# wrap off leaves two CPU runs equal bit for bit; on, it moves the f32 runs by f32's size; a
# one-part run of mkmodel small amplifies it (the reason a one-part mode is judged against its own
# floor), the fixture tiny-A, whose products one part does not take, does not; and with the CPU
# standing in for CUDA the judge passes a correct one-part run with noise of its own and fails one
# with one part left out, with an f32 and an fp8 cache.
. "$GLMCHAT_SRCDIR/tests/e2e/lib.sh"

E="$GLMCHAT_BUILDDIR/tests/gpu/test_cuda_emulate"
[ -x "$E" ] || { fail "no $E (make check builds it)"; finish; }
expect_exit 0 "$GLMCHAT_BIN" mkmodel --out "$TMP/small" --preset small --seed 3
expect_exit 0 "$E" --noise-check "$TMP/small" 300 40 small
expect_grep out '^PASS: small: two CPU runs without noise are equal bit for bit'
expect_grep out '^PASS: small: 1 ulp on each product moves the f32 runs by at most'
cp "$TMP/out" "$TMP/small.txt"
for mode in "one part" "fp8 \+ one part"; do
    expect_grep out "^PASS: small $mode: the judge passed a correct run with noise of its own"
    expect_grep out "^PASS: small $mode: the judge failed one part left out"
done
check_floors() { # FILE LABEL WANT: the one-part floor over the f32 one (amplified) or not
    if python3 - "$1" "$2" "$3" <<'PY'; then pass; else fail "$2: the floors are not as expected: $(cat "$1")"; fi
import re, sys
text, label, want = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
f32 = re.search(r"^PASS: %s: 1 ulp on each product moves the f32 runs by at most ([\d.e+-]+)" % re.escape(label), text, re.M)
one = re.search(r"^MODE FLOOR: %s: 1 ulp on each product moves the one-part runs by at most ([\d.e+-]+)" % re.escape(label), text, re.M)
if not f32 or not one:
    sys.exit(1)
f32, one = float(f32.group(1)), float(one.group(1))
if not 0 < f32 < 1e-4:
    sys.exit(1)
if want == "amplified" and not one > 10 * f32:
    sys.exit(1)
if want == "same" and one != f32:
    sys.exit(1)
PY
}
check_floors "$TMP/small.txt" small amplified
A="$GLMCHAT_SRCDIR/tests/fixtures/models/tiny-A"
expect_exit 0 "$E" --noise-check "$A" 40 24 tiny-A
cp "$TMP/out" "$TMP/tinyA.txt"
check_floors "$TMP/tinyA.txt" tiny-A same
expect_grep out "^SKIP: tiny-A: one part rounds none of this model's products"
# a model it cannot open is refused, naming it
expect_exit 1 "$E" --noise-check "$TMP/no-such-model"
expect_grep err "no-such-model"
finish
