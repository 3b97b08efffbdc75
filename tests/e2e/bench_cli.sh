#!/bin/sh
# bench_cli.sh: `glmchat bench` on a real model directory: its table, its bandwidth floor checked
# against bytes counted independently from the safetensors header, and its refusals.
. "$GLMCHAT_SRCDIR/tests/e2e/lib.sh"

M="$TMP/model"
expect_exit 0 "$GLMCHAT_BIN" mkmodel --out "$M" --seed 3
expect_exit 0 "$GLMCHAT_BIN" bench --model "$M" --prompt 8 --tokens 3 --threads 2
expect_grep out '^memory read +[0-9.]+ GB/s'
expect_grep out '^prefill 8 tokens +[0-9]+ tok/s, [0-9.]+ GFLOP/s'
expect_grep out '^decode, median of 3 +[0-9.]+ ms/token'
cp "$TMP/out" "$TMP/table"

# every ratio is a positive number
ratios=$(awk '/^(prefill|decode)/ {print $NF}' "$TMP/table")
for r in $ratios; do
    awk -v r="$r" 'BEGIN { exit !(r > 0 && r < 100) }' && pass || fail "ratio '$r' is not a positive number"
done
[ "$(echo "$ratios" | wc -w)" -eq 2 ] && pass || fail "expected two ratios, got '$ratios'"

# the floor's bytes per token, counted from the file: every matrix once (the embedding one row),
# routed experts by their share num_experts_per_tok / n_routed_experts, the KDA states twice
want=$(python3 - "$M" <<'PY'
import json, struct, sys
d = sys.argv[1]
cfg = json.load(open(d + "/config.json"))["text_config"]
f = open(d + "/model.safetensors", "rb")
n = struct.unpack("<Q", f.read(8))[0]
head = json.loads(f.read(n))
size = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1}
share = cfg["num_experts_per_tok"] / cfg["n_routed_experts"]
total = 0.0
for name, t in head.items():
    if name == "__metadata__" or len(t["shape"]) != 2 or name.endswith("compress_ape"):
        continue
    b = t["shape"][0] * t["shape"][1] * size[t["dtype"]]
    if ".mlp.experts." in name:
        b *= share
    if name.endswith("embed_tokens.weight"):
        b /= t["shape"][0]
    total += b
kda = sum(1 for k in cfg["layer_types"] if k == "linear_attention")
total += 2 * kda * cfg["linear_num_heads"] * cfg["linear_head_dim"] ** 2 * 4
print("%.3f" % (total / 1e6))
PY
)
got=$(sed -n 's/.*floor, \([0-9.]*\) MB\/token.*/\1/p' "$TMP/table")
[ -n "$want" ] && [ "$got" = "$want" ] && pass || fail "floor bytes: bench says '$got' MB/token, the file says '$want'"

# refusals: bad numbers, other backends, a directory that is no model
expect_exit 2 "$GLMCHAT_BIN" bench --tokens 0
expect_grep err "'--tokens' takes a whole number from 1 to 1048576, not '0'"
expect_exit 2 "$GLMCHAT_BIN" --backend cuda bench --model "$M"
expect_grep err 'cpu backend'
expect_exit 1 "$GLMCHAT_BIN" bench --model "$TMP/nothing"
expect_grep err "$TMP/nothing"
expect_exit 0 "$GLMCHAT_BIN" bench --help
expect_grep out '^Usage: glmchat bench'
finish
