#!/bin/sh
# bench_same_machine.sh: glmchat's tokenizer against HF tokenizers on the same text, the same
# machine, one thread each. Usage: bench_same_machine.sh DIR, where DIR holds bench_tokenizer
# (built here with `make bench/bench_tokenizer`), lib/ (its shared libraries, if the machine lacks
# them), tokenizer.json, corpus.py and make_tokenizer_fixtures.py. Prints both lines, then ratios.
set -eu
d=$1
cd "$d"
export LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
python3 - <<'PY' >hf.txt
import random, sys
sys.path.insert(0, ".")
import corpus, tokenizers
from make_tokenizer_fixtures import bench
text = corpus.bench_text(random.Random(7), 8_000_000)
open("bench-text.txt", "w", encoding="utf-8").write(text)
tok = tokenizers.Tokenizer.from_file("tokenizer.json")
print("hf_tokenizers %s bytes %d ids %d encode_whole_MBps %.2f encode_lines_MBps %.2f decode_MBps %.2f"
      % ((tokenizers.__version__,) + bench(tok, text)))
PY
./bench_tokenizer tokenizer.json bench-text.txt 3 >ours.txt
cat hf.txt ours.txt
python3 - <<'PY'
def kv(path):
    w = open(path).read().split()
    return {w[i]: w[i + 1] for i in range(0, len(w) - 1) if w[i].endswith("MBps") or w[i] == "ids"}
h, o = kv("hf.txt"), kv("ours.txt")
print("| measure | glmchat MB/s | HF MB/s | ratio |")
for k in ("encode_whole_MBps", "encode_lines_MBps", "decode_MBps"):
    print("| %s | %s | %s | %.1fx |" % (k, o[k], h[k], float(o[k]) / float(h[k])))
print("ids: glmchat %s, HF %s" % (o["ids"], h["ids"]))
PY
