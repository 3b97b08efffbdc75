#!/usr/bin/env python3
# make_tokenizer_fixtures.py: trains small GLM-shaped tokenizers with HF tokenizers and writes their
# expected encodings and decodings as glmchat fixtures; also times HF's single-threaded encode.
# Run where HF tokenizers is installed:  python3 make_tokenizer_fixtures.py OUTDIR
import json
import os
import random
import struct
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
import tokenizers  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402

import corpus  # noqa: E402

GLM_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
FIRST_ADDED_ID = 154820


def train(rng, vocab_size, ignore_merges, train_bytes):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GLM_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    lines = [corpus.text_case(rng, 16) for _ in range(train_bytes // 300)]
    tok.train_from_iterator(lines, trainer)
    # Give the added tokens GLM's real ids: put them in the model's vocabulary at those ids (a sparse
    # vocabulary keeps the file small), then list them as added tokens.
    spec = json.loads(tok.to_str())
    spec["model"]["ignore_merges"] = ignore_merges
    added = []
    for i, t in enumerate(corpus.SPECIAL):
        tid = FIRST_ADDED_ID + i
        spec["model"]["vocab"][t] = tid
        added.append({"id": tid, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": corpus.SPECIAL_FLAGS.get(t, False)})
    spec["added_tokens"] = added
    tok = Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
    for i, t in enumerate(corpus.SPECIAL):
        assert tok.encode(t).ids == [FIRST_ADDED_ID + i], (t, tok.encode(t).ids)
        assert tok.decode([FIRST_ADDED_ID + i], skip_special_tokens=False) == t
    return tok


def u32s(xs):
    return struct.pack("<%dI" % len(xs), *xs)


def write_cases(path, tok, rng, n_text, n_hostile):
    """Records: u32 len, bytes (as our CLI would read them), u32 n, n x u32 ids."""
    n_ids = 0
    with open(path, "wb") as f:
        items = [corpus.text_case(rng).encode("utf-8") for _ in range(n_text)]
        items += [corpus.hostile_bytes(rng) for _ in range(n_hostile)]
        items += [b"", b" ", b"\n", b" " * 1000, b"1" * 1000, b"\x00", b"a\x00b", "é".encode() * 300,
                  "。".encode() * 200, b"\t \r\n \r \n\n\t" * 20, "🙂".encode() * 50, b"'s's'S'LL"]
        for b in items:
            ids = tok.encode(b.decode("utf-8", errors="replace")).ids
            n_ids += len(ids)
            f.write(u32s([len(b)]) + b + u32s([len(ids)]) + u32s(ids))
    return len(items), n_ids


def write_decodes(path, tok, rng, n):
    """Records: u32 n, n x u32 ids, u32 len, HF's decode (skip_special_tokens=False) as UTF-8."""
    ids_all = sorted(tok.get_vocab().values())
    with open(path, "wb") as f:
        seqs = [[i] for i in ids_all]
        for _ in range(n):
            seqs.append([rng.choice(ids_all) for _ in range(rng.randrange(1, 40))])
        for s in seqs:
            out = tok.decode(s, skip_special_tokens=False).encode("utf-8")
            f.write(u32s([len(s)]) + u32s(s) + u32s([len(out)]) + out)
    return len(seqs)


def bench(tok, text, reps=3):
    nbytes = len(text.encode("utf-8"))
    best = 1e9
    for _ in range(reps):
        t0 = time.perf_counter()
        ids = tok.encode(text).ids
        best = min(best, time.perf_counter() - t0)
    lines = text.split("\n")
    best_l = 1e9
    for _ in range(reps):
        t0 = time.perf_counter()
        for ln in lines:
            tok.encode(ln)
        best_l = min(best_l, time.perf_counter() - t0)
    best_d = 1e9
    for _ in range(reps):
        t0 = time.perf_counter()
        tok.decode(ids, skip_special_tokens=False)
        best_d = min(best_d, time.perf_counter() - t0)
    return nbytes, len(ids), nbytes / best / 1e6, nbytes / best_l / 1e6, nbytes / best_d / 1e6


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    print("tokenizers", tokenizers.__version__)
    rng = random.Random(53)
    rows = []
    for name, vocab, ign in (("glm-bpe", 8000, True), ("glm-bpe-merges", 3000, False)):
        tok = train(rng, vocab, ign, 6_000_000 if ign else 2_000_000)
        tok.save(os.path.join(out, name + ".tokenizer.json"), pretty=False)
        nc, ni = write_cases(os.path.join(out, name + ".encode.bin"), tok, rng, 2500 if ign else 800,
                             400 if ign else 100)
        nd = write_decodes(os.path.join(out, name + ".decode.bin"), tok, rng, 1500 if ign else 300)
        rows.append((name, os.path.getsize(os.path.join(out, name + ".tokenizer.json")), nc, ni, nd))
        if ign:
            text = corpus.bench_text(random.Random(7), 8_000_000)
            b = bench(tok, text)
            with open(os.path.join(out, "bench-hf.txt"), "w") as f:
                f.write("hf_tokenizers %s bytes %d ids %d encode_whole_MBps %.2f encode_lines_MBps %.2f "
                        "decode_MBps %.2f\n" % ((tokenizers.__version__,) + b))
    for r in rows:
        print("%-16s json %7d B  encode cases %5d (%d ids)  decode cases %d" % r)
    print(open(os.path.join(out, "bench-hf.txt")).read())


if __name__ == "__main__":
    main()
