#!/usr/bin/env python3
# eval_glmchat.py: the demo model's held-out accuracy as glmchat's CPU engine runs it (greedy, through
# tools/demo/demo_greedy), scored as train.py scores the PyTorch model.
# Usage: python3 eval_glmchat.py DEMO_GREEDY MODEL_DIR [OUT.jsonl] [--jobs N] [--tasks N]
import json
import random
import subprocess
import sys
import threading
import time

import data


def run_share(binary, model, tasks, out_rows, idx, threads):
    prefix = data.render_prefix()
    lines = [json.dumps({"prefix": prefix})]
    for t in tasks:
        p1, p2 = data.heldout_prompts(t)
        lines.append(json.dumps({"prompt": p1, "max": 72}))
        lines.append(json.dumps({"prompt": p2, "max": 64}))
    r = subprocess.run([binary, model, str(threads)], input="\n".join(lines) + "\n", capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError("demo_greedy failed: " + r.stderr[-500:])
    replies = [json.loads(x) for x in r.stdout.splitlines()]
    if len(replies) != 2 * len(tasks):
        raise RuntimeError("demo_greedy answered %d of %d prompts" % (len(replies), 2 * len(tasks)))
    for k, t in enumerate(tasks):
        a, b = replies[2 * k], replies[2 * k + 1]
        out_rows[idx[k]] = data.score(t, a["text"], a["last"] == 154829, b["text"], b["last"] in (154820, 154827))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    opts = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
    if len(args) < 2:
        print(__doc__ or "Usage: eval_glmchat.py DEMO_GREEDY MODEL_DIR [OUT.jsonl] [--jobs=N] [--tasks=N]")
        return 2
    binary, model = args[0], args[1]
    jobs, n = int(opts.get("jobs", 2)), int(opts.get("tasks", 120))
    tasks = data.heldout(random.Random(9001), 120)[:n]
    rows = [None] * len(tasks)
    t0 = time.time()
    threads = []
    errors = []
    for j in range(jobs):
        idx = list(range(j, len(tasks), jobs))

        def work(idx=idx):
            try:
                run_share(binary, model, [tasks[i] for i in idx], rows, idx, 1)
            except Exception as e:  # reported below; the other shares still finish
                errors.append(str(e))
        th = threading.Thread(target=work)
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    if errors:
        print("eval_glmchat:", errors[0], file=sys.stderr)
        return 1
    if len(args) > 2:
        with open(args[2], "w") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    wf, ok, ans = data.summary(rows)
    print("glmchat CPU engine, %s, %d held-out tasks (%.0f s): well-formed %.1f%%, correct call %.1f%%, "
          "answer uses result %.1f%%" % (model, len(rows), time.time() - t0, 100 * wf, 100 * ok, 100 * ans))
    return 0


if __name__ == "__main__":
    sys.exit(main())
