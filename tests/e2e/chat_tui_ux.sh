#!/bin/bash
# chat_tui_ux.sh: the TUI in a real terminal (tmux) for what issue 32 found: messages that start
# with a path or //, /system show and clear, /search with no match, /set sampling, the resolved
# backend, Ctrl-C's quit hint after a cancel, stored numbers on reopen, NO_COLOR, and a long
# title in a narrow status line.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tui_lib.sh"
. "$(dirname "$0")/chat_lib.sh"
tui_chat_setup

cat >"$CHAT_REPLIES" <<'R'
{"type":"reasoning","text":"Think "}
{"type":"reasoning","text":"about "}
{"type":"reasoning","text":"it."}
{"type":"content","text":"About the path."}
{"type":"done","finish":"stop","prompt_tokens":12,"generated_tokens":16,"ttft_s":0.088,"decode_tok_s":40}
{"type":"content","text":"About the slash."}
{"type":"done","finish":"stop"}
{"type":"content","text":"Sampled."}
{"type":"done","finish":"stop"}
{"type":"content","text":"A long "}
{"type":"content","text":"reply "}
{"type":"content","text":"that "}
{"type":"content","text":"goes "}
{"type":"content","text":"on."}
{"type":"done","finish":"stop"}
R

tui_start
type_text "$RUN GLMCHAT_TEST_REPLY_DELAY_MS=150 GLMCHAT_TEST_CONTEXT=40000 '$G'"
keys Enter
expect_screen 'recorded-replies . (cpu|cuda) ' 5 "the status line shows the backend it runs on"
expect_screen ' ctx 0/40k 0% ' 3 "the context window shows before the first reply"
expect_no_screen ' auto ' "no 'auto' backend"

# A line that starts with a path is a message; //text sends /text; /nosuch stays a command.
type_text "/etc/passwd: what is in it?"; keys Enter
expect_screen 'About the path\.' 5 "a path-led line is sent"
expect_no_screen 'unknown command' "a path is no command"
expect_screen 'thought for 0\.[3-9]' 3 "the thought's time"
expect_screen '16 tokens' 3 "the reply ended"
type_text "//text"; keys Enter
expect_screen 'About the slash\.' 5 "//text is sent"
expect_screen 'ready' 3 "the reply ended"
type_text "/nosuch"; keys Enter
expect_screen 'unknown command /nosuch: /help lists' 3 "an unknown command is still one"
type_text "/serach sea"; keys Enter
expect_screen 'unknown command /serach: did you mean /search\?' 3 "a misspelt command: the one meant"
check_py "path and // messages" '
import json, os
reqs = [json.loads(l) for l in open(os.environ["TMP"] + "/requests.jsonl")]
users = [m["content"] for m in reqs[-1]["messages"] if m["role"] == "user"]
if users != ["/etc/passwd: what is in it?", "/text"]: print("FAIL: users", users)
'

# /system shows, sets and clears.
type_text "/system"; keys Enter
expect_screen 'no system prompt; /system TEXT sets one' 3 "/system shows none"
type_text "/system Be brief."; keys Enter
expect_screen 'system prompt set' 3 "/system TEXT sets"
type_text "/system"; keys Enter
expect_screen 'system prompt: Be brief\.' 3 "/system shows it"
type_text "/system clear"; keys Enter
expect_screen 'system prompt cleared' 3 "/system clear clears"

# /set sampling for the session; a bad value is refused by name.
type_text "/set"; keys Enter
expect_screen "temperature the model's, top_p the model's, top_k the model's, seed fresh" 3 \
    "/set alone shows the settings, the model's own in words (not -1)"
type_text "/set tempreature 0.3"; keys Enter
expect_screen "/set: there is no setting 'tempreature'; did you mean /set temperature\\?" 3 \
    "a misspelt key is an error naming it and the one meant"
type_text "/set colour 3"; keys Enter
expect_screen "/set: there is no setting 'colour'; /set KEY VALUE, KEY one of" 3 "an unknown key lists the keys"
type_text "/set top_k"; keys Enter
expect_screen '/set top_k takes one value: /set top_k VALUE' 3 "a key without a value says how"
type_text "/effort extreme"; keys Enter
expect_screen "/effort takes low, high or max, not 'extreme'" 3 "/effort names the bad value"
type_text "/think maybe"; keys Enter
expect_screen "/think takes on or off, not 'maybe'" 3 "/think names the bad value"
type_text "/set temperature 0.3"; keys Enter
expect_screen 'temperature 0\.3, top_p' 3 "/set shows the settings"
type_text "/set seed 7"; keys Enter
expect_screen 'seed 7, max_tokens' 3 "/set seed"
type_text "/set top_p 3"; keys Enter
expect_screen "'top_p' takes a number from 0 to 1" 3 "/set checks the value"
type_text "sample please"; keys Enter
expect_screen 'Sampled\.' 5 "the sampled reply"
expect_screen 'ready' 3 "the reply ended"
check_py "/set reaches the request; /system clear too" '
import json, os
r = [json.loads(l) for l in open(os.environ["TMP"] + "/requests.jsonl")][-1]
if abs(r["temperature"] - 0.3) > 1e-6 or r["seed"] != 7: print("FAIL: sampling", r["temperature"], r["seed"])
if r["messages"][0]["role"] == "system": print("FAIL: the cleared system prompt was sent")
'

# /search says where each hit is: the user's words, a reply or its thinking.
type_text "/search sample"; keys Enter
expect_screen 'you: \[sample\] please' 3 "a hit in the user's message says so"
keys Escape
expect_gone 'you: \[sample\]' 3 "the list closes"
# /search with no hit says so.
type_text "/search zzzqqq"; keys Enter
expect_screen 'no match for zzzqqq' 3 "/search names the words it did not find"
keys Escape
expect_gone 'no match for' 3 "the list closes"

# Ctrl-C cancels a reply; a second one a second later shows the hint instead of quitting.
type_text "go on"; keys Enter
expect_screen 'A long' 5 "the reply streams"
keys C-c
expect_screen 'canceled' 3 "the first Ctrl-C cancels"
sleep 1
keys C-c
expect_screen 'Ctrl-C again or Ctrl-D quits' 2 "the second shows the hint"
expect_no_screen 'PROMPT\$ *$' "still in the TUI"
keys C-c
expect_screen 'PROMPT\$ *$' 5 "the third quits"

# Reopened: the stored numbers, not the replay's.
type_text "$RUN '$G' chat --conversation 1"; keys Enter
expect_screen 'About the path\.' 5 "reopened"
expect_screen '16 tokens .*TTFT 0\.09 s' 3 "the stored tokens and TTFT"
expect_screen 'thought for 0\.[3-9]' 3 "the stored thinking time"
keys C-d
expect_screen 'PROMPT\$ *$' 5 "Ctrl-D leaves"

# NO_COLOR: attributes only.
clear_and_run() { type_text "$1"; keys Enter; }
clear_and_run "$RUN NO_COLOR=1 '$G' chat --conversation 1"
expect_screen 'About the path\.' 5 "reopened without colors"
if screen_esc | grep -qE $'\e\\[[0-9;]*(3[0-7]|4[0-7]|38;5|48;5)[;m]'; then
    fail "NO_COLOR: colors drawn:"; screen_esc | grep -E $'\e\\[[0-9;]*(3[0-7]|4[0-7])' | head -3 | cat -v >&2
else pass; fi
keys C-d
expect_screen 'PROMPT\$ *$' 5 "Ctrl-D leaves"
clear_and_run "$RUN '$G' chat --conversation 1"
expect_screen 'About the path\.' 5 "reopened with colors"
if screen_esc | grep -qE $'\e\\[[0-9;]*(3[0-7]|4[0-7]|38;5|48;5)[;m]'; then pass; else fail "the check cannot see colors"; fi
keys C-d
expect_screen 'PROMPT\$ *$' 5 "Ctrl-D leaves"

# /attach FILE and @FILE put text files after the message, fenced, by name; refused ones say why.
printf '{"type":"content","text":"Got the file."}\n{"type":"done","finish":"stop"}\n{"type":"content","text":"Got the at file."}\n{"type":"done","finish":"stop"}\n' >>"$CHAT_REPLIES"
printf 'alpha\n' >"$TMP/ws/notes.txt"
printf 'beta\n' >"$TMP/ws/more.md"
printf 'secret\n' >"$TMP/outside.txt"
clear_and_run "$RUN '$G' chat --conversation 1"
expect_screen 'About the path\.' 5 "reopened for attachments"
type_text "/attach $TMP/outside.txt"; keys Enter
expect_screen "cannot attach $TMP/outside.txt" 3 "a file outside the workspace is refused"
type_text "/attach notes.txt"; keys Enter
expect_screen 'notes.txt goes with your next message' 3 "/attach takes a file"
type_text "read it"; keys Enter
expect_screen 'Got the file\.' 5 "the attached message is answered"
expect_screen 'ready' 3 "the reply ended"
type_text "and @more.md, please, @alice"; keys Enter
expect_screen 'Got the at file\.' 5 "the @file message is answered"
check_py "attachments in the requests" '
import json, os
reqs = [json.loads(l) for l in open(os.environ["TMP"] + "/requests.jsonl")]
u1 = [m["content"] for m in reqs[-2]["messages"] if m["role"] == "user"][-1]
u2 = [m["content"] for m in reqs[-1]["messages"] if m["role"] == "user"][-1]
if u1 != "read it\n\nfile notes.txt:\n```\nalpha\n```": print("FAIL: /attach %r" % u1)
if u2 != "and @more.md, please, @alice\n\nfile more.md:\n```\nbeta\n```": print("FAIL: @file %r" % u2)
'
# A long title in a narrow status line is shortened to the room left before it is dropped.
q "UPDATE conversation SET title = 'A rather long title about sea birds and their nests' WHERE id = 1"
type_text "/open 1"; keys Enter
tmx resize-window -t t -x 120
expect_screen '^ #1 A rather long title about sea… │ recorded-replies' 3 "a wide window: 32 columns of the title"
tmx resize-window -t t -x 80
expect_screen '^ #1 A rather long title about… │ recorded-replies │ cpu │ TTFT [^│]* │ ready' 3 \
    "narrower: the title shortened to the room left, every other field kept"
tmx resize-window -t t -x 40
expect_gone 'A rather' 3 "dropped where 12 columns of it do not fit"
tmx resize-window -t t -x 80
expect_screen '│ TTFT 0\.00 s │ ready' 3 "the last reply's numbers"
type_text "/new"; keys Enter
expect_screen '^ new conversation │ recorded-replies │ cpu │ ready' 3 "/new drops the last reply's numbers"

# Up and Down move between the lines of a message (then walk the history); the status line
# says how many rows of a tall input are out of sight.
printf '{"type":"content","text":"Two lines read."}\n{"type":"done","finish":"stop"}\n' >>"$CHAT_REPLIES"
type_text "first line"; keys C-j; type_text "second line"
keys Up; type_text " EDITED"
keys Down; type_text " too"; keys Enter
expect_screen 'Two lines read\.' 5 "the two-line message is answered"
check_py "Up and Down edited the lines of the message" '
import json, os
r = [json.loads(l) for l in open(os.environ["TMP"] + "/requests.jsonl")][-1]
u = [m["content"] for m in r["messages"] if m["role"] == "user"][-1]
if u != "first line EDITED\nsecond line too": print("FAIL: %r" % u)
'
# One line wrapped over two rows: Up moves to the row above at the same column.
printf '{"type":"content","text":"One long line read."}\n{"type":"done","finish":"stop"}\n' >>"$CHAT_REPLIES"
LONG=$(python3 -c "print(''.join(chr(97 + i % 26) for i in range(120)))")
type_text "$LONG"; keys Up; type_text "X"; keys Enter
expect_screen 'One long line read\.' 5 "the long line is answered"
check_py "Up on a wrapped line moved one row up, the column kept" '
import json, os
r = [json.loads(l) for l in open(os.environ["TMP"] + "/requests.jsonl")][-1]
u = [m["content"] for m in r["messages"] if m["role"] == "user"][-1]
t = "".join(chr(97 + i % 26) for i in range(120))
# 80 columns: row 0 holds 77 characters after the prompt, row 1 the other 43 (the cursor at 43)
if u != t[:43] + "X" + t[43:]: print("FAIL: %r" % u)
'
keys Up
sleep 0.3
if screen | grep -q "^› ${LONG:0:40}"; then pass; else
    fail "Up in an empty input did not bring the last message back"; fi
keys C-u; keys C-u; keys BSpace; keys C-u
python3 -c "print('\n'.join('row %d' % i for i in range(30)), end='')" >"$TMP/paste.txt"
tmx load-buffer "$TMP/paste.txt"; tmx paste-buffer -p -t t
expect_screen '│ input ↑22 rows │' 3 "a tall input: the rows above its box"
for _ in 1 2 3; do keys Up; done
expect_screen '│ input ↑19 ↓3 rows │' 3 "and below it, once the cursor moved up"
keys C-d
finish
