/* weights.c: uploads a model's weights for the CUDA backend: dense matrices in their stored
 * dtype (BF16 stays BF16, or is requantized on the GPU to 4 bits with dense = q4; F32,
 * F16 and FP8 blocks as the loader gives them), EXL3 linears in their on-disk layout, a MoE
 * layer's EXL3 experts stacked for kern_exl3_moe. A dry run counts bytes. */
#ifdef HAVE_CUDA
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"

typedef struct up_ctx {
    cu_weights *w;
    int dry;       /* 1: count bytes only */
    int q4;        /* requantize the BF16 linears (not the HC, router, embedding, kv_b) */
    int chunk;     /* the prefill chunk's rows: the EXL3 workspaces are sized for it */
    void *stage;   /* q4: a BF16 matrix on its way to the quantizer */
    size_t stage_bytes;
    size_t bytes;
    glm_error *err;
    int failed;
} up_ctx;

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* Device copy of n host bytes (host NULL: zeroed); NULL after a failure (err set). */
static void *put(up_ctx *u, const void *host, size_t n)
{
    if (u->failed)
        return NULL;
    u->bytes += align256(n ? n : 1);
    if (u->dry)
        return (void *)(uintptr_t)256; /* never dereferenced */
    cu_weights *w = u->w;
    if (w->n_allocs == w->cap_allocs) {
        size_t cap = w->cap_allocs ? 2 * w->cap_allocs : 256;
        void **a = realloc(w->allocs, cap * sizeof *a);
        if (!a) {
            u->failed = 1;
            glm_error_set(u->err, GLM_ERR_NOMEM, "out of host memory uploading the weights");
            return NULL;
        }
        w->allocs = a;
        w->cap_allocs = cap;
    }
    void *d = NULL;
    int rc = kern_malloc(&d, n ? n : 1);
    if (!rc)
        rc = host ? kern_to_device(d, host, n) : kern_memset(d, 0, n ? n : 1);
    if (rc) {
        if (d)
            kern_free(d);
        u->failed = 1;
        glm_error_set(u->err, GLM_ERR_NOMEM, "cannot place %zu bytes of weights on the GPU (%s; "
                      "%zu bytes placed so far)", n, kern_error_string(rc), u->bytes);
        return NULL;
    }
    w->allocs[w->n_allocs++] = d;
    w->bytes += align256(n ? n : 1);
    return d;
}

static const float *put_f32(up_ctx *u, const float *v, size_t n)
{
    return v ? put(u, v, n * sizeof *v) : NULL;
}

static size_t dtype_size(st_dtype t)
{
    return t == ST_F32 ? 4 : t == ST_F8_E4M3 ? 1 : 2;
}

/* fp16 scales of an EXL3 module (suh/svh as stored, or built from the legacy sign bits). */
static const void *exl3_scales(up_ctx *u, const exl3_tensor *t, int input)
{
    const uint16_t *stored = input ? t->suh : t->svh;
    size_t n = (size_t)(input ? t->in : t->out);
    if (stored)
        return put(u, stored, n * 2);
    float *f = malloc(n * sizeof *f);
    uint16_t *h = malloc(n * sizeof *h);
    const void *d = NULL;
    if (f && h) {
        if (input)
            exl3_input_scales(t, f);
        else
            exl3_output_scales(t, f);
        for (size_t i = 0; i < n; i++)
            h[i] = exl3_f16_from_f64((double)f[i]);
        d = put(u, h, n * 2);
    } else if (!u->failed) {
        u->failed = 1;
        glm_error_set(u->err, GLM_ERR_NOMEM, "out of host memory uploading EXL3 scales");
    }
    free(f);
    free(h);
    return d;
}

static size_t exl3_words(const exl3_tensor *t)
{
    return (size_t)(t->in / 16) * (size_t)(t->out / 16) * 16 * (size_t)t->bits;
}

static void put_mat(up_ctx *u, const glm_weight *w, eng_mat *m)
{
    memset(m, 0, sizeof *m);
    m->rows = (int)w->rows;
    m->cols = (int)w->cols;
    size_t n = (size_t)w->rows * (size_t)w->cols;
    if (w->kind == GLM_W_FP8_BLOCK) {
        m->dtype = ENG_FP8;
        m->data = put(u, w->data, n);
        size_t srows = (size_t)((w->rows + w->block_rows - 1) / w->block_rows);
        m->scale = put_f32(u, w->scale, srows * (size_t)w->scale_cols);
        m->scale_cols = (int)w->scale_cols;
        m->block_rows = w->block_rows;
        m->block_cols = w->block_cols;
        return;
    }
    m->dtype = w->dtype == ST_F32 ? ENG_F32 : w->dtype == ST_BF16 ? ENG_BF16 : ENG_F16;
    m->data = put(u, w->data, n * dtype_size(w->dtype));
}

/* An EXL3 weight as f32 (for roles the fused kernels cannot take). */
static void put_dequantized(up_ctx *u, const exl3_tensor *t, eng_mat *m)
{
    memset(m, 0, sizeof *m);
    m->dtype = ENG_F32;
    m->rows = t->out;
    m->cols = t->in;
    size_t n = (size_t)t->out * (size_t)t->in;
    if (u->dry) {
        m->data = put(u, NULL, n * 4);
        return;
    }
    float *f = malloc(n * sizeof *f);
    glm_error e = {0};
    if (!f || exl3_dequantize_f32(t, f, &e) != GLM_OK) {
        if (!u->failed)
            glm_error_set(u->err, GLM_ERR_NOMEM, "cannot expand an EXL3 expert for the GPU: %s",
                          f ? e.message : "out of host memory");
        u->failed = 1;
        free(f);
        return;
    }
    m->data = put(u, f, n * 4);
    free(f);
}

/* A BF16 (or F32: the small test models) matrix as ENG_Q4 (eng_quantize_q4 on the device);
 * those of widths that are not a multiple of 128 stay as they are (counted in n_q4_kept), as do
 * F16 and FP8 ones. */
static void put_q4(up_ctx *u, const glm_weight *w, eng_mat *m)
{
    int plain = w->kind == GLM_W_PLAIN && (w->dtype == ST_BF16 || w->dtype == ST_F32);
    if (!plain || w->cols % 128) {
        if (plain)
            u->w->n_q4_kept++;
        put_mat(u, w, m);
        return;
    }
    size_t n = (size_t)w->rows * (size_t)w->cols, bytes = n * dtype_size(w->dtype);
    memset(m, 0, sizeof *m);
    m->dtype = ENG_Q4;
    m->rows = (int)w->rows;
    m->cols = (int)w->cols;
    void *codes = put(u, NULL, n / 2);
    uint16_t *scales = put(u, NULL, n / 32 * 2);
    m->data = codes;
    m->gscale = scales;
    u->w->n_q4++;
    if (u->dry || u->failed)
        return;
    int rc = 0;
    if (bytes > u->stage_bytes) {
        if (u->stage)
            kern_free(u->stage);
        u->stage = NULL;
        u->stage_bytes = 0;
        rc = kern_malloc(&u->stage, bytes);
        if (!rc)
            u->stage_bytes = bytes;
    }
    if (!rc)
        rc = kern_to_device(u->stage, w->data, bytes);
    eng_mat src = {.dtype = w->dtype == ST_F32 ? ENG_F32 : ENG_BF16, .rows = m->rows,
                   .cols = m->cols, .data = u->stage};
    if (!rc)
        rc = eng_quantize_q4(&src, codes, scales, m, NULL);
    if (!rc)
        rc = eng_stream_sync(NULL);
    if (rc) {
        u->failed = 1;
        glm_error_set(u->err, GLM_ERR_NOMEM, "cannot requantize a %lld x %lld matrix to 4 bits "
                      "on the GPU (dense = q4): %s", (long long)w->rows,
                      (long long)w->cols, rc > 0 ? kern_error_string(rc) : "arguments out of range");
    }
}

/* A linear layer; quantizable: may become ENG_Q4 under dense = q4. */
static void put_lin_as(up_ctx *u, const glm_weight *w, cu_lin *l, int quantizable)
{
    memset(l, 0, sizeof *l);
    if (w->kind != GLM_W_EXL3) {
        if (u->q4 && quantizable)
            put_q4(u, w, &l->m);
        else
            put_mat(u, w, &l->m);
        return;
    }
    const exl3_tensor *t = w->exl3;
    l->exl3 = 1;
    l->m.rows = t->out;
    l->m.cols = t->in;
    l->x.in = t->in;
    l->x.out = t->out;
    l->x.bits = t->bits;
    l->x.codebook = (int)t->codebook;
    l->x.trellis = put(u, t->trellis, exl3_words(t) * 2);
    l->x.suh = exl3_scales(u, t, 1);
    l->x.svh = exl3_scales(u, t, 0);
    l->x.bias = t->bias ? put(u, t->bias, (size_t)t->out * 2) : NULL;
    size_t ws = kern_exl3_matmul_workspace(&l->x, u->chunk);
    if (ws > u->w->exl3_work_bytes)
        u->w->exl3_work_bytes = ws;
}

static void put_lin(up_ctx *u, const glm_weight *w, cu_lin *l)
{
    put_lin_as(u, w, l, 1);
}

static void put_mlp(up_ctx *u, const glm_mlp_weights *w, cu_mlp *m)
{
    put_lin(u, &w->gate, &m->gate);
    put_lin(u, &w->up, &m->up);
    put_lin(u, &w->down, &m->down);
}

/* 1 when every expert is EXL3 with one bit width and codebook, no bias, in shapes
 * kern_exl3_moe takes. */
static int fusable(const glm_config *c, const glm_layer_weights *L)
{
    const glm_mlp_weights *e0 = &L->experts[0];
    if (e0->gate.kind != GLM_W_EXL3)
        return 0;
    int bits = e0->gate.exl3->bits, cb = (int)e0->gate.exl3->codebook;
    int H = c->hidden_size, I = c->moe_intermediate_size;
    if (H % 512 || I % 128)
        return 0;
    for (int e = 0; e < c->n_routed_experts; e++) {
        const glm_weight *ws[3] = {&L->experts[e].gate, &L->experts[e].up, &L->experts[e].down};
        for (int j = 0; j < 3; j++) {
            const exl3_tensor *t = ws[j]->kind == GLM_W_EXL3 ? ws[j]->exl3 : NULL;
            if (!t || t->bits != bits || (int)t->codebook != cb || t->bias)
                return 0;
            int in = j < 2 ? H : I, out = j < 2 ? I : H;
            if (t->in != in || t->out != out)
                return 0;
        }
    }
    return 1;
}

/* Stacks one matrix role of every expert: trellis words, then input and output fp16 scales. */
static void stack_role(up_ctx *u, const glm_layer_weights *L, int E, int role, const void **trellis,
                       const void **suh, const void **svh)
{
    const exl3_tensor *t0 = (role == 0 ? &L->experts[0].gate : role == 1 ? &L->experts[0].up
                                                                          : &L->experts[0].down)->exl3;
    size_t words = exl3_words(t0), in = (size_t)t0->in, out = (size_t)t0->out;
    uint16_t *tr = u->dry ? NULL : malloc((size_t)E * words * 2);
    uint16_t *si = u->dry ? NULL : malloc((size_t)E * in * 2);
    uint16_t *so = u->dry ? NULL : malloc((size_t)E * out * 2);
    float *f = u->dry ? NULL : malloc((in > out ? in : out) * sizeof *f);
    if (!u->dry && (!tr || !si || !so || !f)) {
        if (!u->failed)
            glm_error_set(u->err, GLM_ERR_NOMEM, "out of host memory stacking EXL3 experts");
        u->failed = 1;
    }
    for (int e = 0; !u->dry && !u->failed && e < E; e++) {
        const glm_mlp_weights *x = &L->experts[e];
        const exl3_tensor *t = (role == 0 ? &x->gate : role == 1 ? &x->up : &x->down)->exl3;
        memcpy(tr + (size_t)e * words, t->trellis, words * 2);
        if (t->suh) {
            memcpy(si + (size_t)e * in, t->suh, in * 2);
        } else {
            exl3_input_scales(t, f);
            for (size_t i = 0; i < in; i++)
                si[(size_t)e * in + i] = exl3_f16_from_f64((double)f[i]);
        }
        if (t->svh) {
            memcpy(so + (size_t)e * out, t->svh, out * 2);
        } else {
            exl3_output_scales(t, f);
            for (size_t i = 0; i < out; i++)
                so[(size_t)e * out + i] = exl3_f16_from_f64((double)f[i]);
        }
    }
    *trellis = put(u, tr, (size_t)E * words * 2);
    *suh = put(u, si, (size_t)E * in * 2);
    *svh = put(u, so, (size_t)E * out * 2);
    free(tr);
    free(si);
    free(so);
    free(f);
}

static void put_experts(up_ctx *u, const glm_config *c, const glm_layer_weights *L, cu_experts *x)
{
    int E = c->n_routed_experts;
    memset(x, 0, sizeof *x);
    if (fusable(c, L)) {
        const exl3_tensor *t = L->experts[0].gate.exl3;
        x->fused = 1;
        x->ex.n_experts = E;
        x->ex.hidden = c->hidden_size;
        x->ex.inter = c->moe_intermediate_size;
        x->ex.bits = t->bits;
        x->ex.codebook = (int)t->codebook;
        x->ex.swiglu_limit = c->swiglu_limit;
        stack_role(u, L, E, 0, &x->ex.gate_trellis, &x->ex.gate_suh, &x->ex.gate_svh);
        stack_role(u, L, E, 1, &x->ex.up_trellis, &x->ex.up_suh, &x->ex.up_svh);
        stack_role(u, L, E, 2, &x->ex.down_trellis, &x->ex.down_suh, &x->ex.down_svh);
        int K = c->num_experts_per_tok, rows = KERN_EXL3_MOE_MAX_PAIRS / K;
        size_t ws = kern_exl3_moe_workspace(&x->ex, rows, K);
        if (!u->w->moe_work && !u->failed) {
            u->w->moe_work_bytes = ws;
            u->w->moe_work = put(u, NULL, ws);
        } else if (ws > u->w->moe_work_bytes && !u->failed) {
            glm_error_set(u->err, GLM_ERR_UNSUPPORTED, "MoE layers of different widths are not "
                          "supported by the CUDA backend");
            u->failed = 1;
        }
        x->moe_work = u->w->moe_work;
        size_t pws = kern_exl3_moe_prefill_workspace(&x->ex, u->chunk, K);
        if (pws > u->w->moe_prefill_work_bytes)
            u->w->moe_prefill_work_bytes = pws;
        return;
    }
    eng_mat *tab = calloc((size_t)3 * E, sizeof *tab);
    if (!tab) {
        if (!u->failed)
            glm_error_set(u->err, GLM_ERR_NOMEM, "out of host memory uploading experts");
        u->failed = 1;
        return;
    }
    if (L->experts[0].gate.kind == GLM_W_EXL3)
        u->w->n_dequantized_experts++;
    for (int e = 0; e < E && !u->failed; e++) {
        const glm_weight *ws[3] = {&L->experts[e].gate, &L->experts[e].up, &L->experts[e].down};
        for (int j = 0; j < 3; j++) {
            if (ws[j]->kind == GLM_W_EXL3)
                put_dequantized(u, ws[j]->exl3, &tab[j * E + e]);
            else
                put_mat(u, ws[j], &tab[j * E + e]);
        }
    }
    x->gate = put(u, tab, (size_t)E * sizeof *tab);
    x->up = put(u, tab + E, (size_t)E * sizeof *tab);
    x->down = put(u, tab + 2 * E, (size_t)E * sizeof *tab);
    free(tab);
}

static void put_layer(up_ctx *u, const glm_config *c, int li, const glm_layer_weights *L, cu_layer *d)
{
    int kp = c->index_kpool, ID = c->index_head_dim, S = c->hc_mult;
    int mix = (2 + S) * S, K = c->kda_conv_kernel, C = c->kda_heads * c->kda_head_dim;
    memset(d, 0, sizeof *d);
    put_lin_as(u, &L->hc_attn_fn, &d->hc_attn_lin, 0); /* small, and the mix is sensitive */
    put_lin_as(u, &L->hc_ffn_fn, &d->hc_ffn_lin, 0);
    d->hc_attn_base = put_f32(u, L->hc_attn_base, (size_t)mix);
    d->hc_attn_scale = put_f32(u, L->hc_attn_scale, 3);
    d->hc_ffn_base = put_f32(u, L->hc_ffn_base, (size_t)mix);
    d->hc_ffn_scale = put_f32(u, L->hc_ffn_scale, 3);
    d->input_norm = put_f32(u, L->input_norm, (size_t)c->hidden_size);
    d->post_norm = put_f32(u, L->post_norm, (size_t)c->hidden_size);
    if (c->attn[li] == GLM_ATTN_KDA) {
        const glm_kda_weights *k = &L->kda;
        put_lin(u, &k->q_proj, &d->q_proj);
        put_lin(u, &k->k_proj, &d->k_proj);
        put_lin(u, &k->v_proj, &d->v_proj);
        put_lin(u, &k->f_a, &d->f_a);
        put_lin(u, &k->f_b, &d->f_b);
        put_lin(u, &k->b_proj, &d->b_proj);
        put_lin(u, &k->g_a, &d->g_a);
        put_lin(u, &k->g_b, &d->g_b);
        put_lin(u, &k->o_proj, &d->kda_o);
        d->q_conv = put_f32(u, k->q_conv, (size_t)C * K);
        d->k_conv = put_f32(u, k->k_conv, (size_t)C * K);
        d->v_conv = put_f32(u, k->v_conv, (size_t)C * K);
        d->A_log = put_f32(u, k->A_log, (size_t)c->kda_heads);
        d->dt_bias = put_f32(u, k->dt_bias, (size_t)C);
        d->o_norm = put_f32(u, k->o_norm, (size_t)c->kda_head_dim);
    } else {
        const glm_dsa_weights *a = &L->dsa;
        put_lin(u, &a->q_a, &d->q_a);
        put_lin(u, &a->q_b, &d->q_b);
        put_lin(u, &a->kv_a, &d->kv_a);
        put_mat(u, &a->kv_b, &d->kv_b);
        put_lin(u, &a->o_proj, &d->dsa_o);
        d->q_a_norm = put_f32(u, a->q_a_norm, (size_t)c->q_lora_rank);
        d->kv_a_norm = put_f32(u, a->kv_a_norm, (size_t)c->kv_lora_rank);
        d->has_indexer = a->has_indexer;
        if (a->has_indexer) {
            put_lin(u, &a->idx_wq_b, &d->idx_wq_b);
            put_lin(u, &a->idx_wk, &d->idx_wk);
            put_lin(u, &a->idx_weights, &d->idx_weights);
            put_lin(u, &a->idx_gate, &d->idx_gate);
            d->idx_k_norm_w = put_f32(u, a->idx_k_norm_w, (size_t)ID);
            d->idx_k_norm_b = put_f32(u, a->idx_k_norm_b, (size_t)ID);
            d->idx_ape = put_f32(u, a->idx_ape, (size_t)kp * ID);
        }
    }
    if (!c->moe[li] || L->has_shared)
        put_mlp(u, &L->mlp, &d->mlp);
    d->has_shared = L->has_shared;
    if (c->moe[li]) {
        put_lin_as(u, &L->router, &d->router, 0);
        d->router_bias = put_f32(u, L->router_bias, (size_t)c->n_routed_experts);
        put_experts(u, c, L, &d->experts);
    }
}

static glm_status walk(const glm_model *m, cu_weights *w, int dry, int q4, int chunk, glm_error *err)
{
    const glm_config *c = &m->cfg;
    up_ctx u = {.w = w, .dry = dry, .q4 = q4, .chunk = chunk, .err = err};
    w->layers = calloc((size_t)c->num_layers, sizeof *w->layers);
    if (!w->layers)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory uploading the weights");
    w->n_layers = c->num_layers;
    put_mat(&u, &m->w.embed, &w->embed);
    put_lin(&u, &m->w.lm_head, &w->lm_head);
    w->final_norm = put_f32(&u, m->w.final_norm, (size_t)c->hidden_size);
    for (int li = 0; li < c->num_layers && !u.failed; li++)
        put_layer(&u, c, li, &m->w.layers[li], &w->layers[li]);
    if (!u.failed && w->exl3_work_bytes)
        w->exl3_work = put(&u, NULL, w->exl3_work_bytes);
    if (!u.failed && w->moe_prefill_work_bytes) {
        w->moe_prefill_work = put(&u, NULL, w->moe_prefill_work_bytes);
        for (int li = 0; li < c->num_layers; li++)
            w->layers[li].experts.prefill_work = w->moe_prefill_work;
    }
    if (u.stage)
        kern_free(u.stage);
    w->dry_bytes = u.bytes;
    return u.failed ? (err && err->status ? err->status : GLM_ERR_NOMEM) : GLM_OK;
}

int cu_weights_dense_experts(const glm_model *m, int mtp)
{
    const glm_config *c = &m->cfg;
    for (int li = 0; li < c->num_layers && li < m->w.n_layers; li++)
        if (c->moe[li] && !fusable(c, &m->w.layers[li]))
            return 1;
    return mtp && m->w.has_mtp && c->n_routed_experts > 0 && !fusable(c, &m->w.mtp.layer);
}

size_t cu_weights_bytes(const glm_model *m, int dense_q4, int chunk)
{
    cu_weights w = {0};
    glm_error e = {0};
    walk(m, &w, 1, dense_q4, chunk, &e);
    size_t n = w.dry_bytes;
    free(w.layers);
    return n;
}

glm_status cu_weights_upload(const glm_model *m, int dense_q4, int chunk, cu_weights *w,
                             glm_error *err)
{
    memset(w, 0, sizeof *w);
    glm_status st = walk(m, w, 0, dense_q4, chunk, err);
    if (st)
        cu_weights_free(w);
    return st;
}

/* The MTP block: eh_proj, its three norms and a DSA layer as put_layer lays one out (the
 * config copy names layer 0 as DSA, MoE where the model routes experts). */
glm_status cu_weights_put_mtp(const glm_model *m, int dense_q4, int chunk, cu_weights *w, int dry,
                              size_t *bytes, glm_error *err)
{
    const glm_mtp_weights *x = &m->w.mtp;
    int D = m->cfg.hidden_size;
    if (!m->w.has_mtp)
        return glm_error_set(err, GLM_ERR_ARG, "%s has no MTP layer to upload", m->dir);
    if (!x->layer.dsa.has_indexer)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "the MTP layer (layers.%d) has no indexer "
                             "of its own, which the CUDA backend needs; use --backend cpu",
                             m->cfg.num_layers);
    glm_config *c = malloc(sizeof *c);
    cu_weights dw = {0};
    cu_weights *t = dry ? &dw : w;
    if (!c)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory uploading the MTP layer");
    *c = m->cfg;
    c->attn[0] = GLM_ATTN_DSA;
    c->moe[0] = c->n_routed_experts > 0;
    up_ctx u = {.w = t, .dry = dry, .q4 = dense_q4, .chunk = chunk, .err = err};
    size_t work = t->exl3_work_bytes, pwork = t->moe_prefill_work_bytes;
    put_lin(&u, &x->eh_proj, &t->mtp_eh_proj);
    t->mtp_enorm = put_f32(&u, x->enorm, (size_t)D);
    t->mtp_hnorm = put_f32(&u, x->hnorm, (size_t)D);
    t->mtp_head_norm = put_f32(&u, x->head_norm, (size_t)D);
    put_layer(&u, c, 0, &x->layer, &t->mtp_layer);
    if (!u.failed && !dry && t->exl3_work_bytes > work) /* a wider EXL3 product than the main's */
        t->exl3_work = put(&u, NULL, t->exl3_work_bytes);
    /* its grouped experts (a prefill chunk's catch-up) share the main layers' workspace, or
     * take a larger one of their own */
    if (!u.failed && !dry && t->moe_prefill_work_bytes > pwork)
        t->moe_prefill_work = put(&u, NULL, t->moe_prefill_work_bytes);
    if (!dry)
        t->mtp_layer.experts.prefill_work = t->moe_prefill_work;
    if (u.stage)
        kern_free(u.stage);
    free(c);
    if (bytes)
        *bytes = u.bytes;
    if (u.failed)
        return err && err->status ? err->status : GLM_ERR_NOMEM;
    t->has_mtp = !dry;
    return GLM_OK;
}

void cu_weights_free(cu_weights *w)
{
    for (size_t i = 0; i < w->n_allocs; i++)
        kern_free(w->allocs[i]);
    free(w->allocs);
    free(w->layers);
    memset(w, 0, sizeof *w);
}
#endif
