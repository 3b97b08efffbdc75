#!/usr/bin/env python3
# calib_text.py: calibration conversations for the accuracy tool's GPTQ modes: tools/demo/data.py's
# training-like conversations (data.conversation) drawn with seed 4242, none equal to a held-out one
# (heldout_text.py's, seed 9001) nor to one of the training run's 40,000 (seed 53), in
# heldout_text.py's form. Usage: python3 calib_text.py [N_CONVERSATIONS]   (writes to stdout)
import json
import os
import random
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "demo"))
sys.path.insert(0, here)
import data  # noqa: E402
import heldout_text  # noqa: E402

SEED = 4242


def text_of(msgs, prefix):
    text = "".join(t for t, _ in data.render(msgs))
    assert text.startswith(prefix)
    return text[len(prefix):]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    prefix = data.render_prefix()
    held = {text_of(m, prefix) for m in heldout_text.conversations(120)}
    train_rng = random.Random(53)
    trained = {text_of(data.conversation(train_rng), prefix) for _ in range(40000)}
    rng = random.Random(SEED)
    print(json.dumps({"prefix": prefix}))
    kept = dropped = 0
    while kept < n:
        text = text_of(data.conversation(rng), prefix)
        if text in held or text in trained:
            dropped += 1
            continue
        print(json.dumps({"text": text}))
        kept += 1
    print("calib_text: %d conversations (seed %d), %d dropped as held-out or trained on"
          % (kept, SEED, dropped), file=sys.stderr)


if __name__ == "__main__":
    main()
