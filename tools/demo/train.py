# train.py: trains glmchat's embedded demo model (GLM-5.3-Flash's architecture, a few million
# parameters) on synthetic tool-using conversations, quantizes its routed experts with glmchat and writes it.
# Usage (one H200 run, transformers >= 5.17 with glm5_next, HF tokenizers):
#   python3 train.py [--preset demo|larger] [--no-eval] BASE_CONFIG.json OUTDIR [TRAIN_SECONDS [GLMCHAT_BINARY]]
# --preset larger: the accuracy tool's second model (PRESETS); --no-eval: no PyTorch evaluation, no
# dequantized reload and no reference logits (the time goes to training).
# Before training it replaces the model's KDA core with kda_chunk.py's chunked form and stops unless
# that matches the model's own (outputs and gradients). With GLMCHAT_BINARY it EXL3-quantizes the
# routed experts (`glmchat quantize`) and evaluates and references the quantized weights.
# Writes OUTDIR/{model.safetensors.gz,config.json,generation_config.json,tokenizer.json,
# reference.safetensors,float.safetensors.gz,config_float.json,heldout_*.jsonl,summary.txt}.
import gzip
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time
import traceback

os.environ["TOKENIZERS_PARALLELISM"] = "true"
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import Glm5NextConfig, Glm5NextForConditionalGeneration  # noqa: E402
from transformers.models.glm5_next import modeling_glm5_next as hf_glm5  # noqa: E402

import data  # noqa: E402
import kda_chunk  # noqa: E402

T0 = time.time()
SPECIAL = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
           "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
           "<|end_of_video|>", "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>",
           "<|end_of_transcription|>", "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>", "<think>",
           "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<arg_key>",
           "</arg_key>", "<arg_value>", "</arg_value>", "/nothink", "<|begin_of_box|>", "<|end_of_box|>",
           "<|image|>", "<|video|>"]
FIRST_ADDED = 154820
VOCAB = 154880
EOS = [154820, 154827, 154829]
SID = {t: FIRST_ADDED + i for i, t in enumerate(SPECIAL)}
GLM_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL_RE = re.compile("|".join(re.escape(t) for t in sorted(SPECIAL, key=len, reverse=True)))
# The model's shape. demo: the embedded demo model. larger: about 2.5 times its parameters in use
# (hidden 512, 8 attention and 4 indexer heads of the real model's kinds, KDA heads 128 wide as the
# real model's) for the accuracy tool's second model; its indexer keeps 256 tokens (64 pools of 4),
# so conversations past that are read through the indexer's selection and its caches' formats count.
K_, D_ = "linear_attention", "deepseek_sparse_attention"
PRESETS = {
    "demo": dict(hidden_size=256, num_hidden_layers=4, layer_types=[K_, K_, K_, D_],
                 mlp_layer_types=["dense", "sparse", "sparse", "sparse"], intermediate_size=512,
                 moe_intermediate_size=128, n_routed_experts=8, num_experts_per_tok=2, num_attention_heads=4,
                 num_key_value_heads=4, q_lora_rank=128, kv_lora_rank=64, qk_nope_head_dim=64, qk_head_dim=64,
                 v_head_dim=64, linear_num_heads=4, linear_head_dim=64, index_n_heads=4, index_head_dim=32,
                 index_topk=2048),
    "larger": dict(hidden_size=512, num_hidden_layers=4, layer_types=[K_, K_, K_, D_],
                   mlp_layer_types=["dense", "sparse", "sparse", "sparse"], intermediate_size=1024,
                   moe_intermediate_size=128, n_routed_experts=8, num_experts_per_tok=2, num_attention_heads=8,
                   num_key_value_heads=8, q_lora_rank=256, kv_lora_rank=128, qk_nope_head_dim=64,
                   qk_head_dim=64, v_head_dim=64, linear_num_heads=4, linear_head_dim=128, index_n_heads=8,
                   index_head_dim=64, index_topk=256),
}
PRESET = PRESETS["demo"]
HIDDEN = PRESET["hidden_size"]
N_CONVERSATIONS = 40000
BATCH_TOKENS = 64000
LOG = []


def log(*a):
    s = " ".join(str(x) for x in a)
    print("[%6.1fs] %s" % (time.time() - T0, s), flush=True)
    LOG.append(s)


def train_tokenizer(texts, vocab_size):
    """Byte-level BPE with GLM's pre-tokenizer. Digits are left out of the training text, so numbers
    stay single digits: the model copies and composes numbers digit by digit (10 well-trained tokens)
    instead of meeting each of ~1000 three-digit tokens a few hundred times."""
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GLM_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([re.sub(r"[0-9]", "", t) for t in texts], trainer)
    spec = json.loads(tok.to_str())
    spec["model"]["ignore_merges"] = True
    added = []
    for i, t in enumerate(SPECIAL):
        spec["model"]["vocab"][t] = FIRST_ADDED + i
        added.append({"id": FIRST_ADDED + i, "content": t, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": i < 18})
    spec["added_tokens"] = added
    tok = Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
    for t in SPECIAL:
        assert tok.encode(t).ids == [SID[t]], t
    assert len(tok.encode("1234567890").ids) == 10
    return tok


def encode_all(tok, convs):
    """(ids, trained mask) of each rendered conversation; every distinct piece is encoded once, in batch."""
    rendered = [data.render(c) for c in convs]
    uniq = sorted({p for r in rendered for p, _ in r})
    enc = dict(zip(uniq, (e.ids for e in tok.encode_batch(uniq, add_special_tokens=False))))
    out = []
    for r in rendered:
        ids, mask = [], []
        for text, trained in r:
            e = enc[text]
            ids += e
            mask += [trained] * len(e)
        out.append((ids, mask))
    return out


# Config fields transformers types as float; its strict config classes (5.17) refuse an int there,
# and a config printed by cJSON carries "swiglu_limit": 10.
FLOAT_FIELDS = {"swiglu_limit", "rms_norm_eps", "hc_eps", "routed_scaling_factor", "linear_lower_bound",
                "gate_lower_bound", "rope_theta", "attention_dropout", "initializer_range",
                "partial_rotary_factor", "layer_norm_eps", "norm_eps", "factor", "beta_fast", "beta_slow",
                "mscale", "mscale_all_dim", "attention_factor", "hidden_dropout", "dropout", "router_aux_loss_coef"}


def float_fields(node, config_class=None):
    """node with every int under a float field made a float: FLOAT_FIELDS, and config_class's
    dataclass fields typed float where it declares them."""
    names = set(FLOAT_FIELDS)
    for f in getattr(config_class, "__dataclass_fields__", {}).values():
        if f.type in (float, "float"):
            names.add(f.name)
    if isinstance(node, dict):
        return {k: float(v) if k in names and isinstance(v, int) and not isinstance(v, bool)
                else float_fields(v, None) if isinstance(v, (dict, list)) else v for k, v in node.items()}
    if isinstance(node, list):
        return [float_fields(v, None) for v in node]
    return node


def build_config(base_path):
    d = json.load(open(base_path))
    d.pop("quantization_config", None)  # a base taken from a quantized checkpoint's config
    t = d["text_config"]
    t.update(dict(PRESET, n_shared_experts=1, index_kpool=4, indexer_types=["full"] * PRESET["num_hidden_layers"],
                  vocab_size=VOCAB, pad_token_id=154820, eos_token_id=EOS, max_position_embeddings=16384))
    d["vision_config"]["out_hidden_size"] = HIDDEN
    text_class = getattr(Glm5NextConfig, "sub_configs", {}).get("text_config")
    d = float_fields(d, Glm5NextConfig)
    d["text_config"] = float_fields(d["text_config"], text_class)
    return Glm5NextConfig(**d)


class Head:
    """LM head over the used ids plus one shared row standing for every unused id (all equal)."""

    def __init__(self, model, used, dev):
        self.w = model.lm_head.weight
        self.used = torch.tensor(used, device=dev)
        used_set = set(used)
        self.unused0 = next(i for i in range(VOCAB) if i not in used_set)
        self.log_n_unused = math.log(VOCAB - len(used))
        remap = torch.full((VOCAB,), -1, dtype=torch.long)
        remap[self.used.cpu()] = torch.arange(len(used))
        self.remap = remap.to(dev)

    def logits(self, h):
        lu = h @ self.w[self.used].t()
        lo = h @ self.w[self.unused0] + self.log_n_unused
        return torch.cat([lu, lo[..., None]], -1)


def hidden(model, x):
    return model.model(input_ids=x, use_cache=False).last_hidden_state


# ---- the KDA core: the model's own (reference) and kda_chunk's, checked against each other ----------
REF_CORE = getattr(hf_glm5, "chunk_kimi_delta_attention", None)
if REF_CORE is None:
    raise SystemExit("transformers' glm5_next has no chunk_kimi_delta_attention; it has: " +
                     ", ".join(n for n in dir(hf_glm5) if "delta" in n.lower() or "kda" in n.lower()))
CORE_CALLS = [0]


def fast_core(*a, **k):
    CORE_CALLS[0] += 1
    return kda_chunk.chunk_kda(*a, **k)


def use_core(fn, *model_list):
    """Makes fn the KDA core: the module's function, and any copy a layer holds as an attribute."""
    hf_glm5.chunk_kimi_delta_attention = fn
    cores = (REF_CORE, fast_core)
    for model in model_list:
        for m in model.modules():
            for k, v in list(vars(m).items()):
                if any(v is c for c in cores):
                    setattr(m, k, fn)
                elif isinstance(v, dict):
                    for kk, vv in list(v.items()):
                        if any(vv is c for c in cores):
                            v[kk] = fn


def rel_err(a, b):
    return float((a - b).abs().max() / a.abs().max().clamp_min(1e-20))


def check_core(dev, tol=1e-4):
    """Random q, k, v, gates (some near the -5 bound), beta, with and without a carried state: outputs,
    final state and every input gradient of kda_chunk equal the model's own core within tol."""
    gen = torch.Generator(device="cpu").manual_seed(11)
    B, T, H, K = 2, 200, PRESET["linear_num_heads"], PRESET["linear_head_dim"]
    r = lambda *s: torch.randn(*s, generator=gen).to(dev)  # noqa: E731
    base = [r(B, T, H, K), r(B, T, H, K), r(B, T, H, K), -5.0 * torch.sigmoid(3.0 * r(B, T, H, K)),
            torch.sigmoid(r(B, T, H)), 0.3 * r(B, H, K, K)]
    wo, ws = r(B, T, H, K), r(B, H, K, K)
    worst = 0.0
    for carried in (False, True):
        got = []
        for fn in (REF_CORE, kda_chunk.chunk_kda):
            x = [t.clone().requires_grad_() for t in base]
            o, s = fn(x[0], x[1], x[2], g=x[3], beta=x[4], initial_state=x[5] if carried else None,
                      output_final_state=carried, use_qk_l2norm_in_kernel=True)
            loss = (o * wo).sum() + ((s * ws).sum() if carried else 0.0)
            loss.backward()
            got.append([("out", o.detach())] + ([("state", s.detach())] if carried else []) +
                       [("grad " + n, t.grad) for n, t in zip("q k v g beta state0".split(), x)
                        if t.grad is not None])
        for (name, a), (_, b) in zip(*got):
            e = rel_err(a, b)
            worst = max(worst, e)
            if not (e <= tol and torch.isfinite(b).all()):
                raise SystemExit("KDA check failed (carried state %s): %s relative error %.2e > %.0e"
                                 % (carried, name, e, tol))
    log("KDA core check: chunked = model's own core, outputs, states and gradients (worst relative "
        "error %.2e, tolerance %.0e)" % (worst, tol))


def check_module(model, dev, tol=5e-4):
    """The model's KDA layer run through its own forward with each core: same output, input and
    parameter gradients; and the fast core is the one actually called."""
    attn = model.model.language_model.layers[0].self_attn
    gen = torch.Generator(device="cpu").manual_seed(12)
    x0 = torch.randn(2, 150, HIDDEN, generator=gen).to(dev)
    w = torch.randn(2, 150, HIDDEN, generator=gen).to(dev)
    got = []
    for fn in (REF_CORE, fast_core):
        use_core(fn, model)
        attn.zero_grad(set_to_none=True)
        x = x0.clone().requires_grad_()
        y = attn(hidden_states=x)
        y = y[0] if isinstance(y, tuple) else y
        (y * w).sum().backward()
        got.append([("out", y.detach()), ("grad input", x.grad)] +
                   [("grad " + n, p.grad.clone()) for n, p in attn.named_parameters() if p.grad is not None])
    attn.zero_grad(set_to_none=True)
    if CORE_CALLS[0] == 0:
        raise SystemExit("KDA check failed: the model's KDA layer did not call the replaced core")
    worst = 0.0
    for (name, a), (_, b) in zip(*got):
        e = rel_err(a, b)
        worst = max(worst, e)
        if not e <= tol:
            raise SystemExit("KDA layer check failed: %s relative error %.2e > %.0e" % (name, e, tol))
    log("KDA layer check: %d tensors agree (worst relative error %.2e); fast core in use" % (len(got[0]), worst))


# ---- training ----------------------------------------------------------------------------------------
def make_batch(seqs, b, dev):
    L = max(len(seqs[i][0]) for i in b)
    x = torch.full((len(b), L), SID["<|endoftext|>"], dtype=torch.long)
    msk = torch.zeros((len(b), L), dtype=torch.bool)
    for r, i in enumerate(b):
        ids, mask = seqs[i]
        x[r, :len(ids)] = torch.tensor(ids)
        msk[r, :len(ids)] = torch.tensor(mask)
    return x.to(dev, non_blocking=True), msk.to(dev, non_blocking=True)


def batch_loss(model, head, x, msk):
    h = hidden(model, x[:, :-1])
    sel = msk[:, 1:]
    return F.cross_entropy(head.logits(h[sel]), head.remap[x[:, 1:]][sel])


def time_step(model, head, x, msk, reps):
    """Seconds of one forward and backward pass (after a warm-up one)."""
    for k in range(reps + 1):
        if k == 1:
            torch.cuda.synchronize()
            t = time.time()
        batch_loss(model, head, x, msk).backward()
    torch.cuda.synchronize()
    model.zero_grad(set_to_none=True)
    return (time.time() - t) / reps


def greedy(model, head, prompts, max_new, dev, stop=EOS, budget_s=30.0):
    """Greedy continuation of each prompt by full recomputation (right padding is safe: causal)."""
    seqs = [list(p) for p in prompts]
    outs = [[] for _ in prompts]
    done = [False] * len(prompts)
    t_start = time.time()
    used = head.used.tolist()
    with torch.no_grad():
        for _ in range(max_new):
            live = [i for i in range(len(seqs)) if not done[i]]
            if not live or time.time() - t_start > budget_s:
                break
            L = max(len(seqs[i]) for i in live)
            x = torch.full((len(live), L), SID["<|endoftext|>"], dtype=torch.long)
            for r, i in enumerate(live):
                x[r, :len(seqs[i])] = torch.tensor(seqs[i])
            h = hidden(model, x.to(dev))
            last = torch.stack([h[r, len(seqs[i]) - 1] for r, i in enumerate(live)])
            nxt = head.logits(last)[:, :-1].argmax(-1).tolist()
            for r, i in enumerate(live):
                t = used[nxt[r]]
                seqs[i].append(t)
                outs[i].append(t)
                if t in stop:
                    done[i] = True
    return outs


def evaluate(model, head, tok, tasks, dev, budget_s):
    prompts = [data.heldout_prompts(t) for t in tasks]
    o1 = greedy(model, head, [tok.encode(p[0]).ids for p in prompts], 72, dev, budget_s=budget_s / 2)
    o2 = greedy(model, head, [tok.encode(p[1]).ids for p in prompts], 64, dev, budget_s=budget_s / 2)
    rows = []
    for t, a, b in zip(tasks, o1, o2):
        text = tok.decode([x for x in a if x not in EOS], skip_special_tokens=False)
        ans = tok.decode([x for x in b if x not in EOS], skip_special_tokens=False)
        rows.append(data.score(t, text, bool(a) and a[-1] == SID["<|observation|>"], ans,
                               bool(b) and b[-1] in EOS[:2]))
    return rows


def write_rows(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def train(model, head, seqs, params, train_s, dev, rng):
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i][0]))
    batches, cur = [], []
    for i in order:
        cur.append(i)
        if len(cur) * len(seqs[i][0]) >= BATCH_TOKENS:
            batches.append(cur)
            cur = []
    if cur:
        batches.append(cur)
    opt = torch.optim.AdamW(params, lr=2e-3, betas=(0.9, 0.95), weight_decay=0.0)
    model.train()
    step, n_tok, t_train, curve = 0, 0, time.time(), []
    while time.time() - t_train < train_s:
        rng.shuffle(batches)
        nxt = make_batch(seqs, batches[0], dev)
        for k, b in enumerate(batches):
            el = time.time() - t_train
            if el >= train_s:
                break
            x, msk = nxt
            if k + 1 < len(batches):
                nxt = make_batch(seqs, batches[k + 1], dev)
            lr = 2e-3 * min(1.0, (step + 1) / 100) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * el / train_s)))
            for g in opt.param_groups:
                g["lr"] = lr
            loss = batch_loss(model, head, x, msk)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            n_tok += x.numel()
            if step % 200 == 0 or step == 1:
                lv = float(loss.detach())
                curve.append((step, round(time.time() - t_train, 1), round(lv, 4)))
                log("step %d  %.1fs  loss %.4f  lr %.2e  batch %dx%d" % (step, time.time() - t_train, lv, lr,
                                                                         x.shape[0], x.shape[1]))
    el = time.time() - t_train
    log("trained %d steps in %.1fs: %.2f steps/s, %.0f tokens/s (padded)" % (step, el, step / el, n_tok / el))
    return step, el, curve


# ---- saving, quantizing, references --------------------------------------------------------------------
def save_float(model, tok, unused_mask, tmp, fdir):
    """bf16 text weights in the checkpoint layout (as transformers writes them) in fdir."""
    model.to(torch.bfloat16)
    model.save_pretrained(tmp)
    model.float()
    raw = os.path.join(tmp, "model.safetensors")
    sd = {k: v.contiguous() for k, v in load_file(raw).items() if ".visual." not in k}
    lm_key = next(k for k in sd if k.endswith("lm_head.weight"))
    emb_key = next(k for k in sd if k.endswith("embed_tokens.weight"))
    lm, emb = sd[lm_key][unused_mask], sd[emb_key][unused_mask]
    same = bool((lm == lm[0]).all()) and bool((emb == 0).all())
    log("unused rows: lm_head all bit-identical and embedding zero:", same, "tensors", len(sd))
    os.makedirs(fdir, exist_ok=True)
    save_file(sd, os.path.join(fdir, "model.safetensors"), metadata={"format": "pt"})
    cfgd = json.load(open(os.path.join(tmp, "config.json")))
    cfgd["dtype"] = "bfloat16"
    json.dump(cfgd, open(os.path.join(fdir, "config.json"), "w"), indent=2)
    # greedy by default: the tiny model is reliable only without sampling noise
    json.dump({"eos_token_id": EOS, "pad_token_id": 154820, "max_new_tokens": 256, "temperature": 1.0,
               "top_p": 0.95, "do_sample": False}, open(os.path.join(fdir, "generation_config.json"), "w"),
              indent=2)
    tok.save(os.path.join(fdir, "tokenizer.json"), pretty=False)
    return sd


def gzip_to(src, dst):
    with open(src, "rb") as f, gzip.open(dst, "wb", 9) as g:
        shutil.copyfileobj(f, g)
    return os.path.getsize(dst)


def quantize_experts(glmchat, fdir, qdir):
    """`glmchat quantize` on fdir into qdir (the routed experts EXL3 4-bit)."""
    t = time.time()
    r = subprocess.run([glmchat, "quantize", "--in", fdir, "--out", qdir, "--threads", str(os.cpu_count())],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("glmchat quantize failed: " + r.stderr[-800:])
    said = (r.stdout + r.stderr).strip().splitlines()
    log("glmchat quantize (%.1fs): %s" % (time.time() - t, said[-1] if said else ""))


def quantize(glmchat, fdir, qdir, sd, cfg_path, tmp):
    """`glmchat quantize` on fdir; returns a float32 checkpoint directory whose routed experts are the
    EXL3 weights dequantized by `glmchat dump-tensor`, everything else the bf16 values."""
    quantize_experts(glmchat, fdir, qdir)
    expert = re.compile(r"\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$")
    deq, errs = {}, []
    for k, v in sd.items():
        if not expert.search(k):
            deq[k] = v.float()
            continue
        f32 = os.path.join(tmp, "w.f32")
        r = subprocess.run([glmchat, "dump-tensor", "--model", qdir, "--name", k, "--out", f32],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("glmchat dump-tensor %s failed: %s" % (k, r.stderr[-400:]))
        w = torch.from_numpy(np.fromfile(f32, dtype="<f4").copy()).reshape(v.shape)
        deq[k] = w
        errs.append(float((w - v.float()).norm() / v.float().norm()))
    if not errs:
        raise RuntimeError("no routed expert tensors found to quantize")
    log("dequantized %d expert tensors: relative weight error mean %.4f max %.4f" % (
        len(errs), sum(errs) / len(errs), max(errs)))
    ddir = os.path.join(tmp, "dequantized")
    os.makedirs(ddir, exist_ok=True)
    save_file(deq, os.path.join(ddir, "model.safetensors"), metadata={"format": "pt"})
    cfgd = float_fields(json.load(open(cfg_path)))  # written by glmchat quantize: a glmchat before
    # glm_config_json_floats wrote "swiglu_limit": 10, which from_pretrained refuses
    cfgd["dtype"] = "float32"
    json.dump(cfgd, open(os.path.join(ddir, "config.json"), "w"), indent=2)
    return ddir


def load_dequantized(ddir, model, sd, dev):
    """The dequantized checkpoint through transformers' own loading (else the experts written into a
    copy of model, by a mapping first proven on the bf16 weights); every non-expert weight must come
    back exactly as trained."""
    try:
        q = Glm5NextForConditionalGeneration.from_pretrained(ddir, dtype=torch.float32).to(dev).eval()
    except Exception as e:
        log("from_pretrained of the dequantized checkpoint failed (%s); writing the experts in place" % e)
        q = experts_in_place(model, sd, load_file(os.path.join(ddir, "model.safetensors")))
    mine = dict(model.named_parameters())
    worst, n_exp = 0.0, 0
    for n, p in q.named_parameters():
        if ".visual." in n:
            continue
        if ".experts." in n:
            n_exp += 1
            continue
        worst = max(worst, float((p - mine[n]).abs().max()))
    if worst != 0.0 or n_exp == 0:
        raise RuntimeError("dequantized checkpoint reloads wrong: non-expert weights differ by %g, %d expert "
                           "tensors" % (worst, n_exp))
    log("dequantized model loaded: non-expert weights identical, %d expert parameters replaced" % n_exp)
    return q


def experts_in_place(model, sd, deq):
    """A copy of model whose routed experts are deq's; the fused layout ([E, 2I, H] gate then up, and
    [E, H, I] down) must first rebuild the bf16 experts of sd exactly."""
    import copy
    q = copy.deepcopy(model).eval()
    params = dict(q.named_parameters())

    def fused(src, prefix, n_exp):
        gu = torch.stack([torch.cat([src["%s.%d.gate_proj.weight" % (prefix, e)],
                                     src["%s.%d.up_proj.weight" % (prefix, e)]], 0) for e in range(n_exp)])
        dn = torch.stack([src["%s.%d.down_proj.weight" % (prefix, e)] for e in range(n_exp)])
        return gu.float(), dn.float()

    for n, p in list(params.items()):
        if not n.endswith(".experts.gate_up_proj"):
            continue
        prefix = n[:-len(".gate_up_proj")]
        gu, dn = fused(sd, prefix, p.shape[0])
        down = params[prefix + ".down_proj"]
        if not (torch.equal(gu.to(p.device), p.data) and torch.equal(dn.to(down.device), down.data)):
            raise RuntimeError("the fused expert layout guess does not rebuild %s" % n)
        gu, dn = fused(deq, prefix, p.shape[0])
        with torch.no_grad():
            p.copy_(gu)
            down.copy_(dn)
    return q


def reference_logits(model, tok, task, path):
    """float32 logits on the CPU of two prompts, for tests/unit/test_demo."""
    ref = {}
    cpu = model.to("cpu")
    torch.set_num_threads(min(16, os.cpu_count()))
    prompts = [tok.encode(data.heldout_prompts(dict(task, history=[]))[0]).ids,
               tok.encode("[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hello!<|assistant|><think>").ids]
    with torch.no_grad():
        for k, p in enumerate(prompts):
            lg = cpu(input_ids=torch.tensor([p]), use_cache=False).logits[0].float()
            ref["input_ids_%d" % k] = torch.tensor(p, dtype=torch.int32)
            ref["logits_last_%d" % k] = lg[-1].contiguous()
            ref["argmax_%d" % k] = lg.argmax(-1).to(torch.int32)
    save_file(ref, path)


def parse_args(argv):
    """(positional arguments, preset name, evaluate) from argv; exits naming a bad option."""
    pos, preset, evaluate_too = [], "demo", True
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--preset" and i + 1 < len(argv):
            preset = argv[i + 1]
            i += 1
        elif a == "--no-eval":
            evaluate_too = False
        elif a.startswith("--"):
            raise SystemExit("train.py: unknown option %s (options: --preset demo|larger, --no-eval)" % a)
        else:
            pos.append(a)
        i += 1
    if preset not in PRESETS:
        raise SystemExit("train.py: --preset %s is none of %s" % (preset, ", ".join(PRESETS)))
    if len(pos) < 2:
        raise SystemExit("usage: train.py [--preset demo|larger] [--no-eval] BASE_CONFIG.json OUTDIR "
                         "[TRAIN_SECONDS [GLMCHAT_BINARY]]")
    return pos, preset, evaluate_too


def main():
    global PRESET, HIDDEN
    pos, preset, evaluate_too = parse_args(sys.argv[1:])
    PRESET = PRESETS[preset]
    HIDDEN = PRESET["hidden_size"]
    base, out = pos[0], pos[1]
    train_s = float(pos[2]) if len(pos) > 2 else 285.0
    glmchat = pos[3] if len(pos) > 3 else None
    log("preset %s: %s" % (preset, json.dumps(PRESET)))
    os.makedirs(out, exist_ok=True)
    dev = "cuda"
    # full fp32 matrix products: the KDA check's tolerance and the chunked core's state updates need it
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(53)
    rng = random.Random(53)
    convs = [data.conversation(rng) for _ in range(N_CONVERSATIONS)]
    heldout = data.heldout(random.Random(9001), 120)
    log("generated", len(convs), "conversations")
    texts = []
    for c in convs[:6000]:
        for p, _ in data.render(c):
            texts += [s for s in SPECIAL_RE.split(p) if s]
    tok = train_tokenizer(texts, 3000)
    n_bpe = sum(1 for i in tok.get_vocab().values() if i < FIRST_ADDED)
    used = sorted(tok.get_vocab().values())
    log("tokenizer: %d BPE ids + %d added" % (n_bpe, len(SPECIAL)))
    seqs = [s for s in encode_all(tok, convs) if len(s[0]) <= 1100]
    lens = sorted(len(s[0]) for s in seqs)
    log("sequences", len(seqs), "length median", lens[len(lens) // 2], "max", lens[-1])

    cfg = build_config(base)
    model = Glm5NextForConditionalGeneration(cfg)
    with torch.no_grad():
        unused_mask = torch.ones(VOCAB, dtype=torch.bool)
        unused_mask[torch.tensor(used)] = False
        model.model.language_model.embed_tokens.weight[unused_mask] = 0.0
        w = model.lm_head.weight
        w[unused_mask] = w[unused_mask.nonzero()[0, 0]].clone()
    model = model.to(dev).float()
    head = Head(model, used, dev)
    n_params = sum(p.numel() for n, p in model.named_parameters() if ".visual." not in n)
    n_real = n_params - (VOCAB - len(used)) * 2 * HIDDEN
    log("parameters: %d (%d excluding unused vocabulary rows)" % (n_params, n_real))

    # preflight: the compact head equals the full one; the chunked KDA core equals the model's own
    model.eval()
    x = torch.tensor([seqs[0][0][:80]], device=dev)
    with torch.no_grad():
        full = model(input_ids=x, use_cache=False).logits.float()
        comp = head.logits(hidden(model, x))
        d1 = float((full[..., head.used] - comp[..., :-1]).abs().max())
        d2 = float((full[..., head.unused0] + head.log_n_unused - comp[..., -1]).abs().max())
    log("preflight head check: %.2e %.2e" % (d1, d2))
    assert d1 < 1e-3 and d2 < 1e-3
    check_core(dev)
    check_module(model, dev)

    # speed of one forward and backward pass, the model's own core against the chunked one
    model.train()
    mid = sorted(range(len(seqs)), key=lambda i: len(seqs[i][0]))[len(seqs) // 2:][:16]
    xb, mb = make_batch(seqs, mid, dev)
    use_core(REF_CORE, model)
    t_ref = time_step(model, head, xb, mb, 2)
    use_core(fast_core, model)
    t_fast = time_step(model, head, xb, mb, 3)
    log("forward+backward of a %dx%d batch: model's own KDA core %.3fs, chunked %.3fs (%.1fx)" % (
        xb.shape[0], xb.shape[1], t_ref, t_fast, t_ref / t_fast))

    params = [p for n, p in model.named_parameters() if ".visual." not in n]
    steps, el, curve = train(model, head, seqs, params, train_s, dev, rng)
    with torch.no_grad():
        w = model.lm_head.weight
        w[unused_mask.to(dev)] = w[head.unused0].clone()
    model.eval()

    tmp = "/tmp/demo_model"
    fdir = os.path.join(tmp, "float")
    sd = save_float(model, tok, unused_mask, tmp, fdir)
    head.w = model.lm_head.weight
    gz_float = gzip_to(os.path.join(fdir, "model.safetensors"), os.path.join(out, "float.safetensors.gz"))
    shutil.copy(os.path.join(fdir, "config.json"), os.path.join(out, "config_float.json"))
    shutil.copy(os.path.join(fdir, "generation_config.json"), out)
    shutil.copy(os.path.join(fdir, "tokenizer.json"), out)
    log("bf16 model: %d bytes compressed" % gz_float)
    acc = {}
    if evaluate_too:
        rows = evaluate(model, head, tok, heldout, dev, 40.0)
        write_rows(os.path.join(out, "heldout_torch_float.jsonl"), rows)
        acc["float"] = data.summary(rows)
        log("held-out, bf16 model in PyTorch: well-formed %.1f%%, correct call %.1f%%, answer uses result "
            "%.1f%%" % tuple(100 * v for v in acc["float"]))

    ref_model = model
    if glmchat and not evaluate_too:
        qdir = os.path.join(tmp, "quantized")
        quantize_experts(glmchat, fdir, qdir)
        gz_q = gzip_to(os.path.join(qdir, "model.safetensors"), os.path.join(out, "model.safetensors.gz"))
        shutil.copy(os.path.join(qdir, "config.json"), os.path.join(out, "config.json"))
        log("quantized model: %d bytes compressed" % gz_q)
    elif glmchat:
        try:
            qdir = os.path.join(tmp, "quantized")
            ddir = quantize(glmchat, fdir, qdir, sd, os.path.join(fdir, "config.json"), tmp)
            gz_q = gzip_to(os.path.join(qdir, "model.safetensors"), os.path.join(out, "model.safetensors.gz"))
            shutil.copy(os.path.join(qdir, "config.json"), os.path.join(out, "config.json"))
            log("quantized model: %d bytes compressed" % gz_q)
            qm = load_dequantized(ddir, model, sd, dev)
            use_core(fast_core, qm)
            qhead = Head(qm, used, dev)
            rows = evaluate(qm, qhead, tok, heldout, dev, 40.0)
            write_rows(os.path.join(out, "heldout_torch_quant.jsonl"), rows)
            acc["quant"] = data.summary(rows)
            log("held-out, EXL3 experts (dequantized) in PyTorch: well-formed %.1f%%, correct call %.1f%%, "
                "answer uses result %.1f%%" % tuple(100 * v for v in acc["quant"]))
            ref_model = qm
        except Exception as e:
            log("QUANTIZATION FAILED, reference logits are the bf16 model's:", e)
    if evaluate_too:
        use_core(REF_CORE, ref_model)  # the reference is the model's own code through and through
        reference_logits(ref_model, tok, heldout[0], os.path.join(out, "reference.safetensors"))
        log("reference logits written (%s)" % ("quantized" if ref_model is not model else "bf16"))
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(json.dumps(dict(params=n_params, params_real=n_real, steps=steps, train_s=round(el, 1),
                                step_s_ref=t_ref, step_s_fast=t_fast, curve=curve, acc=acc, bpe=n_bpe),
                           indent=1) + "\n" + "\n".join(LOG) + "\n")
    log("done")


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception:
        traceback.print_exc()
        sys.exit(1)
