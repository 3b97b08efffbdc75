/* plan.c: the CUDA backend's memory arithmetic (plan.h): weights by tensor shape, caches per
 * token and per session, the scratch layout the forward uses, and the fit check with its advice. */
#include "cuda/plan.h"
#include "kernels/engine.h"
#include "kernels/kernels.h"

#include <stdio.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define CUDA_PLAN_RESERVE ((size_t)1 << 30) /* context, graphs, allocator slack */

const char *cuda_kv_name(int kv_dtype)
{
    return kv_dtype == CUDA_KV_F32 ? "f32" : kv_dtype == CUDA_KV_BF16 ? "bf16" : "fp8";
}

void cuda_plan_rank_config(const glm_config *full, glm_config *rank)
{
    *rank = *full;
    rank->kda_heads /= 2;
    rank->num_heads /= 2;
    rank->intermediate_size /= 2;
    rank->moe_intermediate_size /= 2;
}

cuda_plan_part cuda_plan_part_of(int64_t n, int rank, int world)
{
    int64_t base = n / world, extra = n % world;
    cuda_plan_part p = {rank * base + (rank < extra ? rank : extra), base + (rank < extra)};
    return p;
}

void cuda_plan_rank_config_of(const glm_config *full, int rank, int world, glm_config *out)
{
    *out = *full;
    out->kda_heads = (int)cuda_plan_part_of(full->kda_heads, rank, world).count;
    out->num_heads = (int)cuda_plan_part_of(full->num_heads, rank, world).count;
    out->intermediate_size = (int)cuda_plan_part_of(full->intermediate_size, rank, world).count;
    out->moe_intermediate_size = (int)cuda_plan_part_of(full->moe_intermediate_size, rank, world).count;
}

int cuda_plan_ranks_of(int64_t vocab, int64_t head_rows)
{
    if (head_rows == vocab)
        return 1;
    for (int world = 2; world <= CUDA_PLAN_MAX_RANKS; world++)
        for (int r = 0; r < world; r++)
            if (cuda_plan_part_of(vocab, r, world).count == head_rows)
                return world;
    return 0;
}

size_t cuda_plan_weights_estimate(const glm_config *full, int ranks, glm_traffic_dense dense, int expert_bits)
{
    glm_traffic_params p = {.ranks = ranks, .dense = dense, .expert_bits = expert_bits, .resident = 1};
    glm_traffic_table t;
    if (glm_traffic_step(full, &p, &t, NULL) != GLM_OK)
        return 0;
    return (size_t)(glm_traffic_bytes(&t) + 0.5);
}

int cuda_plan_head_pieces(int T)
{
    return T > 0 ? (T + CUDA_HEAD_ROWS - 1) / CUDA_HEAD_ROWS : 0;
}

void cuda_plan_head_piece(int T, int i, int *r0, int *n)
{
    int pieces = cuda_plan_head_pieces(T);
    int a = (int)((int64_t)T * i / pieces), b = (int)((int64_t)T * (i + 1) / pieces);
    *r0 = a;
    *n = b - a;
}

size_t cuda_plan_workspace_estimate(const glm_config *c, int chunk)
{
    if (!c->exl3 || c->n_routed_experts < 1 || chunk < 1)
        return 0;
    return kern_exl3_moe_prefill_bytes(c->n_routed_experts, c->hidden_size, c->moe_intermediate_size,
                                       chunk, c->num_experts_per_tok > 0 ? c->num_experts_per_tok : 1);
}

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

static size_t max2(size_t a, size_t b)
{
    return a > b ? a : b;
}

size_t cuda_plan_scratch(const glm_config *c, int chunk, int dense_experts, size_t *offsets)
{
    size_t T = (size_t)chunk, D = (size_t)c->hidden_size, S = (size_t)c->hc_mult;
    size_t mix = (2 + S) * S, C = (size_t)c->kda_heads * c->kda_head_dim;
    size_t NH = (size_t)c->num_heads, R = (size_t)c->kv_lora_rank;
    size_t IH = (size_t)c->index_n_heads, ID = (size_t)c->index_head_dim;
    size_t E = (size_t)c->n_routed_experts, K = (size_t)(c->num_experts_per_tok > 0 ? c->num_experts_per_tok : 1);
    size_t I = (size_t)c->moe_intermediate_size, dense = dense_experts ? 1 : 0;
    size_t inter = max2((size_t)c->intermediate_size, I * (size_t)(c->n_shared_experts > 0 ? c->n_shared_experts : 1));
    size_t width = (size_t)c->index_topk + (size_t)c->index_kpool - 1;
    size_t V = (size_t)c->vocab_size;
    /* in the order of cu_scratch's members (forward.c binds them by this order) */
    size_t n[CUDA_SCRATCH_BUFFERS] = {
        T * S * D * 4, T * D * 4, T * D * 4, T * D * 4, T * S * D * 4, T * mix * 4, T * S * 4,
        T * S * 4, T * S * S * 4,
        /* KDA: q k v qc kc vc g o gate lo beta */
        T * C * 4, T * C * 4, T * C * 4, T * C * 4, T * C * 4, T * C * 4, T * C * 4, T * C * 4,
        T * C * 4, 2 * T * (size_t)c->kda_head_dim * 4, T * (size_t)c->kda_heads * 4,
        /* DSA: qa qd kvl wk ig iq hw qt ot od sel_idx sel_count */
        T * (size_t)c->q_lora_rank * 4, T * NH * (size_t)c->qk_nope_head_dim * 4, T * R * 4,
        T * ID * 4, T * ID * 4, T * IH * ID * 4, T * IH * 4, T * NH * R * 4, T * NH * R * 4,
        T * NH * (size_t)c->v_head_dim * 4, T * width * 4, T * 4,
        /* FFN: fg fu rlog rscratch rw mh mye ffn_y rids (mh, mye: eng_moe_dense's) */
        T * inter * 4, T * inter * 4, T * E * 4, T * (3 * E + (size_t)c->n_group) * 4, T * K * 4,
        dense * T * K * I * 4, dense * T * K * D * 4, T * D * 4, T * K * 4,
        /* the decode path's HC partial sums (8 rows, its column blocks, mix products + squares) */
        (size_t)8 * ENG_HC_MAX_SPLITS * (mix + 1) * 4,
        /* and its latent attention's partial sums (the MQA kernel's (row, head, slice)) */
        ENG_ATTEND_PART_FLOATS(NH, R, width) * 4,
        /* head: hfin logits */
        T * D * 4, (T < CUDA_HEAD_ROWS ? T : CUDA_HEAD_ROWS) * V * 4,
        /* the indexer's one-part query shifts (cuda_gemm = onepart: a shift a head a row) */
        T * IH * 4,
    };
    size_t off = 0;
    for (int i = 0; i < CUDA_SCRATCH_BUFFERS; i++) {
        if (offsets)
            offsets[i] = off;
        off += align256(n[i] ? n[i] : 4);
    }
    return off;
}

static size_t row_bytes(size_t width, int kv)
{
    return glm_cache_row_bytes(width, (glm_cache_format)kv);
}

/* The widest input eng_gemm splits: the HC streams, the KDA and MLA values, the dense and shared
 * expert features. */
static size_t gemm_widest_input(const glm_config *c)
{
    size_t D = (size_t)c->hidden_size, S = (size_t)c->hc_mult;
    size_t C = (size_t)c->kda_heads * (size_t)c->kda_head_dim;
    size_t cols = max2(S * D, max2(C, (size_t)c->num_heads * (size_t)c->v_head_dim));
    return max2(cols, max2((size_t)c->intermediate_size,
                           (size_t)c->moe_intermediate_size * (size_t)(c->n_shared_experts > 0 ? c->n_shared_experts : 1)));
}

/* eng_gemm per stream with every BF16 weight in three parts (cuda_gemm = three or default; besides
 * the cuBLAS workspace): the 3-part bf16 split of the widest input (each part from a 256-byte
 * boundary) and a narrow weight's three copies. */
static size_t gemm_three_parts(const glm_config *c, int chunk)
{
    return ENG_GEMM_CONCAT_BYTES + 6 * (size_t)chunk * gemm_widest_input(c) + 3 * 256;
}

/* eng_gemm per stream in the other modes (besides the cuBLAS workspace): the split buffer at the
 * larger of the two splits (weights left to three parts, an LM head, still grow it), and the fp16
 * copy of the largest weight the two-part form takes, one of at most ENG_GEMM_HALF_BYTES (a larger one keeps three parts): a dense weight's, at most
 * 2 widest^2 bytes, widest bounding every dense weight's rows and columns, or the LM head's (this
 * rank's part of the vocabulary, rank 0's the largest, by hidden), which a small model's fits. */
static size_t gemm_two_parts(const glm_config *c, int ranks, int chunk)
{
    size_t D = (size_t)c->hidden_size, cols = gemm_widest_input(c);
    size_t NH = (size_t)c->num_heads, dn = (size_t)c->qk_nope_head_dim;
    size_t widest = max2(max2(cols, 2 * D), max2(NH * dn, (size_t)c->index_n_heads * (size_t)c->index_head_dim));
    widest = max2(widest, max2((size_t)c->q_lora_rank, (size_t)c->kv_lora_rank + dn));
    widest = max2(widest, (size_t)c->n_routed_experts);
    size_t half_copy = 2 * widest * widest < ENG_GEMM_HALF_BYTES ? 2 * widest * widest : ENG_GEMM_HALF_BYTES;
    size_t head_copy = 2 * (size_t)cuda_plan_part_of(c->vocab_size, 0, ranks > 0 ? ranks : 1).count * D;
    if (head_copy <= ENG_GEMM_HALF_BYTES)
        half_copy = max2(half_copy, head_copy);
    return max2(6 * (size_t)chunk * cols + 3 * 256, 4 * (size_t)chunk * cols + 4 * (size_t)chunk + 4 * 256) +
           half_copy;
}

void cuda_plan_make(const glm_config *c, int ranks, int context, int kv_dtype, int kv_index_dtype,
                    int chunk, int dense_experts, size_t weights, cuda_plan *p)
{
    size_t H = (size_t)c->kda_heads, dk = (size_t)c->kda_head_dim;
    size_t C = H * dk, K = (size_t)c->kda_conv_kernel;
    size_t nk = (size_t)glm_config_count(c, GLM_ATTN_KDA), nd = (size_t)glm_config_count(c, GLM_ATTN_DSA);
    size_t ID = (size_t)c->index_head_dim, kp = (size_t)(c->index_kpool > 0 ? c->index_kpool : 1);
    p->ranks = ranks;
    p->context = context;
    p->kv_dtype = kv_dtype;
    p->kv_index_dtype = kv_index_dtype;
    p->chunk = chunk;
    p->chunk_given = 0;
    p->weights = weights;
    p->kda_state = 2 * nk * (H * dk * dk + (K > 0 ? K - 1 : 0) * 3 * C) * 4;
    /* per DSA layer: the latent, the indexer key and gate rows, a pool key per kpool tokens */
    size_t per = row_bytes((size_t)c->kv_lora_rank, kv_dtype) + 2 * row_bytes(ID, kv_index_dtype);
    p->dsa_per_token = nd * (per + row_bytes(ID, kv_index_dtype) / kp);
    /* and the indexer's score scratch: CUDA_SCORE_ROWS query rows of a float per pool (the bound
     * rounds up), and the selection's work area of each row */
    p->score_per_token = nd ? (CUDA_SCORE_ROWS * 4 + kp - 1) / kp : 0;
    p->dsa_fixed = nd ? CUDA_SCORE_ROWS * 4 + CUDA_SCORE_ROWS * ENG_DSA_WORK_INTS * 4 : 0;
    p->dsa_cache = (p->dsa_per_token + p->score_per_token) * (size_t)context + p->dsa_fixed;
    p->gemm = ENG_GEMM_WORKSPACE + max2(gemm_three_parts(c, chunk), gemm_two_parts(c, ranks, chunk));
    p->scratch = cuda_plan_scratch(c, chunk, dense_experts, NULL) + p->gemm;
    /* the staging a state starts with: a row of logits per rank, or a row of the hidden sum */
    p->host_pinned = 2 * max2((size_t)c->vocab_size, (size_t)c->hidden_size) * 4;
    p->window_rows = 0;
    p->windows = p->mtp_per_token = p->mtp_cache = 0;
    p->total = p->weights + p->kda_state + p->dsa_cache + p->scratch;
}

int cuda_plan_pick_chunk(int given, int known, size_t available, cuda_plan_need_fn need, void *ctx)
{
    if (given > 0)
        return given;
    if (!known)
        return CUDA_CHUNK_UNKNOWN;
    int chunk = CUDA_CHUNK_CAP;
    for (; chunk > CUDA_CHUNK_FLOOR; chunk /= 2) {
        size_t n = need(ctx, chunk);
        if (n <= available && available - n >= CUDA_PLAN_RESERVE)
            break;
    }
    return chunk;
}

void cuda_plan_drafting(cuda_plan *p, const glm_config *c, int window_rows, int mtp)
{
    size_t H = (size_t)c->kda_heads, dk = (size_t)c->kda_head_dim, C = H * dk;
    size_t K = (size_t)(c->kda_conv_kernel > 0 ? c->kda_conv_kernel : 1);
    size_t nk = (size_t)glm_config_count(c, GLM_ATTN_KDA), n = (size_t)(window_rows > 0 ? window_rows : 0);
    size_t ID = (size_t)c->index_head_dim, kp = (size_t)(c->index_kpool > 0 ? c->index_kpool : 1);
    p->total -= p->windows + p->mtp_cache;
    p->window_rows = (int)n;
    /* per KDA layer: the recurrent state after each row, the conv window rows and each row's */
    p->windows = n ? nk * (n * H * dk * dk + (K - 1 + n) * 3 * C) * 4 : 0;
    /* the MTP layer's DSA block: one DSA layer's cache rows, and its chunk rows (kept, fresh,
     * h_in, x, g and the two-wide cat: 7 x chunk x hidden floats) */
    p->mtp_per_token = mtp ? row_bytes((size_t)c->kv_lora_rank, p->kv_dtype) +
                                 2 * row_bytes(ID, p->kv_index_dtype) +
                                 row_bytes(ID, p->kv_index_dtype) / kp
                           : 0;
    p->mtp_cache = mtp ? p->mtp_per_token * (size_t)p->context +
                             7 * (size_t)p->chunk * (size_t)c->hidden_size * 4
                       : 0;
    p->total += p->windows + p->mtp_cache;
}

glm_status cuda_plan_check(const cuda_plan *p, size_t available, glm_error *err)
{
    size_t need = p->total + CUDA_PLAN_RESERVE;
    if (need <= available)
        return GLM_OK;
    size_t per_token = p->mtp_per_token * (size_t)p->context;
    size_t fixed = p->weights + p->kda_state + p->scratch + p->windows + p->mtp_cache - per_token +
                   CUDA_PLAN_RESERVE;
    char fit[160], mtp[64] = "", drafting[200] = "";
    if (p->mtp_cache)
        snprintf(mtp, sizeof mtp, " and the MTP layer's cache %.2f GiB", p->mtp_cache / GIB);
    if (p->window_rows > 0)
        snprintf(drafting, sizeof drafting, ", verification windows of %d rows %.2f GiB%s (draft = "
                 "off needs none of it)", p->window_rows, p->windows / GIB, mtp);
    if (fixed + p->dsa_fixed < available && p->dsa_per_token > 0) {
        size_t tokens = (available - fixed - p->dsa_fixed) /
                        (p->dsa_per_token + p->score_per_token + p->mtp_per_token);
        snprintf(fit, sizeof fit, "a context of at most %zu tokens fits (--context %zu)",
                 tokens, tokens);
    } else {
        snprintf(fit, sizeof fit, "the weights alone do not fit: split the model over two ranks "
                 "(--peer) or use a smaller quantization");
    }
    return glm_error_set(err, GLM_ERR_NOMEM,
                         "the CUDA backend needs %.1f GiB but %.1f GiB are available: weights %.1f "
                         "GiB, the attention cache for a %d-token context %.1f GiB (%s), KDA states "
                         "%.2f GiB, scratch %.2f GiB for prefill chunks of %d rows%s, reserve 1 "
                         "GiB; %s%s%s",
                         need / GIB, available / GIB, p->weights / GIB, p->context,
                         p->dsa_cache / GIB, cuda_kv_name(p->kv_dtype), p->kda_state / GIB,
                         p->scratch / GIB, p->chunk, drafting, fit,
                         p->chunk_given && p->chunk > CUDA_CHUNK_FLOOR
                             ? ", or smaller prefill chunks (cuda_chunk)" : "",
                         p->kv_dtype != CUDA_KV_FP8 ? ", or the fp8 cache (--kv-cache fp8)" : "");
}

void cuda_plan_describe(const cuda_plan *p, char *buf, size_t n)
{
    char drafting[200], mtp[64] = "";
    if (p->mtp_cache)
        snprintf(mtp, sizeof mtp, ", the MTP layer's cache and rows %.3f GiB", p->mtp_cache / GIB);
    if (p->window_rows > 0)
        snprintf(drafting, sizeof drafting, "drafting: verification windows of %d rows %.3f GiB of "
                 "KDA states%s", p->window_rows, p->windows / GIB, mtp);
    else
        snprintf(drafting, sizeof drafting, "no drafting (no verification windows)");
    char chunk[96];
    if (p->chunk_given)
        snprintf(chunk, sizeof chunk, "prefill chunks of %d rows (cuda_chunk)", p->chunk);
    else
        snprintf(chunk, sizeof chunk, "prefill chunks of %d rows (the most the memory allows, at "
                 "most %d)", p->chunk, CUDA_CHUNK_CAP);
    snprintf(buf, n, "weights %.2f GiB, %s latent / %s indexer cache %.2f GiB for %d tokens, KDA "
             "states %.3f GiB, scratch %.3f GiB (cuBLAS %.0f MiB), %s, %s: %.2f GiB on the device "
             "(rank of %d); a session's pinned host staging %.2f MiB (grown for all-rows prefills)",
             p->weights / GIB, cuda_kv_name(p->kv_dtype), cuda_kv_name(p->kv_index_dtype),
             p->dsa_cache / GIB, p->context, p->kda_state / GIB, p->scratch / GIB,
             p->gemm / (1024.0 * 1024.0), chunk, drafting, p->total / GIB, p->ranks,
             p->host_pinned / (1024.0 * 1024.0));
}

size_t cuda_plan_unified_limit(void)
{
    return (size_t)128 * 1000 * 1000 * 1000 - ((size_t)8 << 30);
}
