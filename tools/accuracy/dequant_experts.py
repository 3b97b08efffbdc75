#!/usr/bin/env python3
# dequant_experts.py: a copy of an EXL3 checkpoint whose EXL3 modules are plain F32 again (their
# dequantized values, from `glmchat dump-tensor`), so that `glmchat quantize` quantizes them anew.
# Usage: python3 dequant_experts.py GLMCHAT MODEL_DIR OUT_DIR   (one model.safetensors; no numpy)
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

EXL3_PARTS = (".trellis", ".suh", ".svh", ".mcg", ".mul1")


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


def main():
    glmchat, src, out = sys.argv[1:4]
    path = os.path.join(src, "model.safetensors")
    header, base = read_header(path)
    meta = header.pop("__metadata__", None)
    modules = sorted(k[: -len(".trellis")] for k in header if k.endswith(".trellis"))
    if not modules:
        sys.exit("dequant_experts: %s has no EXL3 module (no <module>.trellis tensor)" % path)
    os.makedirs(out, exist_ok=True)
    tensors = []  # (name, dtype, shape, source: (offset, length) in src or a file of floats)
    tmp = tempfile.mkdtemp(prefix="dequant-")
    try:
        mods = set(modules)
        for name, t in header.items():
            if not any(name.endswith(p) and name[: -len(p)] in mods for p in EXL3_PARTS):
                tensors.append((name, t["dtype"], t["shape"], ("src",) + tuple(t["data_offsets"])))
        for i, mod in enumerate(modules):
            f32 = os.path.join(tmp, "%d.f32" % i)
            shape = subprocess.run([glmchat, "dump-tensor", "--model", src, "--name", mod, "--out",
                                    f32], check=True, capture_output=True, text=True).stdout
            found = re.search(r"\[(\d+), (\d+)\]", shape)
            dims = [int(found.group(1)), int(found.group(2))] if found else []
            if len(dims) != 2 or os.path.getsize(f32) != 4 * dims[0] * dims[1]:
                sys.exit("dequant_experts: dump-tensor %s said %r, file has %d bytes"
                         % (mod, shape, os.path.getsize(f32)))
            tensors.append((mod + ".weight", "F32", dims, ("file", f32)))
        new_header, offset = {}, 0
        if meta is not None:
            new_header["__metadata__"] = meta
        for name, dtype, shape, source in tensors:
            length = source[2] - source[1] if source[0] == "src" else os.path.getsize(source[1])
            new_header[name] = {"dtype": dtype, "shape": shape,
                                "data_offsets": [offset, offset + length]}
            offset += length
        blob = json.dumps(new_header).encode()
        blob += b" " * (-len(blob) % 8)
        with open(path, "rb") as fin, open(os.path.join(out, "model.safetensors"), "wb") as fo:
            fo.write(struct.pack("<Q", len(blob)) + blob)
            for name, dtype, shape, source in tensors:
                if source[0] == "src":
                    fin.seek(base + source[1])
                    fo.write(fin.read(source[2] - source[1]))
                else:
                    with open(source[1], "rb") as fs:
                        fo.write(fs.read())
    finally:
        shutil.rmtree(tmp)
    for name in os.listdir(src):
        if name.endswith(".json") and name != "model.safetensors.index.json":
            shutil.copy(os.path.join(src, name), os.path.join(out, name))
    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg.pop("quantization_config", None)
    cfg.get("text_config", {}).pop("quantization_config", None)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=1)
    print("dequant_experts: %d EXL3 modules of %s written as F32 to %s" % (len(modules), src, out))


if __name__ == "__main__":
    main()
