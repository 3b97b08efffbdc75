#!/bin/bash
# larger.sh: unpacks what tools/demo/train_larger.sh left in its $OUT (DIR) into models/larger (EXL3
# experts, as glmchat runs it) and models/larger-float (the same weights before the experts were
# quantized), then measures the lossy modes on models/larger as run.sh does on the demo model, and
# what the EXL3 experts themselves cost against their bf16 originals (models/larger-float on the f32
# path, models/larger as -x).
# Usage (from the build directory of a configured tree):
#   tools/accuracy/larger.sh DIR [MIN_TOKENS [THREADS [MODES]]]   (MODES: accuracy's -m list)
set -eu -o pipefail
if [ $# -lt 1 ] || [ ! -f "$1/larger-meta.tar" ]; then
    echo "usage: tools/accuracy/larger.sh DIR [MIN_TOKENS [THREADS [MODES]]]  (DIR: train_larger.sh's" \
        "results, larger-meta.tar and the .part files)" >&2
    exit 2
fi
src=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p models/larger models/larger-float models/larger-meta
tar xf "$src/larger-meta.tar" -C models/larger-meta
for kind in model float; do
    cat "$src"/larger-$kind.safetensors.gz.part* >models/larger-meta/$kind.safetensors.gz
done
(cd models/larger-meta && sha256sum -c "$src/larger-sha256.txt")
gunzip -c models/larger-meta/model.safetensors.gz >models/larger/model.safetensors
gunzip -c models/larger-meta/float.safetensors.gz >models/larger-float/model.safetensors
for d in larger larger-float; do
    cp models/larger-meta/tokenizer.json models/larger-meta/generation_config.json models/$d/
done
cp models/larger-meta/config.json models/larger/config.json
cp models/larger-meta/config_float.json models/larger-float/config.json
make -s tools/accuracy/accuracy
python3 "$here/heldout_text.py" 120 >heldout-text.jsonl
python3 "$here/calib_text.py" 64 >calib-text.jsonl
echo "== the lossy modes on models/larger (EXL3 experts) against its f32 run"
tools/accuracy/accuracy -c calib-text.jsonl ${4:+-m "$4"} models/larger heldout-text.jsonl \
    "${2:-2000}" "${3:-0}"
echo "== the EXL3 experts against their bf16 originals (models/larger-float's f32 run)"
exec tools/accuracy/accuracy -m no-such-mode -x models/larger models/larger-float heldout-text.jsonl \
    "${2:-2000}" "${3:-0}"
