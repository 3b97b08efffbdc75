#!/usr/bin/env python3
# test_kda_chunk.py: checks kda_chunk.py's chunked KDA against the per-token recurrence (written here
# from the model's math), outputs, final state and gradients, on random inputs with strong decays.
# Usage: python3 test_kda_chunk.py   (needs PyTorch; CPU is enough; exit 1 on a mismatch)
import sys

import torch

import kda_chunk


def recurrence(q, k, v, g, beta, S):
    """Per token: decay the state, predict v from k, write the beta-weighted error, read with q."""
    T = q.shape[2]
    outs = []
    for t in range(T):
        S = S * torch.exp(g[:, :, t]).unsqueeze(-1)
        pred = (S * k[:, :, t].unsqueeze(-1)).sum(-2)
        u = (v[:, :, t] - pred) * beta[:, :, t].unsqueeze(-1)
        S = S + k[:, :, t].unsqueeze(-1) * u.unsqueeze(-2)
        outs.append((S * q[:, :, t].unsqueeze(-1)).sum(-2))
    return torch.stack(outs, 2), S


def inputs(B, H, T, K, V, gen, dtype):
    r = lambda *s: torch.randn(*s, generator=gen, dtype=dtype)  # noqa: E731
    q = kda_chunk.l2_normalise(r(B, H, T, K)) * K ** -0.5
    k = kda_chunk.l2_normalise(r(B, H, T, K))
    v = r(B, H, T, V)
    # the model's safe gate: -5 sigmoid(.), some channels near -5 (near-total forgetting), some near 0
    g = -5.0 * torch.sigmoid(3.0 * r(B, H, T, K))
    beta = torch.sigmoid(r(B, H, T))
    S0 = r(B, H, K, V) * 0.3
    return [t.requires_grad_() for t in (q, k, v, g, beta, S0)]


def check(T, dtype, tol):
    gen = torch.Generator().manual_seed(T)
    B, H, K, V = 2, 3, 32, 24
    a = inputs(B, H, T, K, V, gen, dtype)
    b = [t.detach().clone().requires_grad_() for t in a]
    wo = torch.randn(B, H, T, V, generator=gen, dtype=dtype)
    ws = torch.randn(B, H, K, V, generator=gen, dtype=dtype)
    o1, s1 = recurrence(*a)
    o2, s2 = kda_chunk.kda_chunked(*b[:5], initial_state=b[5])
    ((o1 * wo).sum() + (s1 * ws).sum()).backward()
    ((o2 * wo).sum() + (s2 * ws).sum()).backward()
    worst = 0.0
    for name, x, y in [("out", o1, o2), ("state", s1, s2)] + [
            ("grad " + n, p.grad, r.grad) for n, p, r in zip("q k v g beta S0".split(), a, b)]:
        err = float((x - y).abs().max() / x.abs().max().clamp_min(1e-12))
        worst = max(worst, err)
        if not torch.isfinite(y).all() or err > tol:
            print("T=%d %s: %s relative error %.2e > %.0e" % (T, dtype, name, err, tol))
            return False
    print("T=%d %s: outputs, state and gradients agree (worst relative error %.2e)" % (T, dtype, worst))
    return True


def main():
    ok = True
    for T in (1, 17, 64, 130, 257):
        ok &= check(T, torch.float64, 1e-10)
    ok &= check(200, torch.float32, 2e-4)
    # the drop-in wrapper: [B, T, H, D] layout, normalisation and scaling inside
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 70, 3, 16, generator=gen) for _ in range(3))
    g = -5.0 * torch.sigmoid(torch.randn(2, 70, 3, 16, generator=gen))
    beta = torch.sigmoid(torch.randn(2, 70, 3, generator=gen))
    o, s = kda_chunk.chunk_kda(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, output_final_state=True)
    t = lambda x: x.transpose(1, 2)  # noqa: E731
    o_ref, s_ref = recurrence(t(kda_chunk.l2_normalise(q)) * 16 ** -0.5, t(kda_chunk.l2_normalise(k)), t(v),
                              t(g), t(beta), torch.zeros(2, 3, 16, 16))
    err = float((t(o_ref) - o).abs().max())
    print("wrapper: max |out - recurrence| = %.2e, state %.2e" % (err, float((s - s_ref).abs().max())))
    ok &= err < 1e-4 and o.shape == q.shape
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
