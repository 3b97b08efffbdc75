#!/usr/bin/env python3
# heldout_text.py: the demo model's held-out conversations (tools/demo/data.py's heldout tasks,
# seed 9001 as train.py and eval_glmchat.py draw them) rendered in full: the question, the call,
# the tool's result and the answer, after any earlier exchange. Line 1: {"prefix": the system
# prompt every conversation starts with}; then one {"text": the rest} a conversation.
# Usage: python3 heldout_text.py [N_TASKS]   (from anywhere; writes to stdout)
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "demo"))
import data  # noqa: E402


def conversations(n):
    """data.heldout's draws in its order, keeping the whole turns it drops."""
    rng = random.Random(9001)
    out = []
    for i in range(n):
        hist = data.conversation(rng)[:4] if rng.random() < 0.3 else []
        if hist and (hist[-1]["role"] != "assistant" or hist[-1].get("tool_calls")):
            hist = []
        turns, _ = data.tool_turns(rng, data.TASKS[i % len(data.TASKS)])
        out.append(hist + turns)
    return out


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 120
    prefix = data.render_prefix()
    print(json.dumps({"prefix": prefix}))
    for msgs in conversations(n):
        text = "".join(t for t, _ in data.render(msgs))
        assert text.startswith(prefix)
        print(json.dumps({"text": text[len(prefix):]}))


if __name__ == "__main__":
    main()
