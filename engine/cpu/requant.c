/* requant.c: a model view whose dense linears are float copies of their q4 values (requant.h),
 * made once when the CPU backend opens with --dense q4 and freed when it closes. */
#include "cpu/requant.h"

#include <stdlib.h>
#include <string.h>

typedef struct rq_ctx {
    cpu_requant *r;
    const cpu_requant_opts *o;
    glm_error *err;
    int failed;
} rq_ctx;

static int keep_owned(cpu_requant *r, float *p)
{
    if (r->n_owned == r->cap_owned) {
        int cap = r->cap_owned ? 2 * r->cap_owned : 64;
        float **grown = realloc(r->owned, (size_t)cap * sizeof *grown);
        if (!grown)
            return -1;
        r->owned = grown;
        r->cap_owned = cap;
    }
    r->owned[r->n_owned++] = p;
    return 0;
}

static double stored_bytes(const glm_weight *w)
{
    return (double)w->rows * (double)w->cols * (w->dtype == ST_F32 ? 4.0 : 2.0);
}

/* w's values as floats in d (n of them). */
static void to_float(const glm_weight *w, float *d, size_t n)
{
    if (w->dtype == ST_F32) {
        memcpy(d, w->data, n * sizeof *d);
        return;
    }
    const uint16_t *b = w->data;
    for (size_t i = 0; i < n; i++)
        d[i] = numfmt_bf16_value(b[i]);
}

/* w replaced by a float copy of its q4 values, where the GPU's loader would requantize it (or, with
 * min_width = the group, kv_b where the variant asks); 0 on success or where w is kept. */
static int requantize_wide(rq_ctx *x, glm_weight *w, int64_t min_width)
{
    const numfmt_q4 *q = &x->o->q;
    if (x->failed || w->kind != GLM_W_PLAIN || (w->dtype != ST_BF16 && w->dtype != ST_F32))
        return 0;
    if (w->cols % min_width) {
        x->r->n_kept++;
        x->r->dense_bytes += stored_bytes(w);
        return 0;
    }
    char why[256];
    if (numfmt_q4_check(q, w->cols, why, sizeof why)) {
        x->failed = 1;
        glm_error_set(x->err, GLM_ERR_ARG, "%s (%s)", why, w->name ? w->name : "a dense matrix");
        return -1;
    }
    size_t n = (size_t)w->rows * (size_t)w->cols;
    float *d = malloc(n * sizeof *d);
    if (!d || keep_owned(x->r, d)) {
        free(d);
        x->failed = 1;
        glm_error_set(x->err, GLM_ERR_NOMEM, "out of memory requantizing %s (%lld x %lld) to q4",
                      w->name ? w->name : "a dense matrix", (long long)w->rows, (long long)w->cols);
        return -1;
    }
    to_float(w, d, n);
    const double *H = x->o->hessian ? x->o->hessian(x->o->hessian_ctx, w) : NULL;
    if (H) {
        double damp = x->o->gptq_damp > 0 ? x->o->gptq_damp : 0.01;
        if (numfmt_q4_gptq(q, d, (size_t)w->rows, (size_t)w->cols, H, damp)) {
            x->failed = 1;
            glm_error_set(x->err, GLM_ERR_NOMEM,
                          "GPTQ on %s (%lld x %lld) failed: out of memory, or its calibration "
                          "Hessian is not positive definite even damped by %g of its diagonal",
                          w->name ? w->name : "a dense matrix", (long long)w->rows,
                          (long long)w->cols, damp);
            return -1;
        }
        x->r->n_gptq++;
    } else {
        numfmt_q4_round_rows(q, d, (size_t)w->rows, (size_t)w->cols);
    }
    x->r->dense_bytes += (double)n * numfmt_q4_bits(q, w->cols) / 8.0;
    w->data = d;
    w->dtype = ST_F32;
    x->r->n_requantized++;
    return 0;
}

static void requantize(rq_ctx *x, glm_weight *w)
{
    requantize_wide(x, w, 128);
}

/* A matrix the GPU keeps as stored, counted in the dense bytes. */
static void keep(rq_ctx *x, const glm_weight *w)
{
    if (w->kind == GLM_W_PLAIN && (w->dtype == ST_BF16 || w->dtype == ST_F32))
        x->r->dense_bytes += stored_bytes(w);
}

static void requantize_mlp(rq_ctx *x, glm_mlp_weights *m)
{
    requantize(x, &m->gate);
    requantize(x, &m->up);
    requantize(x, &m->down);
}

/* One layer as put_layer uploads it: kv_b, the HC products, the router and the experts stay. */
static void requantize_layer(rq_ctx *x, glm_attn_kind attn, int moe, glm_layer_weights *L)
{
    if (attn == GLM_ATTN_KDA) {
        glm_kda_weights *k = &L->kda;
        glm_weight *ws[] = {&k->q_proj, &k->k_proj, &k->v_proj, &k->f_a, &k->f_b,
                            &k->b_proj, &k->g_a,    &k->g_b,    &k->o_proj};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            requantize(x, ws[i]);
    } else {
        glm_dsa_weights *a = &L->dsa;
        glm_weight *ws[] = {&a->q_a, &a->q_b, &a->kv_a, &a->o_proj, &a->idx_wq_b, &a->idx_wk,
                            &a->idx_weights, &a->idx_gate};
        for (int i = 0; i < (a->has_indexer ? 8 : 4); i++)
            requantize(x, ws[i]);
        if (x->o->quant_kv_b)
            requantize_wide(x, &a->kv_b, x->o->q.group);
        else
            keep(x, &a->kv_b);
    }
    if (!moe || L->has_shared)
        requantize_mlp(x, &L->mlp);
}

void cpu_requant_free(cpu_requant *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n_owned; i++)
        free(r->owned[i]);
    free(r->owned);
    free(r->layers);
    free(r);
}

glm_status cpu_requant_make(const glm_model *m, const numfmt_q4 *q, cpu_requant **out,
                            glm_error *err)
{
    if (q->group < 1 || 128 % q->group) {
        *out = NULL;
        return glm_error_set(err, GLM_ERR_ARG, "q4 takes groups that divide 128, not %d",
                             q->group);
    }
    cpu_requant_opts o = {.q = *q};
    return cpu_requant_make_with(m, &o, out, err);
}

glm_status cpu_requant_make_with(const glm_model *m, const cpu_requant_opts *o, cpu_requant **out,
                                 glm_error *err)
{
    const glm_config *c = &m->cfg;
    *out = NULL;
    cpu_requant *r = calloc(1, sizeof *r);
    if (r)
        r->layers = malloc((size_t)(c->num_layers ? c->num_layers : 1) * sizeof *r->layers);
    if (!r || !r->layers) {
        cpu_requant_free(r);
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory requantizing the dense weights");
    }
    r->model = *m;
    memcpy(r->layers, m->w.layers, (size_t)c->num_layers * sizeof *r->layers);
    r->model.w.layers = r->layers;
    rq_ctx x = {.r = r, .o = o, .err = err};
    double before = r->dense_bytes;
    if (o->keep_head)
        keep(&x, &r->model.w.lm_head);
    else
        requantize(&x, &r->model.w.lm_head);
    r->head_bytes = r->dense_bytes - before;
    for (int li = 0; li < c->num_layers; li++)
        requantize_layer(&x, c->attn[li], c->moe[li], &r->layers[li]);
    if (m->w.has_mtp) { /* a DSA layer, MoE where the model routes experts (cu_weights_put_mtp) */
        requantize(&x, &r->model.w.mtp.eh_proj);
        requantize_layer(&x, GLM_ATTN_DSA, c->n_routed_experts > 0, &r->model.w.mtp.layer);
    }
    if (x.failed) {
        cpu_requant_free(r);
        return err && err->status ? err->status : GLM_ERR_NOMEM;
    }
    *out = r;
    return GLM_OK;
}
