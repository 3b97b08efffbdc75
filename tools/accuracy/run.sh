#!/bin/bash
# run.sh: builds tools/accuracy/accuracy and measures the lossy modes on the demo model over at
# least MIN_TOKENS (2000) held-out tokens. Usage: tools/accuracy/run.sh [MIN_TOKENS [THREADS]]
# (from the build directory of a configured tree; the demo model expanded by `make`).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
make -s tools/accuracy/accuracy models/demo/model.safetensors >/dev/null
python3 "$here/heldout_text.py" 120 >heldout-text.jsonl
exec tools/accuracy/accuracy models/demo heldout-text.jsonl "${1:-2000}" "${2:-0}"
