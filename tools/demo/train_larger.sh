#!/bin/bash
# train_larger.sh: the accuracy tool's second model on one GPU machine: train.py --preset larger
# (about 2.5 times the demo's parameters in use, indexer selection past 256 tokens), its routed
# experts EXL3-quantized by glmchat, both checkpoints gzip'd in parts of 15 MiB into $OUT.
# Usage (from the source root, on the GPU machine): tools/demo/train_larger.sh GLMCHAT [TRAIN_SECONDS]
# GLMCHAT: a glmchat binary that runs there. About 2 minutes besides the training (150 s by default).
# Back here: tools/accuracy/larger.sh DIR (DIR holding what $OUT held) unpacks it and measures it.
set -eu -o pipefail
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
    echo "usage: tools/demo/train_larger.sh GLMCHAT [TRAIN_SECONDS]  (GLMCHAT: an executable glmchat)" >&2
    exit 2
fi
if [ -z "${OUT:-}" ] || [ ! -d "$OUT" ]; then
    echo "train_larger.sh: OUT must name the folder the results go to" >&2
    exit 2
fi
gl=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
secs=${2:-150}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/larger.XXXXXX)
cp "$here/train.py" "$here/data.py" "$here/kda_chunk.py" "$work/"
# the base config: the demo's (train.py drops its quantization_config and sets the shape)
cp "$here/../../models/demo/config.json" "$work/base_config.json"
"$gl" --version
echo "cores: $(nproc); GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>&1 | head -1)"
mkdir -p "$work/out"
start=$(date +%s)
PYTHONUNBUFFERED=1 python3 "$work/train.py" --preset larger --no-eval "$work/base_config.json" \
    "$work/out" "$secs" "$gl" 2>&1 | tee "$work/out/train.log"
cd "$work/out"
for f in model.safetensors.gz float.safetensors.gz config.json config_float.json tokenizer.json \
    generation_config.json summary.txt; do
    [ -s "$f" ] || { echo "train_larger.sh: train.py left no $f" >&2; exit 1; }
done
tar cf "$OUT/larger-meta.tar" config.json config_float.json tokenizer.json generation_config.json \
    summary.txt train.log
split -b 15M -d model.safetensors.gz "$OUT/larger-model.safetensors.gz.part"
split -b 15M -d float.safetensors.gz "$OUT/larger-float.safetensors.gz.part"
sha256sum model.safetensors.gz float.safetensors.gz | tee "$OUT/larger-sha256.txt"
ls -la "$OUT"
echo "train_larger.sh: done in $(( $(date +%s) - start )) s"
