#!/usr/bin/env python3
# make_template_fixtures.py: renders many varied OpenAI-style requests with GLM-5's chat_template.jinja
# through jinja2 set up as Hugging Face does, and writes request + expected prompt pairs for glmchat.
# Usage: python3 make_template_fixtures.py TEMPLATE.jinja OUT.jsonl [N]
# The request preprocessing below (request_to_kwargs) is glmchat's documented serving semantics.
import copy
import json
import random
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

EFFORT_MAP = {"minimal": "low", "low": "low", "medium": "high", "high": "high", "xhigh": "xhigh", "max": "max"}
EFFORTS = set(EFFORT_MAP) | {"none"}


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env.filters["tojson"] = tojson
    return env


def request_to_kwargs(req):
    """glmchat's normalisation of an OpenAI-style request before the template (as servers do it)."""
    msgs = copy.deepcopy(req.get("messages") or [])
    for m in msgs:
        if "content" in m and m["content"] is None:
            m["content"] = ""
        if m.get("role") == "assistant":
            if "reasoning_content" not in m and isinstance(m.get("reasoning"), str):
                m["reasoning_content"] = m["reasoning"]
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function", tc)
                a = fn.get("arguments")
                if a is None or a == "":
                    fn["arguments"] = {}
                elif isinstance(a, str):
                    fn["arguments"] = json.loads(a)
                if not isinstance(fn["arguments"], dict):
                    raise ValueError("tool call arguments are not a JSON object")
    kw = {"messages": msgs, "add_generation_prompt": True}
    if req.get("tools"):
        kw["tools"] = req["tools"]
    ctk = req.get("chat_template_kwargs") or {}
    think = True
    effort = req.get("reasoning_effort")
    if effort is not None and effort not in EFFORTS:  # the template would render it as Max
        raise ValueError(f"reasoning_effort {effort!r} is not one the template knows")
    clear = req.get("clear_thinking")
    if clear is not None:
        if not isinstance(clear, bool):
            raise ValueError("clear_thinking must be true or false")
        kw["clear_thinking"] = clear
    if effort == "none":
        think = False
    for src in (req, ctk):
        if isinstance(src.get("enable_thinking"), bool):
            think = src["enable_thinking"]
    if "clear_thinking" in ctk:
        kw["clear_thinking"] = ctk["clear_thinking"]
    if think and isinstance(effort, str) and effort != "none":
        kw["reasoning_effort"] = EFFORT_MAP.get(effort, effort)
    return kw, think


def render(tpl, req):
    kw, think = request_to_kwargs(req)
    text = tpl.render(**kw)
    if not think:  # thinking off: drop the effort line, close the think block the prompt opened
        text = text.replace("<|system|>Reasoning Effort: Max", "", 1)
        if text.endswith("<|assistant|><think>"):
            text += "</think>"
    return text


TEXTS = ["Hi", "  padded  \n", "", " ", "Ünïcödé ✓ 中文 🙂", "line1\nline2\r\n", "\u3000wide\u3000", "\x1cfs\x1f",
         "\u0085nel\u0085", "zero\u200bwidth", "\ufeffbom", "<think>inner</think>after", "a</think>b</think>c",
         "<think>x<think>y</think>z", "\t\ttabs\t", "json {\"a\": 1}", "<tool_call>not a call</tool_call>",
         "emoji 👨‍👩‍👧", "quote \" backslash \\ done", "\n\nlead", "trail\n\n"]


def rnd_text(rng):
    return "".join(rng.choice(TEXTS) for _ in range(rng.randrange(1, 3)))


def rnd_value(rng, depth=0):
    k = rng.randrange(10 if depth < 2 else 7)
    return [lambda: rng.randrange(-10 ** 6, 10 ** 6), lambda: rng.choice([0.5, 1.0, -0.0, 1e-7, 1e16, 1e15, 123.456,
                                                                          3.141592653589793, 2.5e-300, 1e22]),
            lambda: rng.choice([True, False]), lambda: None, lambda: rnd_text(rng),
            lambda: 10 ** 20 + rng.randrange(100), lambda: "",
            lambda: [rnd_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))],
            lambda: {f"k{i}": rnd_value(rng, depth + 1) for i in range(rng.randrange(0, 4))},
            lambda: {"nested": [1, {"x": "y"}], "s": "é"}][k]()


def rnd_tool(rng, i):
    fn = {"name": f"tool_{i}", "description": rnd_text(rng),
          "parameters": {"type": "object", "properties": {"a": {"type": "string"}, "n": {"type": "integer"}},
                         "required": ["a"]}}
    if rng.random() < 0.2:
        fn["strict"] = rng.choice([True, False])
    if rng.random() < 0.15:
        fn["defer_loading"] = rng.choice([True, False])
    if rng.random() < 0.2:
        del fn["description"]
    return {"type": "function", "function": fn} if rng.random() < 0.7 else fn


def rnd_content(rng):
    r = rng.random()
    if r < 0.75:
        return rnd_text(rng)
    if r < 0.85:
        return None
    parts = []
    for _ in range(rng.randrange(0, 4)):
        parts.append(rng.choice([{"type": "text", "text": rnd_text(rng)}, "bare string",
                                 {"type": "image_url", "image_url": {"url": "x"}}, {"type": "video"},
                                 {"type": "input_audio"}, {"type": "unknown"}, {"type": "image"}]))
    return parts


def rnd_assistant(rng, tools):
    m = {"role": "assistant", "content": rnd_content(rng)}
    r = rng.random()
    if r < 0.3:
        m["reasoning_content"] = rnd_text(rng)
    elif r < 0.4:
        m["reasoning"] = rnd_text(rng)
    elif r < 0.45:
        m["reasoning_content"] = None
    calls = []
    for j in range(rng.choice([0, 0, 1, 2, 3])):
        args = {f"p{k}": rnd_value(rng) for k in range(rng.randrange(0, 4))}
        names = [t.get("function", t)["name"] for t in tools] or [f"fn{j}"]
        fn = {"name": rng.choice(names),
              "arguments": json.dumps(args, ensure_ascii=False) if rng.random() < 0.5 else args}
        if rng.random() < 0.05:
            fn["arguments"] = rng.choice([None, ""])
        tc = {"type": "function", "function": fn}
        if rng.random() < 0.85:
            tc["id"] = f"call_{rng.randrange(10 ** 6)}"
        if rng.random() < 0.05:
            tc = dict(fn, id=tc.get("id"))  # calls written without the function wrapper
        calls.append(tc)
    if calls:
        m["tool_calls"] = calls
    return m


def rnd_results(rng, calls):
    ids = [c.get("id") for c in calls]
    order = list(range(len(calls)))
    r = rng.random()
    if r < 0.4:
        rng.shuffle(order)
    elif r < 0.5:
        order.reverse()
    out = []
    for i in order:
        m = {"role": "tool", "content": rnd_text(rng) if rng.random() < 0.9 else
             [{"type": "text", "text": "part"}, {"type": "text", "text": "2"}]}
        if ids[i] is not None and rng.random() < 0.9:
            m["tool_call_id"] = ids[i]
        out.append(m)
    if rng.random() < 0.1 and out:
        out.append(dict(out[0]))  # a duplicate id
    if rng.random() < 0.1:
        out.append({"role": "tool", "tool_call_id": "call_unknown", "content": "stray"})
    return out


def rnd_request(rng):
    tools = [rnd_tool(rng, i) for i in range(rng.choice([0, 0, 1, 2, 4]))]
    msgs = []
    if rng.random() < 0.6:
        msgs.append({"role": "system", "content": rnd_content(rng)})
    for _ in range(rng.randrange(1, 6)):
        msgs.append({"role": "user", "content": rnd_content(rng)})
        for _ in range(rng.choice([0, 1, 1, 2])):
            a = rnd_assistant(rng, tools)
            msgs.append(a)
            if a.get("tool_calls") and rng.random() < 0.85:
                msgs.extend(rnd_results(rng, a["tool_calls"]))
        if rng.random() < 0.15:
            msgs.append({"role": "system", "content": rnd_text(rng)})
        if rng.random() < 0.03:
            msgs.append({"role": "developer", "content": "skipped role"})
    if rng.random() < 0.2:
        msgs.append(rnd_assistant(rng, tools))
    req = {"messages": msgs}
    if tools:
        req["tools"] = tools
    if rng.random() < 0.7:
        req["reasoning_effort"] = rng.choice(["low", "high", "max", "medium", "minimal", "xhigh", "none", "weird",
                                              None, 3])
    if rng.random() < 0.3:
        req["enable_thinking"] = rng.choice([True, False])
    if rng.random() < 0.2:
        req["clear_thinking"] = rng.choice([True, False, True, False, "yes"])
    if rng.random() < 0.3:
        req["chat_template_kwargs"] = {"clear_thinking": rng.choice([True, False])}
        if rng.random() < 0.3:
            req["chat_template_kwargs"]["enable_thinking"] = rng.choice([True, False])
    return req


def fixed_requests():
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": [1, 2], "b": "s"}}},
             {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]
    return [
        {"messages": [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hi"}]},
        {"messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
                      {"role": "user", "content": "q2"}]},
        {"messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
                      {"role": "user", "content": "q2"}], "chat_template_kwargs": {"clear_thinking": True}},
        {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": calls},
                      {"role": "tool", "tool_call_id": "c2", "content": "R2"},
                      {"role": "tool", "tool_call_id": "c1", "content": "R1"}],
         "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}, {"name": "g", "parameters": {}}]},
        {"messages": [{"role": "user", "content": "x"}], "enable_thinking": False},
        {"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "none"},
        {"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "low", "enable_thinking": False},
        {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": calls},
                      {"role": "tool", "tool_call_id": "c1",
                       "content": [{"type": "tool_reference", "name": "f"}, {"type": "tool_reference", "name": "g"}]},
                      {"role": "tool", "content": [{"output": "o1", "tool_call_id": "c2"}]}],
         "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}, {"name": "g", "parameters": {}}]},
        {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": calls},
                      {"role": "tool", "content": [{"output": "o2", "tool_call_id": "c2"},
                                                   {"output": [{"type": "text", "text": "o1"}], "id": "c1"}]}]},
        {"messages": [{"role": "tool", "content": "first message is a tool"}, {"role": "user", "content": "u"}]},
        {"messages": []},
        {"messages": [{"role": "user", "content": "x"},
                      {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]},
        {"messages": [{"role": "user", "content": "x"},
                      {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{bad"}}]}]},
        {"messages": [{"role": "user", "content": "x"},
                      {"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}]},
        {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": calls},
                      {"role": "tool", "tool_call_id": "c1", "content": [{"type": "tool_reference", "name": "f"}]}]},
        {"messages": [{"role": "user", "content": 42}, {"role": "system", "content": True},
                      {"role": "user", "content": [{"type": "text", "text": 1.5}, {"type": "text"}]}]},
    ]


def main():
    tpl_path, out_path = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 600
    tpl = make_env().from_string(open(tpl_path, encoding="utf-8").read())
    rng = random.Random(5)
    reqs = fixed_requests() + [rnd_request(rng) for _ in range(n)]
    n_ok = n_err = 0
    with open(out_path, "w", encoding="utf-8") as f:
        for req in reqs:
            text = json.dumps(req, ensure_ascii=rng.random() < 0.2)
            try:
                prompt = render(tpl, json.loads(text))
                rec = {"request": text, "prompt": prompt}
                n_ok += 1
            except Exception as e:  # the template (or our preprocessing) refuses it: so must glmchat
                rec = {"request": text, "error": type(e).__name__ + ": " + str(e)}
                n_err += 1
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print(f"{n_ok} rendered, {n_err} refused, written to {out_path}")


if __name__ == "__main__":
    main()
