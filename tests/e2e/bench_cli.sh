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

# the floor's bytes per token, counted from the file and the config as model/traffic.c defines
# them: every matrix once (the embedding one row), routed experts by their share
# num_experts_per_tok / n_routed_experts, the conv weights, the norm weights and router biases;
# the KDA states and conv windows read and written; per HC site the 4 streams read by the mix
# and the collapse, read and written by the update (with the sublayer's output row), and read
# by the final norm; per DSA layer the latent rows and pooled keys at the median step's context
# (prompt 8 + 3 tokens / 2 = 9), f32 as the CPU backend keeps them
want=$(python3 - "$M" <<'PY'
import json, struct, sys
d = sys.argv[1]
cfg = json.load(open(d + "/config.json"))["text_config"]
f = open(d + "/model.safetensors", "rb")
n = struct.unpack("<Q", f.read(8))[0]
head = json.loads(f.read(n))
size = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1}
share = cfg["num_experts_per_tok"] / cfg["n_routed_experts"]
vectors = ("conv1d.weight", "layernorm.weight", "e_score_correction_bias", "language_model.norm.weight")
total = 0.0
for name, t in head.items():
    if name == "__metadata__" or name.endswith("compress_ape"):
        continue
    shape = t["shape"]
    b = size[t["dtype"]]
    for x in shape:
        b *= x
    if len(shape) != 2 and not name.endswith(vectors):
        continue
    if ".mlp.experts." in name:
        b *= share
    if name.endswith("embed_tokens.weight"):
        b /= shape[0]
    total += b
D, S, L = cfg["hidden_size"], cfg["hc_mult"], cfg["num_hidden_layers"]
H, dk, K = cfg["linear_num_heads"], cfg["linear_head_dim"], cfg["linear_conv_kernel_dim"]
kda = sum(1 for k in cfg["layer_types"] if k == "linear_attention")
total += kda * 2 * (H * dk * dk + (K - 1) * 3 * H * dk) * 4
total += 2 * L * (4 * S * D + D) * 4 + S * D * 4
ctx, kp = 9, cfg["index_kpool"]
dsa = L - kda
total += dsa * (min(ctx, cfg["index_topk"] + kp - 1) * cfg["kv_lora_rank"] + ctx // kp * cfg["index_head_dim"]) * 4
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
