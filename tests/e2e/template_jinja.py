#!/usr/bin/env python3
# template_jinja.py: glmchat render against jinja2's rendering of the checkpoint's chat_template.jinja,
# live: every request of a corpus with clear_thinking off and on, for each template revision given.
# Usage: template_jinja.py GLMCHAT_BIN SRCDIR MODEL_DIR TEMPLATE.jinja... (exit 1 on any difference)
import copy
import json
import re
import subprocess
import sys

try:
    import jinja2  # noqa: F401  (make_template_fixtures needs it; say so plainly when missing)
except ImportError:
    print("FAIL: python3 cannot import jinja2: install python3-jinja2 (./dev.sh installs it)", file=sys.stderr)
    sys.exit(1)

BIN, SRCDIR, MODEL = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, SRCDIR + "/tools/text")
import make_template_fixtures as mtf  # noqa: E402

THINK = re.compile(r"<think>.*?</think>", re.S)


def glmchat_render(req):
    p = subprocess.run([BIN, "render", "--model", MODEL], input=json.dumps(req).encode(), capture_output=True)
    return (p.stdout.decode(), None) if p.returncode == 0 else (None, p.stderr.decode().strip())


def jinja_render(tpl, req):
    try:
        return mtf.render(tpl, req), None
    except Exception as e:  # the template (or the normalisation) refuses it: so must glmchat
        return None, f"{type(e).__name__}: {e}"


def corpus(n):
    rng = mtf.random.Random(11)
    reqs = mtf.fixed_requests() + [mtf.rnd_request(rng) for _ in range(n)]
    for req in reqs:
        ctk = req.get("chat_template_kwargs")
        if isinstance(ctk, dict):
            ctk.pop("clear_thinking", None)  # the request's own field decides here
        for clear in (False, True):
            r = copy.deepcopy(req)
            r["clear_thinking"] = clear
            yield r


def main():
    env = mtf.make_env()
    tpls = [(path, env.from_string(open(path, encoding="utf-8").read())) for path in sys.argv[4:]]
    bad, n, equal, refused, differ_on_off, pending = 0, 0, 0, 0, 0, {}
    for req in corpus(400):
        n += 1
        got, gerr = glmchat_render(req)
        for path, tpl in tpls:
            want, jerr = jinja_render(tpl, req)
            if want is not None and got == want:
                equal += 1
            elif want is None and got is None:
                refused += 1
            else:
                bad += 1
                if bad <= 5:
                    print(f"FAIL {path}: clear_thinking {req['clear_thinking']}: glmchat "
                          f"{'refused: ' + gerr if got is None else repr(got[-300:])}\n  jinja "
                          f"{'refused: ' + jerr if want is None else repr(want[-300:])}\n  request {json.dumps(req)[:600]}",
                          file=sys.stderr)
        key = json.dumps({k: v for k, v in req.items() if k != "clear_thinking"}, sort_keys=True)
        if "think>" in key:  # text holding think tags would blur where a think block ends: not here
            continue
        if got is not None and key in pending:  # off, then on: they may differ only inside think blocks
            off = pending.pop(key)
            differ_on_off += off != got
            if THINK.sub("<think></think>", off) != THINK.sub("<think></think>", got):
                bad += 1
                print(f"FAIL: clear_thinking changed more than the kept reasoning:\n  off {off!r}\n  on  {got!r}",
                      file=sys.stderr)
        elif got is not None:
            pending[key] = got
    print(f"template_jinja: {n} requests x {len(tpls)} templates: {equal} equal, {refused} refused by both, "
          f"{bad} differ; clear_thinking changed {differ_on_off} prompts")
    if bad or equal < n or refused < 4 or differ_on_off < 5:
        print("FAIL: the renderings differ, or the corpus did not exercise clear_thinking", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
