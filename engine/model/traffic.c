/* traffic.c: counts the bytes a decode token reads (weights by their stored size, routed experts
 * by their expected share, the KDA states) and its matrix-product FLOPs, from the bound weights. */
#include "model/traffic.h"

double glm_weight_bytes(const glm_weight *w)
{
    double values = (double)w->rows * (double)w->cols;
    if (values <= 0)
        return 0;
    switch (w->kind) {
    case GLM_W_PLAIN:
        return values * (double)st_dtype_size(w->dtype);
    case GLM_W_FP8_BLOCK: {
        double blocks = w->block_rows > 0 && w->block_cols > 0
                            ? (double)((w->rows + w->block_rows - 1) / w->block_rows) *
                                  (double)((w->cols + w->block_cols - 1) / w->block_cols)
                            : 0;
        return values + 4 * blocks;
    }
    case GLM_W_EXL3: {
        const exl3_tensor *t = w->exl3;
        if (!t)
            return 0;
        /* trellis: bits per value; fp16 scale vectors (or sign bits) and the optional bias */
        double b = values * t->bits / 8.0;
        b += t->suh ? 2.0 * t->in : t->in / 8.0;
        b += t->svh ? 2.0 * t->out : t->out / 8.0;
        return b + (t->bias ? 2.0 * t->out : 0);
    }
    }
    return 0;
}

typedef struct tally {
    double bytes, flops;
} tally;

static void add(tally *t, const glm_weight *w, double share)
{
    t->bytes += share * glm_weight_bytes(w);
    t->flops += share * 2.0 * (double)w->rows * (double)w->cols;
}

static void add_mlp(tally *t, const glm_mlp_weights *m, double share)
{
    add(t, &m->gate, share);
    add(t, &m->up, share);
    add(t, &m->down, share);
}

static void add_attention(tally *t, const glm_config *c, const glm_layer_weights *l, int i)
{
    if (c->attn[i] == GLM_ATTN_KDA) {
        const glm_kda_weights *k = &l->kda;
        const glm_weight *ws[] = {&k->q_proj, &k->k_proj, &k->v_proj, &k->f_a, &k->f_b,
                                  &k->b_proj, &k->g_a, &k->g_b, &k->o_proj};
        for (size_t j = 0; j < sizeof ws / sizeof *ws; j++)
            add(t, ws[j], 1);
        return;
    }
    const glm_dsa_weights *d = &l->dsa;
    const glm_weight *ws[] = {&d->q_a, &d->q_b, &d->kv_a, &d->kv_b, &d->o_proj};
    for (size_t j = 0; j < sizeof ws / sizeof *ws; j++)
        add(t, ws[j], 1);
    if (d->has_indexer) {
        add(t, &d->idx_wq_b, 1);
        add(t, &d->idx_wk, 1);
        add(t, &d->idx_weights, 1);
        add(t, &d->idx_gate, 1);
    }
}

void glm_model_traffic(const glm_model *m, glm_traffic *out)
{
    const glm_config *c = &m->cfg;
    const glm_weights *w = &m->w;
    tally t = {0, 0};
    /* one embedding row, the whole head */
    if (w->embed.rows > 0)
        t.bytes += glm_weight_bytes(&w->embed) / (double)w->embed.rows;
    add(&t, &w->lm_head, 1);
    double expert_share = c->n_routed_experts > 0
                              ? (double)c->num_experts_per_tok / c->n_routed_experts : 0;
    for (int i = 0; i < w->n_layers; i++) {
        const glm_layer_weights *l = &w->layers[i];
        add(&t, &l->hc_attn_fn, 1);
        add(&t, &l->hc_ffn_fn, 1);
        add_attention(&t, c, l, i);
        if (!c->moe[i] || l->has_shared)
            add_mlp(&t, &l->mlp, 1);
        if (c->moe[i]) {
            add(&t, &l->router, 1);
            for (int e = 0; l->experts && e < c->n_routed_experts; e++)
                add_mlp(&t, &l->experts[e], expert_share);
        }
    }
    double state = (double)c->kda_heads * c->kda_head_dim * c->kda_head_dim * sizeof(float);
    out->weight_bytes = t.bytes;
    out->state_bytes = 2.0 * state * glm_config_count(c, GLM_ATTN_KDA);
    out->flops = t.flops;
}
