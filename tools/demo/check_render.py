#!/usr/bin/env python3
# check_render.py: checks that data.py renders conversations exactly as `glmchat render` does.
# Usage: python3 check_render.py GLMCHAT_BINARY [N]   (exit 1 on the first mismatch)
import json
import random
import subprocess
import sys

import data


def main():
    binary, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
    rng = random.Random(1)
    for i in range(n):
        msgs = data.conversation(rng)
        mine = "".join(t for t, _ in data.render(msgs))[:-len("<|user|>")]
        r = subprocess.run([binary, "render", "--model", "."], input=json.dumps(data.request_json(msgs)),
                           capture_output=True, text=True, check=True)
        ref = r.stdout[:-len("<|assistant|><think>")]
        if mine != ref:
            print("conversation %d differs:\n%r\n%r" % (i, mine[-300:], ref[-300:]))
            return 1
    print("%d conversations rendered identically" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
