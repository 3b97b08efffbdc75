# corpus.py: deterministic generator of varied text for glmchat's tokenizer fixtures and benchmarks.
# Prose in many scripts, code, JSON, numbers, emoji, whitespace runs, GLM's tags and hostile bytes.
import json
import random

PROSE = [
    "The quick brown fox jumps over the lazy dog, doesn't it? We'll see; they've said it's fine.",
    "I'M SURE YOU'LL LIKE IT. She'd gone before he'd arrived, and we're all glad they'RE here.",
    "Der schnelle braune Fuchs springt über den faulen Hund. Größe, Straße, Übermäßig!",
    "Le cœur a ses raisons que la raison ne connaît point. Où est l'hôtel ? C'est à côté.",
    "El veloz murciélago hindú comía feliz cardillo y kiwi. ¿Dónde está? ¡Aquí mismo!",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. Привет, мир!",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Καλημέρα κόσμε.",
    "صِف خَلقَ خَودِ كَمِثلِ الشَمسِ إِذ بَزَغَت يَحظى الضَجيعُ بِها نَجلاءَ مِعطارِ",
    "דג סקרן שט בים מאוכזב ולפתע מצא חברה. שלום עולם!",
    "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम",
    "我能吞下玻璃而不伤身体。今天天气很好，我们去公园散步吧！人工智能正在改变世界。",
    "いろはにほへと ちりぬるを わかよたれそ つねならむ。東京は日本の首都です。カタカナ、ひらがな。",
    "다람쥐 헌 쳇바퀴에 타고파. 안녕하세요, 세계! 한국어 문장입니다.",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน",
    "Tiếng Việt có dấu: Chào thế giới, hôm nay trời đẹp quá!",
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich. ſtraße 'ſ 'S 'ſ",
    "Ça va? Ο Θεός! Ἀρχιμήδης ἔφη· δός μοι πᾶ στῶ. Ⅻ ⅻ ① ² ³ ½ ٣ ۴ ௰",
]

EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇯🇵", "🇩🇪", "❤️", "🔥", "🤖", "🧑🏿‍🚀", "🏳️‍🌈", "✅", "☕", "🙂‍↔️", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𠜎𠜱𠝹"]

SPECIAL = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
           "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
           "<|end_of_video|>", "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>",
           "<|end_of_transcription|>", "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>", "<think>",
           "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<arg_key>",
           "</arg_key>", "<arg_value>", "</arg_value>", "/nothink", "<|begin_of_box|>", "<|end_of_box|>",
           "<|image|>", "<|video|>"]
# Ids 154820..154855 in this order; the first 18 (ids 154820-154837) are special, the rest added only.
SPECIAL_FLAGS = {t: True for t in SPECIAL[:18]}

CODE = [
    'int main(int argc, char **argv)\n{\n    for (int i = 0; i < argc; i++)\n        printf("%s\\n", argv[i]);\n    return 0;\n}\n',
    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\nprint([fib(i) for i in range(20)])\n",
    "const xs = [1, 2, 3].map((x) => x ** 2);\nconsole.log(`squares: ${xs.join(', ')}`);\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;\n",
    "fn main() {\n\tlet v: Vec<u32> = (0..10).collect();\n\tprintln!(\"{:?}\", v);\n}\r\n",
    "#!/bin/sh\nset -eu\nfor f in *.txt; do\n  wc -l \"$f\" | awk '{print $1}'\ndone\n",
    "<html><body><p class=\"x\">Hello&nbsp;world</p></body></html>\n",
    "    \t  if (x)   {  y();  }   \n\n\n\t\t\treturn;\n",
]

WS = [" ", "  ", "   ", "    ", "\t", "\n", "\r\n", "\n\n", " \n", "\u00a0", "\u3000", "\u2028", "\u0085",
      "\u2009", "\u200b", "\u180e", "\x0b", "\x0c", "\u1680", "\u202f", "\x1c", "\x1f"]


def rand_number(rng):
    k = rng.randrange(6)
    if k == 0:
        return str(rng.randrange(10 ** rng.randrange(1, 25)))
    if k == 1:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randrange(0, 9)}f}"
    if k == 2:
        return f"{rng.random():e}"
    if k == 3:
        return "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 40)))
    if k == 4:
        return f"{rng.randrange(1, 32)}/{rng.randrange(1, 13)}/{rng.randrange(1900, 2100)}"
    return "٣٤٥" if rng.random() < 0.5 else "１２３４５"


def rand_json(rng, depth=0):
    k = rng.randrange(7 if depth < 3 else 4)
    if k == 0:
        return rng.randrange(-10 ** 6, 10 ** 6)
    if k == 1:
        return rng.uniform(-1000, 1000)
    if k == 2:
        return rng.choice([True, False, None])
    if k == 3:
        return rng.choice(PROSE)[: rng.randrange(1, 40)]
    if k in (4, 5):
        return {f"k{rng.randrange(100)}_{i}": rand_json(rng, depth + 1) for i in range(rng.randrange(0, 5))}
    return [rand_json(rng, depth + 1) for _ in range(rng.randrange(0, 5))]


def rand_piece(rng):
    k = rng.randrange(12)
    if k <= 2:
        s = rng.choice(PROSE)
        a = rng.randrange(len(s))
        return s[a: a + rng.randrange(1, 200)]
    if k == 3:
        return rng.choice(CODE)
    if k == 4:
        return json.dumps(rand_json(rng), ensure_ascii=rng.random() < 0.3, indent=rng.choice([None, 2]))
    if k == 5:
        return " ".join(rand_number(rng) for _ in range(rng.randrange(1, 6)))
    if k == 6:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randrange(1, 5)))
    if k == 7:
        return "".join(rng.choice(WS) for _ in range(rng.randrange(1, 12)))
    if k == 8:
        t = rng.choice(SPECIAL)
        return rng.choice([t, t[:-1], t[1:], t + t, "<" + t + ">", t.upper()])
    if k == 9:
        return " " * rng.randrange(1, 70) + rng.choice(["x", "\n", "", "1"])
    if k == 10:
        return "".join(chr(rng.randrange(0x20, 0x2FFFF)) for _ in range(rng.randrange(1, 8)))
    return rng.choice(["'s", "'S", "'ll", "'LL", "'Ve", "'ſ", "'m", "'D", "'t", "''s", " 're", "'"]) + rng.choice(["", " ", "x", "s"])


def unicode_ok(s):
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def text_case(rng, max_pieces=12):
    while True:
        s = "".join(rand_piece(rng) for _ in range(rng.randrange(1, max_pieces)))
        if unicode_ok(s):
            return s


def hostile_bytes(rng):
    """Byte strings that are not valid UTF-8 (the CLI reads bytes)."""
    bad = [b"\xff", b"\xfe", b"\xc0\x80", b"\xc1\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80",
           b"\xf5\x80", b"\x80", b"\xbf\xbf", b"\xe2\x82", b"\xf0\x9f\x98", b"\xf0\x9f", b"\xe0\x80\xaf",
           b"\xf8\x88\x80\x80\x80", b"\xc3", b"\xe4\xb8"]
    parts = []
    for _ in range(rng.randrange(1, 8)):
        if rng.random() < 0.5:
            parts.append(rng.choice(bad))
        else:
            parts.append(text_case(rng, 3).encode("utf-8"))
    return b"".join(parts)


def bench_text(rng, nbytes):
    out, n = [], 0
    while n < nbytes:
        s = text_case(rng, 20)
        out.append(s)
        n += len(s.encode("utf-8"))
    return "".join(out)
