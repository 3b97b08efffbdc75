#!/bin/sh
# export_html_page.sh: an HTML export of a chat whose reply holds Markdown (and hostile HTML),
# opened in headless Chromium: the page renders (a 1000x1400 screenshot with ink on it) and
# its DOM holds the structure the Markdown asks for, with no element the model wrote.
. "$GLMCHAT_SRCDIR/tests/e2e/lib.sh"

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || { echo "FAIL: chromium is not installed (./dev.sh installs it)"; exit 1; }
if "$GLMCHAT_BIN" chat --help 2>&1 | grep -q 'not built'; then
    echo "glmchat chat is not built yet: skipped"; exit 77
fi

R="$TMP/replies.jsonl"
cat >"$R" <<'JSON'
{"type":"content","text":"## Plan\n\nSome *emphasis* and **bold** with `code`.\n\n```c\nint main(void) { return 0; }\n```\n\n| name | n |\n|---|--:|\n| one | 1 |\n\n- first\n- second\n\nSee [site](https://example.com) and [x](javascript:alert(1)) <script>document.title='pwned'</script><img src=x onerror=alert(2)>\n"}
{"type":"done","finish":"stop"}
JSON
echo "hello" | GLMCHAT_TEST_REPLIES="$R" "$GLMCHAT_TEST_BIN" chat >"$TMP/chat.out" 2>&1 &&
    pass || fail "the scripted chat failed: $(tail -c 300 "$TMP/chat.out")"
expect_exit 0 "$GLMCHAT_BIN" export 1 --format html -o "$TMP/page.html"

# Chromium as root needs --no-sandbox; the profile stays in the scratch dir.
chrome() {
    timeout 20 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run \
        --user-data-dir="$TMP/profile" "$@" "file://$TMP/page.html" 2>>"$TMP/chromium.err"
}
chrome --screenshot="$TMP/page.png" --window-size=1000,1400 >/dev/null
[ -s "$TMP/page.png" ] && pass || fail "no screenshot: $(tail -c 400 "$TMP/chromium.err")"

# Decodes the PNG (8-bit RGB/RGBA, the five filters) and prints width, height and the share of
# pixels that are not the page's white background.
ink=$(python3 - "$TMP/page.png" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat = 8, b""
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
assert depth == 8 and ctype in (2, 6), "unexpected PNG format"
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
prev, ink, off = bytearray(stride), 0, 0
for y in range(h):
    f, line = raw[off], bytearray(raw[off + 1:off + 1 + stride])
    off += 1 + stride
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    ink += sum(1 for x in range(0, stride, bpp) if line[x:x + 3] != b"\xff\xff\xff")
    prev = line
print(w, h, "%.4f" % (ink / (w * h)))
PY
)
set -- $ink
[ "${1:-}x${2:-}" = 1000x1400 ] && pass || fail "the screenshot is ${1:-?}x${2:-?}, not 1000x1400"
# Text, rules, the code block and the table's borders: some ink, far from a blank or a
# wholly dark page.
python3 -c "import sys; s = float(sys.argv[1]); sys.exit(0 if 0.005 < s < 0.5 else 1)" "${3:-0}" &&
    pass || fail "the page looks blank or broken: ink share ${3:-?}"

chrome --dump-dom >"$TMP/dom.html"
for want in '<h4>Plan</h4>' '<em>emphasis</em>' '<strong>bold</strong>' '<code>code</code>' \
    '<pre><code class="language-c">int main(void) { return 0; }</code></pre>' \
    '<th>name</th><th style="text-align:right">n</th>' '<td>one</td>' '<li>first</li>' \
    '<a href="https://example.com" rel="noopener noreferrer nofollow">site</a>'; do
    grep -qF -- "$want" "$TMP/dom.html" && pass || fail "the DOM lacks $want"
done
grep -qF -- '<title>hello</title>' "$TMP/dom.html" && pass || fail "a script ran: $(grep -o '<title>[^<]*' "$TMP/dom.html")"
for bad in '<script' '<img' 'javascript:'; do
    grep -qF -- "$bad" "$TMP/dom.html" && fail "the DOM holds $bad" || pass
done
grep -Eq '<[a-z][^>]* on[a-z]+=' "$TMP/dom.html" && fail "an element has an event handler" || pass
grep -qF -- '&lt;script&gt;' "$TMP/dom.html" && pass || fail "the model's script tag is not shown as text"
finish
