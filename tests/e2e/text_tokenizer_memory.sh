#!/bin/bash
# text_tokenizer_memory.sh: `glmchat tokenize` on a tokenizer.json the size of GLM's published one
# (~150k vocab, ~300k merges, pretty-printed as Hugging Face writes it) peaks at <= 4x its size.
. "$(dirname "$0")/lib.sh"
FIX="$GLMCHAT_SRCDIR/tests/fixtures/text/glm-bpe-merges.tokenizer.json"

# The fixture's pipeline (pre-tokenizer, decoder, added tokens) with a generated vocabulary:
# every token extends a shorter one by a letter, so each has merges whose parts are tokens.
python3 - "$FIX" "$TMP/big.json" "$TMP/words" <<'PY' || fail "could not build the large tokenizer"
import json, sys
src, out, words_out = sys.argv[1:4]
d = json.load(open(src, encoding="utf-8"))
def byte_chars():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return [chars[b] for b in range(256)]
letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + \
          [chr(c) for c in range(ord("A"), ord("Z") + 1)] + ["\u0120"]
vocab = {c: i for i, c in enumerate(byte_chars())}
merges = []
def add(tok, parts):
    vocab[tok] = len(vocab)
    merges.extend(parts)
for a in letters:
    for b in letters:
        add(a + b, [[a, b]])
seed, toks = 12345, list(vocab)[256:]
while len(vocab) < 150000:
    seed = (seed * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    base = toks[(seed >> 20) % len(toks)]
    t = base + letters[(seed >> 8) % len(letters)]
    if len(t) > 14 or t in vocab:
        continue
    add(t, [[t[:-1], t[-1]], [t[:-2], t[-2:]]])
    toks.append(t)
d["model"]["vocab"] = vocab
d["model"]["merges"] = merges
with open(out, "w", encoding="utf-8") as f:
    json.dump(d, f, indent=2, ensure_ascii=False)
# words whose whole text is one token, with that token's id (for checking the load)
long_toks = [t for t in toks if len(t) >= 8 and "\u0120" not in t][:50]
with open(words_out, "w", encoding="utf-8") as f:
    f.write(" ".join(str(vocab[t]) for t in long_toks) + "\n" + "\n".join(long_toks) + "\n")
PY

# Peak RSS of one `glmchat tokenize` child (ru_maxrss of the only child this python waits for).
python3 - "$GLMCHAT_BIN" "$TMP/big.json" "$TMP/words" <<'PY' >"$TMP/measure" 2>&1 || fail "$(cat "$TMP/measure")"
import os, resource, subprocess, sys, time
glmchat, tok, words = sys.argv[1:4]
ids, *lines = open(words, encoding="utf-8").read().splitlines()
t0 = time.monotonic()
r = subprocess.run([glmchat, "tokenize", "--tokenizer", tok, "--lines"], input="\n".join(lines) + "\n",
                   capture_output=True, text=True)
elapsed = time.monotonic() - t0
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # before any other child
size = os.path.getsize(tok)
if r.returncode != 0:
    sys.exit("tokenize failed: " + r.stderr[:400])
# BPE may stop short of a word's own token (merges apply by rank), but most are one token
# and every line decodes back to its word
rows = r.stdout.splitlines()
single = sum(row == want for row, want in zip(rows, ids.split()))
if len(rows) != len(lines) or single < len(lines) * 3 // 4:
    sys.exit("%d of %d words are their own token: %r" % (single, len(lines), rows[:5]))
back = subprocess.run([glmchat, "detokenize", "--tokenizer", tok], input=" ".join(rows),
                      capture_output=True, text=True)
if back.returncode != 0 or back.stdout != "".join(lines):
    sys.exit("detokenize gave %r (%s)" % (back.stdout[:80], back.stderr[:200]))
print("file %.1f MB, peak RSS %.1f MB (%.2fx), %.2f s" % (size / 1e6, peak / 1e6, peak / size, elapsed))
if size < 15e6:
    sys.exit("the generated tokenizer is only %.1f MB" % (size / 1e6))
if peak > 4 * size:
    sys.exit("peak RSS %.1f MB is above 4x the file's %.1f MB" % (peak / 1e6, size / 1e6))
PY
cat "$TMP/measure"
grep -q '^file ' "$TMP/measure" && pass
finish
