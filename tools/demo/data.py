# data.py: synthetic conversations for glmchat's embedded demo model, rendered in GLM-5's chat
# template exactly as glmchat's renderer writes it (checked against `glmchat render` by check_render.py).
import datetime
import json
import random
import re

# The built-in tools as glmchat sends them (app/tools/builtin.c): name, description, parameters.
TOOLS = [
    ("read_file", "Read a text file in the workspace.",
     '{"type":"object","properties":{"path":{"type":"string","description":"file path, relative to the workspace"},'
     '"offset":{"type":"integer","description":"first byte to read (default 0)"},'
     '"max_bytes":{"type":"integer","description":"at most this many bytes (default and limit 262144)"}},'
     '"required":["path"]}'),
    ("list_directory", "List the entries of a directory in the workspace (directories end in /).",
     '{"type":"object","properties":{"path":{"type":"string","description":"directory, relative to the workspace (default .)"}}}'),
    ("search_files", "Find lines matching a regular expression in the workspace's files.",
     '{"type":"object","properties":{"pattern":{"type":"string","description":"POSIX extended regular expression matched against each line"},'
     '"path":{"type":"string","description":"file or directory to search (default .)"},'
     '"ignore_case":{"type":"boolean"},'
     '"max_results":{"type":"integer","description":"at most this many lines (default 100, limit 500)"}},'
     '"required":["pattern"]}'),
    ("write_file", "Create or replace a file in the workspace.",
     '{"type":"object","properties":{"path":{"type":"string","description":"file path, relative to the workspace; its directory must exist"},'
     '"content":{"type":"string","description":"the whole new content of the file"}},'
     '"required":["path","content"]}'),
    ("run_command", "Run a shell command in the workspace; returns its output and exit status.",
     '{"type":"object","properties":{"command":{"type":"string","description":"a /bin/sh command line, run in the workspace"},'
     '"timeout":{"type":"integer","description":"seconds before it is killed (limit 600)"}},'
     '"required":["command"]}'),
]


def tools_request():
    return [{"type": "function", "function": {"name": n, "description": d, "parameters": json.loads(p)}}
            for n, d, p in TOOLS]


def render_prefix():
    out = "[gMASK]<sop><|system|>Reasoning Effort: Max<|system|>\n# Tools\n\nYou may call one or more functions " \
          "to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> " \
          "XML tags:\n<tools>\n"
    for t in tools_request():
        out += json.dumps(t["function"], ensure_ascii=False) + "\n"
    out += "</tools>\n\nFor each function call, output the function name and arguments within the following " \
           "XML format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}" \
           "</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>"
    return out


def render_call(name, args):
    s = "<tool_call>" + name
    for k, v in args.items():
        s += "<arg_key>%s</arg_key><arg_value>%s</arg_value>" % (
            k, v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
    return s + "</tool_call>"


def render(messages):
    """Returns a list of (text, trained) pieces; joined they are the rendered conversation."""
    pieces = [(render_prefix(), False)]
    prev = None
    for m in messages:
        r = m["role"]
        if r == "user":
            pieces.append(("<|user|>", prev == "assistant"))  # the model ends a reply with it
            pieces.append((m["content"], False))
        elif r == "assistant":
            pieces.append(("<|assistant|><think>", False))
            body = m.get("reasoning_content", "") + "</think>" + m.get("content", "").strip()
            for c in m.get("tool_calls", []):
                body += render_call(c["function"]["name"], c["function"]["arguments"])
            pieces.append((body, True))
        elif r == "tool":
            head = "" if prev == "tool" else "<|observation|>"
            if head:
                pieces.append((head, True))  # the model ends a tool-calling turn with it
            pieces.append(("<tool_response>%s</tool_response>" % m["content"], False))
        prev = r
    if prev == "assistant":
        pieces.append(("<|user|>", True))
    return pieces


def request_json(messages):
    return {"messages": messages, "tools": tools_request()}


# ---- task generators --------------------------------------------------------------------------
NAMES = ["notes.txt", "todo.md", "config.ini", "README.md", "data/prices.csv", "src/main.c", "plan.txt",
         "shopping.txt", "docs/intro.md", "hello.py", "server.conf", "log/today.log", "recipe.txt", "poem.txt"]
WORDS = ["apple", "river", "green", "window", "coffee", "seven", "garden", "blue", "paper", "stone", "music",
         "train", "cloud", "orange", "silver", "forest", "lamp", "north", "bread", "tiger", "winter", "glass"]
UNITS = [("inches", "centimeters", "*2.54"), ("feet", "meters", "*0.3048"), ("miles", "kilometers", "*1.609344"),
         ("kilometers", "miles", "*0.621371"), ("kilograms", "pounds", "*2.20462"), ("pounds", "kilograms", "*0.453592"),
         ("liters", "gallons", "*0.264172"), ("degrees Celsius", "degrees Fahrenheit", "*9/5+32")]
OPS = [("+", "plus", "+"), ("-", "minus", "-"), ("*", "times", "*"), ("/", "divided by", "/")]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def awk_g(x):
    """awk's print of a number: integers as integers, else %.6g."""
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return "%.6g" % x


def sh_result(out):
    return out + "\n[exit status 0]"


def task_arith(rng):
    op, word, sym = rng.choice(OPS)
    a, b = rng.randrange(2, 1000), rng.randrange(2, 100)
    if op == "/":
        a = b * rng.randrange(2, 200)
    v = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
    q = rng.choice(["What is %d %s %d?", "Compute %d %s %d.", "How much is %d %s %d?", "Please calculate %d %s %d."])
    q = q % (a, rng.choice([word, sym]), b)
    cmd = "echo $((%d%s%d))" % (a, op, b)
    think = rng.choice(["The user wants %d %s %d. I will compute it with the shell." % (a, word, b),
                        "I should calculate %d %s %d exactly, so I will run a shell command." % (a, word, b)])
    res = str(v)
    ans = rng.choice(["%d %s %d = %s." % (a, sym, b, res), "The result is %s." % res, "%d %s %d is %s." % (a, word, b, res)])
    return q, "run_command", {"command": cmd}, think, sh_result(res), "The command printed %s." % res, ans, res


def task_date(rng):
    d0 = datetime.date(2020, 1, 1) + datetime.timedelta(days=rng.randrange(0, 3000))
    s0 = d0.isoformat()
    if rng.random() < 0.6:
        n = rng.randrange(1, 400)
        q = rng.choice(["What date is %d days after %s?", "Which date comes %d days after %s?",
                        "If today is %s, what is the date in %d days?"])
        q = q % ((s0, n) if q.startswith("If") else (n, s0))
        cmd = "date -d '%s + %d days' +%%F" % (s0, n)
        res = (d0 + datetime.timedelta(days=n)).isoformat()
        think = "I need the date %d days after %s. The date command can add days." % (n, s0)
        ans = rng.choice(["%d days after %s is %s." % (n, s0, res), "It is %s." % res])
    else:
        q = rng.choice(["What day of the week is %s?", "Which weekday was %s?", "On what day of the week is %s?"]) % s0
        cmd = "date -d %s +%%A" % s0
        res = WEEKDAYS[d0.weekday()]
        think = "The user asks for the weekday of %s. I will ask the date command." % s0
        ans = rng.choice(["%s is a %s." % (s0, res), "It is a %s." % res])
    return q, "run_command", {"command": cmd}, think, sh_result(res), "The command printed %s." % res, ans, res


def task_unit(rng):
    src, dst, expr = rng.choice(UNITS)
    x = rng.choice([rng.randrange(1, 500), rng.randrange(1, 100) + rng.choice([0.5, 0.25, 0.1])])
    xs = awk_g(x)
    q = rng.choice(["How many %s is %s %s?" % (dst, xs, src), "Convert %s %s to %s." % (xs, src, dst),
                    "What is %s %s in %s?" % (xs, src, dst)])
    cmd = "awk 'BEGIN{print %s%s}'" % (xs, expr)
    v = eval(xs + expr.replace("9/5", "9.0/5"))
    res = awk_g(v)
    think = "To convert %s %s to %s I multiply by the factor; awk will do the arithmetic." % (xs, src, dst)
    ans = rng.choice(["%s %s is %s %s." % (xs, src, res, dst), "That is %s %s." % (res, dst)])
    return q, "run_command", {"command": cmd}, think, sh_result(res), "awk printed %s." % res, ans, res


def task_read(rng):
    path = rng.choice(NAMES)
    kind = rng.random()
    if kind < 0.5:
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 9)))
        q = rng.choice(["What does %s say?", "Read %s for me.", "Show me the content of %s.", "What is in %s?"]) % path
        res = text + "\n"
        ans = rng.choice(["%s says: %s" % (path, text), "The file contains: %s" % text])
        key = text
        note = "The file holds one line."
    else:
        port = rng.randrange(1000, 9999)
        user = rng.choice(WORDS)
        res = "name = %s\nport = %d\n" % (user, port)
        q = rng.choice(["Which port is set in %s?", "Read %s and tell me the port.", "What port does %s use?"]) % path
        ans = rng.choice(["%s sets the port to %d." % (path, port), "The port is %d." % port])
        key = str(port)
        note = "The port line says %d." % port
    think = "I have to read %s first, with read_file." % path
    return q, "read_file", {"path": path}, think, res, note, ans, key


def task_list(rng):
    d = rng.choice([".", "src", "docs", "data"])
    files = sorted(rng.sample(NAMES, rng.randrange(1, 4)))
    files = [f.split("/")[-1] for f in files]
    res = "".join("%s  %d bytes\n" % (f, rng.randrange(10, 5000)) for f in files)
    q = rng.choice(["What files are in %s?", "List the directory %s.", "Which files does %s hold?"]) % d
    ans = "%s holds: %s." % (d, ", ".join(files))
    return q, "list_directory", {"path": d}, "I will list %s with list_directory." % d, res, \
        "There are %d entries." % len(files), ans, files[0]


CHAT = [
    ("Hello!", "Hello! I am glmchat's small demo model. I can run shell commands, read files and list directories for you."),
    ("Hi, who are you?", "I am the tiny demo model that ships with glmchat. Ask me to compute something, convert units, work with dates or read a file."),
    ("What can you do?", "I can call glmchat's tools: run_command for arithmetic and dates, read_file, list_directory, search_files and write_file."),
    ("Thank you!", "You are welcome!"),
    ("Thanks, that helps.", "Glad to help."),
    ("Are you a big model?", "No. I am a few million parameters, trained only to show how glmchat chats, thinks and calls tools."),
    ("Good morning", "Good morning! What would you like me to do?"),
    ("Bye", "Goodbye!"),
]
TASKS = [task_arith, task_arith, task_date, task_unit, task_read, task_list]


def tool_turns(rng, task=None):
    q, name, args, think, res, think2, ans, key = (task or rng.choice(TASKS))(rng)
    msgs = [{"role": "user", "content": q},
            {"role": "assistant", "reasoning_content": think, "content": "",
             "tool_calls": [{"id": "call_%d" % rng.randrange(10**6), "type": "function",
                             "function": {"name": name, "arguments": args}}]},
            {"role": "tool", "content": res},
            {"role": "assistant", "reasoning_content": think2, "content": ans}]
    return msgs, dict(question=q, name=name, args=args, result=res, key=key, think=think)


def conversation(rng):
    msgs = []
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
        if rng.random() < 0.2:
            u, a = rng.choice(CHAT)
            msgs += [{"role": "user", "content": u},
                     {"role": "assistant", "reasoning_content": "The user is chatting; no tool is needed.", "content": a}]
        else:
            msgs += tool_turns(rng)[0]
    return msgs


def heldout(rng, n):
    """Held-out tasks: a prompt (maybe after one earlier exchange) and what the model must do."""
    out = []
    for i in range(n):
        hist = conversation(rng)[:4] if rng.random() < 0.3 else []
        if hist and (hist[-1]["role"] != "assistant" or hist[-1].get("tool_calls")):
            hist = []
        turns, exp = tool_turns(rng, TASKS[i % len(TASKS)])
        exp["history"] = hist
        out.append(exp)
    return out


# ---- held-out prompts and scoring (shared by train.py and eval_glmchat.py) ----------------------
CALL_RE = re.compile(r"^(.*?)</think>(?:.*?)<tool_call>([^<]+)((?:<arg_key>[^<]*</arg_key><arg_value>.*?</arg_value>)*)"
                     r"</tool_call>$", re.S)
ARG_RE = re.compile(r"<arg_key>([^<]*)</arg_key><arg_value>(.*?)</arg_value>", re.S)


def heldout_prompts(task):
    """The two prompt texts of a held-out task: asking it, and answering after its (correct) call's result."""
    msgs = task["history"] + [{"role": "user", "content": task["question"]}]
    p1 = "".join(t for t, _ in render(msgs)) + "<|assistant|><think>"
    msgs = msgs + [{"role": "assistant", "reasoning_content": task["think"], "content": "",
                    "tool_calls": [{"function": {"name": task["name"], "arguments": task["args"]}}]},
                   {"role": "tool", "content": task["result"]}]
    p2 = "".join(t for t, _ in render(msgs)) + "<|assistant|><think>"
    return p1, p2


def score(task, call_text, call_ended_observation, answer, answer_ended):
    """One held-out row: the call well-formed (and its turn ended by <|observation|>), the call correct
    (name and arguments exactly), and the answer using the result (its key after </think>, no call)."""
    m = CALL_RE.match(call_text)
    wf = bool(m) and call_ended_observation
    ok = False
    if wf:
        args = dict(ARG_RE.findall(m.group(3)))
        exp = {k: (v if isinstance(v, str) else json.dumps(v)) for k, v in task["args"].items()}
        ok = m.group(2) == task["name"] and args == exp
    final = answer.split("</think>", 1)[1] if "</think>" in answer else ""
    aok = answer_ended and task["key"] in final and "<tool_call>" not in final
    return dict(question=task["question"], call_text=call_text, well_formed=wf, correct=ok, answer=answer,
                answer_ok=aok, expected=dict(name=task["name"], args=task["args"], key=task["key"]))


def summary(rows):
    n = max(1, len(rows))
    return (sum(r["well_formed"] for r in rows) / n, sum(r["correct"] for r in rows) / n,
            sum(r["answer_ok"] for r in rows) / n)
