#!/bin/bash
# run.sh: builds tools/accuracy/accuracy and measures the lossy modes on the demo model over at
# least MIN_TOKENS (2000) held-out tokens, the GPTQ modes calibrated on 64 other conversations.
# Usage: tools/accuracy/run.sh [MIN_TOKENS [THREADS [MODES]]]   (MODES: accuracy's -m list)
# (from the build directory of a configured tree; the demo model expanded by `make`).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
make -s tools/accuracy/accuracy models/demo/model.safetensors >/dev/null
python3 "$here/heldout_text.py" 120 >heldout-text.jsonl
python3 "$here/calib_text.py" 64 >calib-text.jsonl
exec tools/accuracy/accuracy -c calib-text.jsonl ${3:+-m "$3"} models/demo heldout-text.jsonl \
    "${1:-2000}" "${2:-0}"
