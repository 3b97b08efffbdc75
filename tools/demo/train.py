# train.py: trains glmchat's embedded demo model (GLM-5.3-Flash's architecture, a few million
# parameters) on synthetic tool-using conversations, evaluates it on held-out tasks and writes it.
# Usage (one H200 run, transformers >= 5.17 with glm5_next, HF tokenizers):
#   python3 train.py BASE_CONFIG.json OUTDIR [TRAIN_SECONDS]
# Writes OUTDIR/{model.safetensors.gz,config.json,generation_config.json,tokenizer.json,
# reference.safetensors,heldout.jsonl,summary.txt}.
import copy
import gzip
import json
import math
import os
import random
import re
import sys
import time
import traceback

os.environ["TOKENIZERS_PARALLELISM"] = "true"
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import Glm5NextConfig, Glm5NextForConditionalGeneration  # noqa: E402

import data  # noqa: E402

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
LOG = []


def log(*a):
    s = " ".join(str(x) for x in a)
    print("[%6.1fs] %s" % (time.time() - T0, s), flush=True)
    LOG.append(s)


def train_tokenizer(texts, vocab_size):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GLM_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
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
    return tok


PIECE_CACHE = {}


def encode_pieces(tok, pieces):
    ids, mask = [], []
    for text, trained in pieces:
        e = PIECE_CACHE.get(text)
        if e is None:
            e = tok.encode(text).ids
            if len(text) > 300:
                PIECE_CACHE[text] = e
        ids += e
        mask += [trained] * len(e)
    return ids, mask


def build_config(base_path):
    d = json.load(open(base_path))
    t = d["text_config"]
    K, D = "linear_attention", "deepseek_sparse_attention"
    t.update(dict(hidden_size=192, num_hidden_layers=4, layer_types=[K, K, K, D],
                  mlp_layer_types=["dense", "sparse", "sparse", "sparse"], intermediate_size=512,
                  moe_intermediate_size=128, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
                  num_attention_heads=4, num_key_value_heads=4, q_lora_rank=96, kv_lora_rank=64,
                  qk_nope_head_dim=48, qk_head_dim=48, v_head_dim=48, linear_num_heads=4, linear_head_dim=48,
                  index_n_heads=4, index_head_dim=32, index_kpool=4, index_topk=2048,
                  indexer_types=["full"] * 4, vocab_size=VOCAB, pad_token_id=154820, eos_token_id=EOS,
                  max_position_embeddings=16384))
    d["vision_config"]["out_hidden_size"] = 192
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


def greedy(model, head, prompts, max_new, dev, stop=EOS, budget_s=30.0):
    """Greedy continuation of each prompt by full recomputation (right padding is safe: causal)."""
    seqs = [list(p) for p in prompts]
    outs = [[] for _ in prompts]
    done = [False] * len(prompts)
    t_start = time.time()
    used = head.used
    with torch.no_grad():
        for _ in range(max_new):
            live = [i for i in range(len(seqs)) if not done[i]]
            if not live or time.time() - t_start > budget_s:
                break
            L = max(len(seqs[i]) for i in live)
            x = torch.full((len(live), L), SID["<|endoftext|>"], dtype=torch.long)
            for r, i in enumerate(live):
                x[r, :len(seqs[i])] = torch.tensor(seqs[i])
            x = x.to(dev)
            h = hidden(model, x)
            last = torch.stack([h[r, len(seqs[i]) - 1] for r, i in enumerate(live)])
            lg = head.logits(last)
            nxt = lg[:, :-1].argmax(-1)
            for r, i in enumerate(live):
                t = int(used[nxt[r]])
                seqs[i].append(t)
                outs[i].append(t)
                if t in stop:
                    done[i] = True
    return outs


CALL_RE = re.compile(r"^(.*?)</think>(?:.*?)<tool_call>([^<]+)((?:<arg_key>[^<]*</arg_key><arg_value>.*?</arg_value>)*)"
                     r"</tool_call>$", re.S)
ARG_RE = re.compile(r"<arg_key>([^<]*)</arg_key><arg_value>(.*?)</arg_value>", re.S)


def evaluate(model, head, tok, tasks, dev, budget_s):
    prefix = data.render_prefix()

    def prompt_ids(msgs):
        pieces = data.render(msgs)
        if msgs and msgs[-1]["role"] == "assistant":
            pieces = pieces[:-1]
        return encode_pieces(tok, pieces)[0]

    p1 = []
    for t in tasks:
        msgs = t["history"] + [{"role": "user", "content": t["question"]}]
        p1.append(prompt_ids(msgs) + tok.encode("<|assistant|><think>").ids)
    o1 = greedy(model, head, p1, 72, dev, budget_s=budget_s / 2)
    p2 = []
    for t in tasks:
        msgs = t["history"] + [{"role": "user", "content": t["question"]},
                               {"role": "assistant", "reasoning_content": t["think"], "content": "",
                                "tool_calls": [{"function": {"name": t["name"], "arguments": t["args"]}}]},
                               {"role": "tool", "content": t["result"]}]
        pieces = data.render(msgs)
        ids = encode_pieces(tok, pieces)[0]
        p2.append(ids + tok.encode("<|assistant|><think>").ids)
    # the reasoning of the tool-calling turn: the model's own where it produced one
    o2 = greedy(model, head, p2, 64, dev, budget_s=budget_s / 2)
    rows, n_wf, n_ok, n_ans = [], 0, 0, 0
    for t, a, b in zip(tasks, o1, o2):
        text = tok.decode([x for x in a if x not in EOS], skip_special_tokens=False)
        m = CALL_RE.match(text)
        wf = bool(m) and len(a) > 0 and a[-1] == SID["<|observation|>"]
        ok = False
        if wf:
            args = dict(ARG_RE.findall(m.group(3)))
            exp = {k: (v if isinstance(v, str) else json.dumps(v)) for k, v in t["args"].items()}
            ok = m.group(2) == t["name"] and args == exp
        ans = tok.decode([x for x in b if x not in EOS], skip_special_tokens=False)
        final = ans.split("</think>", 1)[1] if "</think>" in ans else ""
        aok = bool(b) and b[-1] in EOS and t["key"] in final and "<tool_call>" not in final
        n_wf += wf
        n_ok += ok
        n_ans += aok
        rows.append(dict(question=t["question"], call_text=text, well_formed=wf, correct=ok, answer=ans,
                         answer_ok=aok, expected=dict(name=t["name"], args=t["args"], key=t["key"])))
    n = max(1, len(tasks))
    return rows, n_wf / n, n_ok / n, n_ans / n


def main():
    base, out = sys.argv[1], sys.argv[2]
    train_s = float(sys.argv[3]) if len(sys.argv) > 3 else 170.0
    os.makedirs(out, exist_ok=True)
    dev = "cuda"
    torch.manual_seed(53)
    rng = random.Random(53)
    convs = [data.conversation(rng) for _ in range(30000)]
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
    seqs = []
    for c in convs:
        ids, mask = encode_pieces(tok, data.render(c))
        if len(ids) <= 1024:
            seqs.append((ids, mask))
    lens = sorted(len(s[0]) for s in seqs)
    log("sequences", len(seqs), "length median", lens[len(lens) // 2], "max", lens[-1])

    cfg = build_config(base)
    model = Glm5NextForConditionalGeneration(cfg)
    with torch.no_grad():
        used_t = torch.tensor(used)
        unused_mask = torch.ones(VOCAB, dtype=torch.bool)
        unused_mask[used_t] = False
        model.model.language_model.embed_tokens.weight[unused_mask] = 0.0
        w = model.lm_head.weight
        w[unused_mask] = w[unused_mask.nonzero()[0, 0]].clone()
    model = model.to(dev).float()
    head = Head(model, used, dev)
    n_params = sum(p.numel() for n, p in model.named_parameters() if ".visual." not in n)
    n_real = n_params - (VOCAB - len(used)) * 2 * cfg.text_config.hidden_size
    log("parameters: %d (%d excluding unused vocabulary rows)" % (n_params, n_real))

    # preflight: the compact head equals the full one, and a backward pass runs
    model.eval()
    x = torch.tensor([seqs[0][0][:80]], device=dev)
    with torch.no_grad():
        full = model(input_ids=x, use_cache=False).logits.float()
        h = hidden(model, x)
        comp = head.logits(h)
        d1 = float((full[..., head.used] - comp[..., :-1]).abs().max())
        d2 = float((full[..., head.unused0] + head.log_n_unused - comp[..., -1]).abs().max())
    log("preflight head check: %.2e %.2e" % (d1, d2))
    assert d1 < 1e-3 and d2 < 1e-3

    # batches of similar lengths, about 48k tokens each
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i][0]))
    batches, cur = [], []
    for i in order:
        cur.append(i)
        if len(cur) * len(seqs[i][0]) >= 48000:
            batches.append(cur)
            cur = []
    if cur:
        batches.append(cur)
    torch.backends.cuda.matmul.allow_tf32 = True
    params = [p for n, p in model.named_parameters() if ".visual." not in n]
    opt = torch.optim.AdamW(params, lr=2e-3, betas=(0.9, 0.95), weight_decay=0.0)
    model.train()
    step, t_train, curve = 0, time.time(), []
    while time.time() - t_train < train_s:
        rng.shuffle(batches)
        for b in batches:
            el = time.time() - t_train
            if el >= train_s:
                break
            frac = el / train_s
            lr = 2e-3 * min(1.0, (step + 1) / 30) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))
            for g in opt.param_groups:
                g["lr"] = lr
            L = max(len(seqs[i][0]) for i in b)
            x = torch.full((len(b), L), SID["<|endoftext|>"], dtype=torch.long)
            msk = torch.zeros((len(b), L), dtype=torch.bool)
            for r, i in enumerate(b):
                ids, mask = seqs[i]
                x[r, :len(ids)] = torch.tensor(ids)
                msk[r, :len(ids)] = torch.tensor(mask)
            x, msk = x.to(dev), msk.to(dev)
            h = hidden(model, x[:, :-1])
            tgt = head.remap[x[:, 1:]]
            sel = msk[:, 1:]
            lg = head.logits(h[sel])
            loss = F.cross_entropy(lg, tgt[sel])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            if step % 25 == 0 or step == 1:
                curve.append((step, round(time.time() - t_train, 1), round(float(loss), 4)))
                log("step %d  %.1fs  loss %.4f  lr %.2e  batch %dx%d" % (step, time.time() - t_train,
                                                                         float(loss), lr, len(b), L))
    log("trained %d steps in %.1fs" % (step, time.time() - t_train))
    with torch.no_grad():
        w = model.lm_head.weight
        w[unused_mask.to(dev)] = w[head.unused0].clone()
    model.eval()

    # save: bf16 text weights (as transformers writes them), then evaluate exactly those weights
    tmp = os.path.join("/tmp", "demo_model")
    model.to(torch.bfloat16)
    model.save_pretrained(tmp)
    model.float()
    head.w = model.lm_head.weight
    raw = os.path.join(tmp, "model.safetensors")
    sd = {k: v.contiguous() for k, v in load_file(raw).items() if ".visual." not in k}
    lm_key = next(k for k in sd if k.endswith("lm_head.weight"))
    emb_key = next(k for k in sd if k.endswith("embed_tokens.weight"))
    lm, emb = sd[lm_key][unused_mask], sd[emb_key][unused_mask]
    same = bool((lm == lm[0]).all()) and bool((emb == 0).all())
    log("unused rows: lm_head all bit-identical and embedding zero:", same, "tensors", len(sd))
    save_file(sd, raw, metadata={"format": "pt"})
    with open(raw, "rb") as f, gzip.open(os.path.join(out, "model.safetensors.gz"), "wb", 9) as g:
        g.write(f.read())
    cfgd = json.load(open(os.path.join(tmp, "config.json")))
    cfgd["dtype"] = "bfloat16"
    json.dump(cfgd, open(os.path.join(out, "config.json"), "w"), indent=2)
    json.dump({"eos_token_id": EOS, "pad_token_id": 154820, "max_new_tokens": 256, "temperature": 1.0,
               "top_p": 0.95}, open(os.path.join(out, "generation_config.json"), "w"), indent=2)
    tok.save(os.path.join(out, "tokenizer.json"), pretty=False)
    log("compressed model bytes", os.path.getsize(os.path.join(out, "model.safetensors.gz")),
        "raw", os.path.getsize(raw))

    # evaluate the bf16-rounded model
    torch.backends.cuda.matmul.allow_tf32 = False
    rows, wf, ok, ans = evaluate(model, head, tok, heldout, dev, 50.0)
    with open(os.path.join(out, "heldout.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    log("held-out (%d tasks): well-formed %.1f%%, correct call %.1f%%, answer uses result %.1f%%" % (
        len(rows), 100 * wf, 100 * ok, 100 * ans))

    # reference logits for glmchat's CPU engine: float32 on the CPU, bf16 weights
    ref = {}
    cpu = model.to("cpu")
    torch.set_num_threads(16)
    t = heldout[0]
    msgs = [{"role": "user", "content": t["question"]}]
    prompts = [encode_pieces(tok, data.render(msgs))[0] + tok.encode("<|assistant|><think>").ids,
               tok.encode("[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hello!<|assistant|><think>").ids]
    with torch.no_grad():
        for k, p in enumerate(prompts):
            lg = cpu(input_ids=torch.tensor([p]), use_cache=False).logits[0].float()
            ref["input_ids_%d" % k] = torch.tensor(p, dtype=torch.int32)
            ref["logits_last_%d" % k] = lg[-1].contiguous()
            ref["argmax_%d" % k] = lg.argmax(-1).to(torch.int32)
    save_file(ref, os.path.join(out, "reference.safetensors"))
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(json.dumps(dict(params=n_params, params_real=n_real, steps=step, curve=curve, wf=wf, ok=ok,
                                ans=ans, bpe=n_bpe), indent=1) + "\n" + "\n".join(LOG) + "\n")
    log("done")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
