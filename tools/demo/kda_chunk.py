# kda_chunk.py: the KDA (gated delta rule with per-key-channel decay) core in chunked WY form, for
# training glmchat's demo model fast; same arguments and results as the per-token recurrence.
#
# Per head, with q and k L2-normalised (q also scaled by 1/sqrt(K)), log decay g <= 0 per key channel
# and beta in (0, 1), the recurrence is
#     S <- diag(exp(g_t)) S;  u_t = beta_t (v_t - S^T k_t);  S <- S + k_t u_t^T;  o_t = S^T q_t.
# In a chunk of C steps with state S0 at its start and Gam_t = sum of g over the chunk up to t:
#     (I + N) U = diag(beta) V - diag(beta) (K . exp(Gam)) S0,  N[i][j] = beta_i k_i.(k_j . e^{Gam_i - Gam_j}), j < i
#     O = (Q . exp(Gam)) S0 + A U,                                A[i][j] = q_i.(k_j . e^{Gam_i - Gam_j}), j <= i
#     S_next = diag(exp(Gam_C)) S0 + (K . exp(Gam_C - Gam))^T U
# so U = U0 - W S0 with U0 = T diag(beta) V and W = T diag(beta) (K . exp(Gam)), T = (I + N)^-1 (a
# unit lower-triangular solve). Only the in-chunk decays exp(Gam_i - Gam_j) can overflow when formed as
# exp(Gam_i) exp(-Gam_j); decayed_gram splits the chunk into sub-chunks and takes, for each block, a
# reference point between (or at the start of) the two sub-chunks, so every factor stays finite.
import torch


def l2_normalise(x, eps=1e-6):
    """x / sqrt(sum x^2 + eps) over the last axis (eps inside the root)."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def decayed_gram(x, y, gam, sub, strict):
    """M[..., i, j] = sum_d x_i[d] y_j[d] exp(gam_i[d] - gam_j[d]) for j < i (j <= i unless strict),
    0 above; x, y, gam: [..., C, D] with gam non-increasing along C; C a multiple of sub."""
    C = x.shape[-2]
    ns = C // sub
    xs, ys, gs = (t.unflatten(-2, (ns, sub)) for t in (x, y, gam))
    # blocks on the diagonal: reference = the sub-chunk's first row (factors <= 1 and <= e^(sub*max|g|))
    ref = gs[..., :1, :].detach()
    diag = (xs * torch.exp(gs - ref)) @ (ys * torch.exp(ref - gs)).transpose(-1, -2)
    keep = torch.ones(sub, sub, dtype=torch.bool, device=x.device).tril(-1 if strict else 0)
    diag = diag.masked_fill(~keep, 0.0)
    cols = []
    for b in range(ns):
        parts = []
        if b > 0:
            parts.append(x.new_zeros(*x.shape[:-2], b * sub, sub))
        parts.append(diag[..., b, :, :])
        if b < ns - 1:
            # rows after sub-chunk b against its columns: reference = b's last row, both factors <= 1
            lo = (b + 1) * sub
            ref = gam[..., lo - 1:lo, :].detach()
            rows = x[..., lo:, :] * torch.exp(gam[..., lo:, :] - ref)
            colv = ys[..., b, :, :] * torch.exp(ref - gs[..., b, :, :])
            parts.append(rows @ colv.transpose(-1, -2))
        cols.append(torch.cat(parts, -2))
    return torch.cat(cols, -1)


def kda_chunked(q, k, v, g, beta, initial_state=None, chunk=64, sub=16):
    """q, k: [B, H, T, K] (normalised, q scaled); v: [B, H, T, V]; g: [B, H, T, K] log decays;
    beta: [B, H, T]; all float32. Returns o [B, H, T, V] and the final state [B, H, K, V]."""
    B, H, T, K = k.shape
    V = v.shape[-1]
    pad = (-T) % chunk
    if pad:
        # padding steps: no decay, k = v = 0, so the state passes through unchanged
        q, k, v, g = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (q, k, v, g))
        beta = torch.nn.functional.pad(beta, (0, pad))
    n = (T + pad) // chunk
    q, k, v, g = (t.reshape(B, H, n, chunk, t.shape[-1]) for t in (q, k, v, g))
    beta = beta.reshape(B, H, n, chunk, 1)
    gam = g.cumsum(-2)
    N = decayed_gram(k * beta, k, gam, sub, strict=True)
    A = decayed_gram(q, k, gam, sub, strict=False)
    eye = torch.eye(chunk, dtype=N.dtype, device=N.device)
    rhs = torch.cat([v * beta, k * beta * torch.exp(gam)], -1)
    sol = torch.linalg.solve_triangular(N + eye, rhs, upper=False, unitriangular=True)
    u0, w = sol[..., :V], sol[..., V:]
    qd = q * torch.exp(gam)
    last = gam[..., -1:, :]
    kd = k * torch.exp(last - gam)
    dlast = torch.exp(last).transpose(-1, -2)  # [B, H, n, K, 1]
    S = q.new_zeros(B, H, K, V) if initial_state is None else initial_state.to(q.dtype)
    outs = []
    for c in range(n):
        u = u0[:, :, c] - w[:, :, c] @ S
        outs.append(qd[:, :, c] @ S + A[:, :, c] @ u)
        S = dlast[:, :, c] * S + kd[:, :, c].transpose(-1, -2) @ u
    o = torch.stack(outs, 2).reshape(B, H, n * chunk, V)[:, :, :T]
    return o, S


def chunk_kda(query, key, value, g, beta, chunk_size=64, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, **_):
    """Drop-in for the model's KDA core: inputs [B, T, H, D] (beta [B, T, H]), float32 math,
    output in the input's dtype, final state float32 when asked for."""
    dtype = query.dtype
    q, k, v, gg, b = (t.float().transpose(1, 2) for t in (query, key, value, g, beta))
    if use_qk_l2norm_in_kernel:
        q, k = l2_normalise(q), l2_normalise(k)
    q = q * (q.shape[-1] ** -0.5)
    o, S = kda_chunked(q, k, v, gg, b, initial_state, chunk=chunk_size)
    return o.transpose(1, 2).contiguous().to(dtype), (S if output_final_state else None)
