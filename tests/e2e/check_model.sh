#!/bin/bash
# check_model.sh: glmchat check-model on a sharded model written by mkmodel (tiny-mtp, with its
# index): intact it exits 0 with its summary and memory plan; with a shard deleted, a shard
# truncated, an expert tensor removed, a dtype changed (each alone, then all at once), an extra
# shard, an MTP tensor gone or a config that contradicts the tensors, it exits 1 naming each.
. "$(dirname "$0")/lib.sh"
B=$GLMCHAT_BIN
M=$TMP/model
"$B" mkmodel --out "$M" --preset tiny-mtp --shard-mb 1 >/dev/null || fail "mkmodel failed"
P=model.language_model
S1=model-00001-of-00003.safetensors S2=model-00002-of-00003.safetensors S3=model-00003-of-00003.safetensors
for s in $S1 $S2 $S3; do [ -f "$M/$s" ] || fail "mkmodel wrote no $s: $(ls "$M")"; done

# edit.py DIR drop NAME | dtype NAME DTYPE: rewrites the shard holding NAME (and the index) so that
# NAME is gone, or declares another dtype of the same size (the data stays in place)
cat >"$TMP/edit.py" <<'PY'
import json, struct, sys
d, op, name = sys.argv[1], sys.argv[2], sys.argv[3]
index = json.load(open(f"{d}/model.safetensors.index.json"))
path = f"{d}/{index['weight_map'][name]}"
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
if op == "dtype":
    header[name]["dtype"] = sys.argv[4]
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= n, "the edited header is longer"
    open(path, "wb").write(raw[:8] + text.ljust(n, b" ") + data)
else:
    del header[name]
    del index["weight_map"][name]
    out, meta, off = b"", {}, 0
    for k, v in header.items():
        if k == "__metadata__":
            meta = v
            continue
        a, b = v["data_offsets"]
        out += data[a:b]
        v["data_offsets"] = [off, off + b - a]
        off += b - a
    if meta:
        header["__metadata__"] = meta
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + out)
    index.get("metadata", {}).pop("total_size", None)
    json.dump(index, open(f"{d}/model.safetensors.index.json", "w"))
PY
copy() { rm -rf "$TMP/c" && cp -r "$M" "$TMP/c"; }
edit() { python3 "$TMP/edit.py" "$TMP/c" "$@" || fail "edit.py $* failed"; }
check() { expect_exit "$1" "$B" check-model "$TMP/c"; }

copy
check 0
expect_grep out "layers: 8 \(6 KDA, 2 DSA; 7 MoE, 1 dense\), MTP layer: yes"
expect_grep out "experts: 8 routed \(2 a token\), 1 shared, 16 wide"
expect_grep out "tensors: [0-9]+ in 3 shards"
expect_grep out "the template's 16 special tokens present"
expect_grep out "one rank: weights .* GiB"
expect_grep out "each of two ranks: weights"
expect_grep out "DGX Spark \(128 GB unified memory, 8 GiB of it kept for the system"
expect_grep out "one rank on one Spark: .* fits"
expect_grep out "^complete"
[ -s "$TMP/err" ] && fail "stderr of an intact model is not empty: $(cat "$TMP/err")" || pass
expect_exit 0 "$B" --model "$TMP/c" check-model
expect_grep out "^complete"

# a deleted shard: named, with the tensors the index maps to it
copy
rm "$TMP/c/$S3"
check 1
expect_grep err "shard $TMP/c/$S3 is missing \(No such file or directory; the index maps 1 tensors to it\)"
expect_grep err "1 problem in"
# a truncated shard
copy
truncate -s -100 "$TMP/c/$S2"
check 1
expect_grep err "shard $TMP/c/$S2 cannot be read: .*the file is truncated"
# one expert tensor removed (from its shard and the index)
copy
edit drop $P.layers.5.mlp.experts.3.up_proj.weight
check 1
expect_grep err "tensor $P.layers.5.mlp.experts.3.up_proj.weight is missing \(layer 5 needs it\)"
expect_grep err "1 problem in"
# one dtype changed (F32 to I32: the same bytes, another type)
copy
edit dtype $P.layers.2.mlp.experts.0.down_proj.weight I32
check 1
expect_grep err "tensor $P.layers.2.mlp.experts.0.down_proj.weight in $TMP/c/$S2 has dtype I32; a weight matrix must be F32, BF16, F16, F8_E4M3 \(with block scales\) or EXL3"
# an MTP layer tensor gone
copy
edit drop $P.layers.8.mlp.experts.1.gate_proj.weight
check 1
expect_grep err "tensor $P.layers.8.mlp.experts.1.gate_proj.weight is missing \(the MTP layer needs it\)"
# an extra shard the index does not name
copy
cp "$TMP/c/$S3" "$TMP/c/model-00004-of-00004.safetensors"
check 1
expect_grep err "$TMP/c/model-00004-of-00004.safetensors: a safetensors file the index does not name"
# every problem at once, each named
copy
edit drop $P.layers.5.mlp.experts.3.up_proj.weight
edit dtype $P.layers.2.mlp.experts.0.down_proj.weight I32
rm "$TMP/c/$S3"
truncate -s -100 "$TMP/c/$S1"
check 1
expect_grep err "shard $TMP/c/$S3 is missing"
expect_grep err "shard $TMP/c/$S1 cannot be read"
expect_grep err "tensor $P.layers.5.mlp.experts.3.up_proj.weight is missing"
expect_grep err "tensor $P.layers.2.mlp.experts.0.down_proj.weight in .* has dtype I32"
expect_grep err "4 problems in"
# a config that contradicts the tensors: every expert's shape named
copy
python3 - "$TMP/c/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
(c.get("text_config") or c)["moe_intermediate_size"] = 24
json.dump(c, open(sys.argv[1], "w"))
PY
check 1
expect_grep err "tensor $P.layers.1.mlp.experts.0.gate_proj.weight in .* has shape \[16, 32\], but config.json implies \[24, 32\]"
expect_grep err "tensor $P.layers.8.mlp.experts.7.down_proj.weight in .* has shape \[32, 16\], but config.json implies \[32, 24\]"
# a broken tokenizer and template source are problems too; a directory that is not a model is refused
copy
echo '{' >"$TMP/c/tokenizer.json"
echo '{"chat_template": ' >"$TMP/c/tokenizer_config.json"
check 1
expect_grep err "check-model: tokenizer: "
expect_grep err "check-model: chat template: .*tokenizer_config.json: not valid JSON"
expect_exit 1 "$B" check-model "$TMP/nothing"
expect_grep err "is not a directory"
expect_exit 2 "$B" check-model
expect_grep err "give the model directory"
# the reference models of other configs (DSA first, shared indexers, expert groups, softplus gates;
# no tokenizer.json) pass every tensor check; the demo model (EXL3 experts) is complete
for fx in "$GLMCHAT_SRCDIR"/tests/fixtures/models/*/; do
    expect_exit 1 "$B" check-model "$fx"
    expect_grep err "check-model: 1 problem in"
    expect_grep err "tokenizer: cannot open tokenizer .*tokenizer.json"
done
expect_exit 0 "$B" check-model "$(dirname "$B")/models/demo"
expect_grep out "bits: EXL3 modules at [0-9.]+ bits a weight on average"
# on a terminal it says where it is while it reads
if command -v script >/dev/null; then
    copy
    script -qec "'$B' check-model '$TMP/c'" /dev/null >"$TMP/out" 2>&1
    expect_grep out "reading the header of shard 3 of 3"
fi
finish
