# make_fixtures.py: builds glmchat's reference fixture models with transformers' glm5_next
# implementation (the reference) and records their logits for glmchat's engine tests.
#
# Usage (on a machine with transformers >= 5.17):
#   python3 make_fixtures.py OUTDIR [BASE_CONFIG [EXISTING_MODEL_DIR]]
# Writes OUTDIR/NAME/{config.json,generation_config.json,model.safetensors,reference.safetensors}
# for every spec below, plus OUTDIR/debug/NAME.safetensors (per-layer outputs, for debugging).
# Deterministic: weights and prompts come from seeded torch generators on the CPU, in float32.
import copy
import inspect
import json
import os
import sys
import time
import traceback

import torch
from safetensors.torch import load_file, save_file

import transformers
from transformers import Glm5NextConfig, Glm5NextForConditionalGeneration

torch.set_num_threads(min(16, os.cpu_count() or 1))

K, D = "linear_attention", "deepseek_sparse_attention"


def layer_list(pattern):
    return [K if c == "K" else D for c in pattern]


# Each spec overrides text_config fields of the base config (fixtures/tiny-A's).
SPECS = [
    dict(name="groups-kpool2", T=90, prefill=37, text=dict(
        hidden_size=32, num_hidden_layers=6, layer_types=layer_list("KDKDKD"),
        mlp_layer_types=["dense", "dense"] + ["sparse"] * 4, intermediate_size=48,
        num_attention_heads=2, num_key_value_heads=2, q_lora_rank=24, kv_lora_rank=16,
        qk_nope_head_dim=12, qk_head_dim=12, v_head_dim=8,
        linear_num_heads=2, linear_head_dim=16,
        n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2,
        moe_intermediate_size=16, index_n_heads=16, index_head_dim=8, index_kpool=2,
        index_topk=8, vocab_size=256)),
    dict(name="shared-indexer-hc2", T=100, prefill=45, text=dict(
        hidden_size=32, num_hidden_layers=6, layer_types=layer_list("KDDKDD"),
        indexer_types=["full", "full", "shared", "full", "full", "shared"],
        mlp_layer_types=["dense"] + ["sparse"] * 5, intermediate_size=40, hc_mult=2,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=16,
        qk_nope_head_dim=8, qk_head_dim=8, v_head_dim=8,
        linear_num_heads=2, linear_head_dim=8,
        n_routed_experts=6, num_experts_per_tok=3, n_group=3, topk_group=2,
        n_shared_experts=2, norm_topk_prob=False, routed_scaling_factor=1.0,
        moe_intermediate_size=8, index_n_heads=16, index_head_dim=8, index_kpool=8,
        index_topk=16, vocab_size=256)),
    dict(name="dsa-first-hc3", T=150, prefill=64, text=dict(
        hidden_size=24, num_hidden_layers=7, layer_types=layer_list("DKKDKDK"),
        mlp_layer_types=["sparse"] * 7, hc_mult=3, hc_sinkhorn_iters=7,
        num_attention_heads=2, num_key_value_heads=2, q_lora_rank=16, kv_lora_rank=12,
        qk_nope_head_dim=10, qk_head_dim=10, v_head_dim=6,
        linear_num_heads=3, linear_head_dim=8, linear_lower_bound=-3.0,
        n_routed_experts=16, num_experts_per_tok=4, n_group=4, topk_group=2,
        moe_intermediate_size=8, index_n_heads=12, index_head_dim=8, index_kpool=4,
        index_topk=12, rms_norm_eps=1e-6, swiglu_limit=3.0, vocab_size=200)),
    dict(name="softplus-kpool1-hc1", T=70, prefill=29, text=dict(
        hidden_size=32, num_hidden_layers=4, layer_types=layer_list("KDKD"),
        mlp_layer_types=["dense"] + ["sparse"] * 3, intermediate_size=40, hc_mult=1,
        num_attention_heads=2, num_key_value_heads=2, q_lora_rank=16, kv_lora_rank=16,
        qk_nope_head_dim=8, qk_head_dim=8, v_head_dim=8,
        linear_num_heads=2, linear_head_dim=8, linear_lower_bound=None,
        linear_conv_kernel_dim=3,
        n_routed_experts=4, num_experts_per_tok=2, n_group=2, topk_group=2,
        moe_intermediate_size=8, index_n_heads=16, index_head_dim=8, index_kpool=1,
        index_topk=8, vocab_size=256)),
]

# ---- tie detection: wrap topk and report equal values at the selection boundary -------------
TIES = {"count": 0, "sites": {}}
_orig_topk = torch.topk
_orig_tensor_topk = torch.Tensor.topk


def _check_ties(inp, k, dim=-1, largest=True):
    if not largest or k <= 0 or inp.shape[dim] <= k:
        return
    vals = _orig_topk(inp.detach(), k + 1, dim=dim, largest=True, sorted=True).values
    last = vals.select(dim, k - 1)
    nxt = vals.select(dim, k)
    # masked candidates carry the dtype's lowest value: ties among them select nothing
    tie = (last == nxt) & (last > torch.finfo(last.dtype).min) & torch.isfinite(last)
    n = int(tie.sum())
    if n:
        frame = inspect.currentframe().f_back.f_back
        site = "%s:%d" % (frame.f_code.co_name, frame.f_lineno)
        TIES["count"] += n
        TIES["sites"][site] = TIES["sites"].get(site, 0) + n


def _topk(inp, k, dim=-1, largest=True, sorted=True, **kw):
    _check_ties(inp, k, dim, largest)
    return _orig_topk(inp, k, dim=dim, largest=largest, sorted=sorted, **kw)


def _tensor_topk(self, k, dim=-1, largest=True, sorted=True, **kw):
    _check_ties(self, k, dim, largest)
    return _orig_tensor_topk(self, k, dim=dim, largest=largest, sorted=sorted, **kw)


torch.topk = _topk
torch.Tensor.topk = _tensor_topk


# ---- random weights by role --------------------------------------------------------------------
def randomize(model, cfg, gen):
    t = cfg.text_config
    named = list(model.named_parameters()) + [
        (n, b) for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")]
    for name, p in sorted(named, key=lambda x: x[0]):
        shape = tuple(p.shape)
        r = torch.randn(shape, generator=gen, dtype=torch.float32)
        u = torch.rand(shape, generator=gen, dtype=torch.float32)
        if name.endswith("A_log"):
            v = 0.2 + 1.2 * u
        elif name.endswith("dt_bias"):
            v = 0.5 * r
        elif "conv1d" in name:
            v = 0.5 * r
        elif "hc_" in name and name.endswith("base"):
            v = 0.5 * r
        elif "hc_" in name and name.endswith("scale"):
            v = 1.0 + 0.2 * r
        elif name.endswith("e_score_correction_bias"):
            v = 0.05 * r
        elif name.endswith("compress_ape"):
            v = 0.25 * r
        elif len(shape) == 1 and "norm" in name and name.endswith("weight"):
            v = 1.0 + 0.2 * r
        elif len(shape) == 1:
            v = 0.2 * r
        elif len(shape) == 3 and "experts" in name:
            fan_in = t.hidden_size if "gate_up" in name else t.moe_intermediate_size
            v = r / fan_in ** 0.5
        else:
            v = r / shape[-1] ** 0.5
        with torch.no_grad():
            p.copy_(v)


def build_config(base, spec):
    d = copy.deepcopy(base)
    text = d["text_config"]
    text.update(spec["text"])
    n = text["num_hidden_layers"]
    if "indexer_types" not in spec["text"]:
        text["indexer_types"] = ["full"] * n
    return Glm5NextConfig(**d)


def run_passes(model, ids, prefill, record=None):
    with torch.no_grad():
        full = model(input_ids=ids[None], use_cache=False).logits[0].float().clone()
        if record is not None:
            record["on"] = False
        out = model(input_ids=ids[None, :prefill], use_cache=True)
        rows = [out.logits[0]]
        pkv = out.past_key_values
        for t in range(prefill, ids.shape[0]):
            out = model(input_ids=ids[None, t:t + 1], past_key_values=pkv, use_cache=True)
            pkv = out.past_key_values
            rows.append(out.logits[0])
        cached = torch.cat(rows, 0).float().clone()
    return full, cached


def add_hooks(model, store, record):
    import re
    pat = re.compile(r"language_model\.(layers\.\d+(\.self_attn|\.self_attn\.indexer|\.mlp)?|norm)$")
    hooks = []
    for name, mod in model.named_modules():
        if not pat.search(name):
            continue

        def hook(m, args, out, name=name):
            if not record["on"]:
                return
            o = out[0] if isinstance(out, tuple) else out
            if torch.is_tensor(o):
                keep = o.detach().clone().contiguous()
                store[name] = keep if name.endswith("indexer") else keep.float()
        hooks.append(mod.register_forward_hook(hook))
    return hooks


def make_one(base, spec, outdir, max_seeds=16):
    cfg = build_config(base, spec)
    T, P = spec["T"], spec["prefill"]
    for seed in range(1000, 1000 + max_seeds):
        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        model = Glm5NextForConditionalGeneration(cfg).float().eval()
        randomize(model, cfg, gen)
        ids = torch.randint(1, cfg.text_config.vocab_size, (T,), generator=gen, dtype=torch.long)
        store, record = {}, {"on": True}
        hooks = add_hooks(model, store, record)
        TIES["count"], TIES["sites"] = 0, {}
        full, cached = run_passes(model, ids, P, record)
        for h in hooks:
            h.remove()
        if TIES["count"]:
            print("  %s seed %d: %d boundary ties %s, next seed" % (spec["name"], seed,
                  TIES["count"], TIES["sites"]))
            continue
        d = os.path.join(outdir, spec["name"])
        os.makedirs(d, exist_ok=True)
        model.save_pretrained(d)
        # keep the text model only (the vision tower is not part of the engine's tests)
        sd = load_file(os.path.join(d, "model.safetensors"))
        sd = {k: v.contiguous() for k, v in sd.items() if ".visual." not in k}
        save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        save_file({"input_ids": ids.to(torch.int32), "logits_full": full.contiguous(),
                   "logits_cached": cached.contiguous(),
                   "prefill": torch.tensor([P], dtype=torch.int32)},
                  os.path.join(d, "reference.safetensors"),
                  metadata={"prefill": str(P), "seed": str(seed)})
        os.makedirs(os.path.join(outdir, "debug"), exist_ok=True)
        store["input_ids"] = ids.to(torch.int32)
        save_file(store, os.path.join(outdir, "debug", spec["name"] + ".safetensors"))
        diff = float((full - cached).abs().max())
        return dict(name=spec["name"], seed=seed, T=T, P=P, diff=diff,
                    scale=float(full.abs().max()),
                    size=os.path.getsize(os.path.join(d, "model.safetensors")))
    return dict(name=spec["name"], seed=None)


def debug_existing(model_dir, outdir, name):
    """Records per-layer outputs of an existing fixture model over its reference prompt."""
    model = Glm5NextForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = load_file(os.path.join(model_dir, "reference.safetensors"))["input_ids"].long()
    store, record = {}, {"on": True}
    hooks = add_hooks(model, store, record)
    with torch.no_grad():
        model(input_ids=ids[None], use_cache=False)
    for h in hooks:
        h.remove()
    store["input_ids"] = ids.to(torch.int32)
    os.makedirs(os.path.join(outdir, "debug"), exist_ok=True)
    save_file(store, os.path.join(outdir, "debug", name + ".safetensors"))


def main():
    outdir = sys.argv[1]
    base_path = sys.argv[2] if len(sys.argv) > 2 else "tiny-A-config.json"
    with open(base_path) as f:
        base = json.load(f)
    for k in ("architectures", "dtype", "transformers_version"):
        base.pop(k, None)
    print("transformers", transformers.__version__, "torch", torch.__version__)
    if len(sys.argv) > 3:
        try:
            debug_existing(sys.argv[3], outdir, os.path.basename(sys.argv[3].rstrip("/")))
        except Exception:
            traceback.print_exc()
    rows = []
    for spec in SPECS:
        t0 = time.time()
        try:
            r = make_one(base, spec, outdir)
        except Exception:
            traceback.print_exc()
            r = dict(name=spec["name"], seed=None, error=True)
        r["secs"] = time.time() - t0
        rows.append(r)
    print("%-22s %5s %4s %4s %10s %7s %8s %6s" % ("fixture", "seed", "T", "P", "full-cached",
                                                   "scale", "bytes", "secs"))
    for r in rows:
        if r.get("seed") is None:
            print("%-22s FAILED (%.1fs)" % (r["name"], r["secs"]))
            continue
        print("%-22s %5d %4d %4d %10.2e %7.2f %8d %6.1f" % (r["name"], r["seed"], r["T"], r["P"],
              r["diff"], r["scale"], r["size"], r["secs"]))


if __name__ == "__main__":
    main()
