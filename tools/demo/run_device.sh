#!/bin/bash
# run_device.sh: the demo model's whole remake on one GPU machine: trains (train.py), quantizes its
# experts with the glmchat binary beside it, and leaves the results as three files in $OUT.
# Usage: run_device.sh [TRAIN_SECONDS]   in a folder holding train.py, data.py, kda_chunk.py,
# base_config.json, bin/glmchat and lib/ (the binary's shared libraries that the machine may lack).
set -o pipefail
cd "$(dirname "$0")" || exit 1
export PYTHONUNBUFFERED=1
here=$PWD
# glmchat gets its libraries through a wrapper, so that Python never loads them
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s/lib" exec "%s/bin/glmchat" "$@"\n' "$here" "$here" >glmchat.sh
chmod +x glmchat.sh
echo "cores: $(nproc); GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>&1 | head -1)"
if ./glmchat.sh --version; then gl=$here/glmchat.sh; else gl=""; echo "glmchat does not run here: no quantization"; fi
out=/tmp/demo_out
rm -rf "$out" && mkdir -p "$out"
python3 train.py base_config.json "$out" "${1:-300}" $gl 2>&1 | tee "$out/train.log"
rc=$?
(cd "$out" && tar cf "$OUT/small.tar" --exclude='*.gz' . && cp ./*.gz "$OUT/")
ls -la "$OUT"
exit $rc
