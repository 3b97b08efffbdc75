#!/usr/bin/env python3
# make_tokenizer_fuzz_seeds.py: writes the seed corpus of fuzz_tokenizer_load (tests/fuzz/tokenizer_load_seeds/):
# small tokenizer.json files cut down from the demo model's and the text fixtures', ids renumbered densely
# (the regress-*.json beside them are inputs that once failed, kept by hand, not written here).
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OUT = os.path.join(ROOT, "tests", "fuzz", "tokenizer_load_seeds")


def cut(path, keep, merges_as_strings=False, ignore_merges=None):
    """The first `keep` vocabulary entries (by id), the merges among them, added tokens after them."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    model = doc["model"]
    by_id = sorted(model["vocab"].items(), key=lambda kv: kv[1])[:keep]
    vocab = {tok: i for i, (tok, _) in enumerate(by_id)}
    merges = []
    for m in model["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ")
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(f"{a} {b}" if merges_as_strings else [a, b])
    model["vocab"] = vocab
    model["merges"] = merges
    if ignore_merges is not None:
        model["ignore_merges"] = ignore_merges
    added = doc.get("added_tokens", [])[:6]
    for i, t in enumerate(added):
        t["id"] = len(vocab) + i
    doc["added_tokens"] = added
    return doc


def write(name, doc, ensure_ascii=False, indent=None):
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=ensure_ascii, indent=indent)


def main():
    os.makedirs(OUT, exist_ok=True)
    demo = os.path.join(ROOT, "models", "demo", "tokenizer.json")
    text = os.path.join(ROOT, "tests", "fixtures", "text")
    write("demo-cut.json", cut(demo, 320))
    write("demo-cut-ascii.json", cut(demo, 280, ignore_merges=True), ensure_ascii=True, indent=1)
    write("bpe-cut-string-merges.json", cut(os.path.join(text, "glm-bpe.tokenizer.json"), 300, merges_as_strings=True))
    write("bpe-merges-cut.json", cut(os.path.join(text, "glm-bpe-merges.tokenizer.json"), 290))
    alphabet = cut(demo, 256)
    alphabet["model"]["merges"] = []
    alphabet["added_tokens"] = []
    write("alphabet-only.json", alphabet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
