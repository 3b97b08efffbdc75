/* prefill_projection.c: each op group's FLOPs and bytes for one prefill chunk, and the chunk
 * projected onto a target machine (two DGX Sparks) from them and the times measured here.
 *
 * A weight product of `rows` rows, in -> out: 2 x rows x in x out FLOPs; bytes: the weights once
 * (in x out x their bytes; a chunk reads each weight once) and the rows in and out as f32.
 * The routed experts: 2 x rows x top-k x 3 x inter x hidden FLOPs; bytes: every expert the chunk
 * selects (E (1 - (1 - 1/E)^(rows x top-k)) of E on average for uniform routing) once, and the
 * pairs' fp16 inputs and f32 products. The KDA delta rule: 6 dk^2 FLOPs per head and row (S k,
 * the rank-one update, q S); bytes: ten passes over the rows' channels and the state in and out.
 * The latent attention: absorb, 4 x heads x selected x rank for scores and sums, expand, and the
 * indexer's pooled scores; bytes: kv_b, the cache rows up to the chunk's end once, the rows.
 * Projection per group (the same method as projection.c's decode one, with FLOPs beside bytes):
 * the group's floor on each machine is max(FLOPs / rate, bytes / bandwidth); a group that ran
 * at some fraction of its floor here is taken to run at the same fraction there (pessimistic
 * where its time here went to integer work: the target's tensor rate and bandwidth shrink far
 * more than its multiprocessors), or its time here scaled by the work and the multiprocessors
 * (optimistic); the header gives both formulas. */
#include "model/prefill_projection.h"

#include <math.h>
#include <string.h>

const char *const glm_prefill_group_names[GLM_PF_GROUPS] = {
    "routed experts", "dense weight products", "KDA conv, gates, delta rule", "latent attention + indexer",
    "norms, HC, routing, sums (as memory)",
};

static const char *const experts_labels[] = {"the EXL3 experts (grouped by expert)",
                                             "the EXL3 experts", "the routed experts", NULL};
static const char *const dense_labels[] = {
    "the KDA q projection", "the KDA k projection", "the KDA v projection",
    "the KDA forget gate (a)", "the KDA forget gate (b)", "the KDA beta projection",
    "the KDA output gate (a)", "the KDA output gate (b)", "the KDA output projection",
    "the MLA q_a projection", "the MLA q_b projection", "the MLA kv_a projection",
    "the MLA output projection", "the indexer query projection", "the indexer key projection",
    "the indexer gate projection", "the indexer head weights", "the router",
    "an MLP gate projection", "an MLP up projection", "an MLP down projection",
    "the HC mixing product", "the HC input norm and mixing product", "the LM head", NULL};
static const char *const kda_labels[] = {"the KDA conv and q/k norms", "the KDA gates",
                                         "the KDA delta rule", "the KDA gated norm", NULL};
static const char *const attention_labels[] = {"the absorbed query", "the latent attention",
                                               "the value expansion", "the indexer's top-k", NULL};

glm_prefill_group glm_prefill_group_of(const char *label)
{
    const char *const *lists[] = {experts_labels, dense_labels, kda_labels, attention_labels};
    for (int g = 0; g < 4; g++)
        for (const char *const *l = lists[g]; *l; l++)
            if (strcmp(*l, label) == 0)
                return (glm_prefill_group)g;
    return GLM_PF_REST;
}

/* A weight product of rows rows, in -> out, weights of wbytes bytes a value. */
static void product(double *flops, double *bytes, double rows, double in, double out, double wbytes)
{
    *flops += 2 * rows * in * out;
    *bytes += in * out * wbytes + rows * (in + out) * 4;
}

static void kda_layer(const glm_config *c, double T, double wb, double *fl, double *by)
{
    double D = c->hidden_size, H = c->kda_heads, dk = c->kda_head_dim, C = H * dk;
    double *f = &fl[GLM_PF_DENSE], *b = &by[GLM_PF_DENSE];
    product(f, b, T, D, C, wb); /* q, k, v */
    product(f, b, T, D, C, wb);
    product(f, b, T, D, C, wb);
    product(f, b, T, D, dk, wb); /* forget gate a, b */
    product(f, b, T, dk, C, wb);
    product(f, b, T, D, H, wb);  /* beta */
    product(f, b, T, D, dk, wb); /* output gate a, b */
    product(f, b, T, dk, C, wb);
    product(f, b, T, C, D, wb);  /* output */
    fl[GLM_PF_KDA] += T * 6 * H * dk * dk;
    by[GLM_PF_KDA] += T * C * 4 * 10 + 2 * H * dk * dk * 4;
}

static void dsa_layer(const glm_config *c, double T, double pos, const glm_prefill_format *fm,
                      double *fl, double *by)
{
    double D = c->hidden_size, NH = c->num_heads, dn = c->qk_nope_head_dim, dv = c->v_head_dim;
    double R = c->kv_lora_rank, qr = c->q_lora_rank, IH = c->index_n_heads, ID = c->index_head_dim;
    double kp = c->index_kpool > 0 ? c->index_kpool : 1, wb = fm->dense_bytes;
    double *f = &fl[GLM_PF_DENSE], *b = &by[GLM_PF_DENSE];
    product(f, b, T, D, qr, wb);
    product(f, b, T, qr, NH * dn, wb);
    product(f, b, T, D, R, wb);
    product(f, b, T, NH * dv, D, wb);
    product(f, b, T, qr, IH * ID, wb); /* the indexer: query, key, gate, head weights */
    product(f, b, T, D, ID, wb);
    product(f, b, T, D, ID, wb);
    product(f, b, T, D, IH, wb);
    double mid = pos + T / 2;          /* the chunk's rows see mid positions on average */
    double sel = fmin(mid + 1, c->index_topk + kp - 1);
    fl[GLM_PF_ATTENTION] += T * (2 * NH * dn * R + 4 * NH * sel * R + 2 * NH * R * dv +
                                 2 * IH * ID * (mid / kp));
    double end = pos + T;
    by[GLM_PF_ATTENTION] += NH * (dn + dv) * R * 2 + end * (R * fm->cache_bytes + 4) +
                            end / kp * (ID * fm->cache_bytes + 4) + T * NH * (dn + 2 * R + dv) * 4;
}

static void ffn_layer(const glm_config *c, int li, double T, const glm_prefill_format *fm,
                      double *fl, double *by)
{
    double D = c->hidden_size, wb = fm->dense_bytes;
    double *f = &fl[GLM_PF_DENSE], *b = &by[GLM_PF_DENSE];
    if (!c->moe[li]) {
        double inter = c->intermediate_size;
        product(f, b, T, D, inter, wb);
        product(f, b, T, D, inter, wb);
        product(f, b, T, inter, D, wb);
        return;
    }
    double E = c->n_routed_experts, K = c->num_experts_per_tok, I = c->moe_intermediate_size;
    double shared = I * (c->n_shared_experts > 0 ? c->n_shared_experts : 0);
    product(f, b, T, D, E, 2); /* the router (bf16, as shipped) */
    if (shared > 0) {
        product(f, b, T, D, shared, wb);
        product(f, b, T, D, shared, wb);
        product(f, b, T, shared, D, wb);
    }
    double pairs = T * K, selected = E * (1 - pow(1 - 1 / E, pairs));
    fl[GLM_PF_EXPERTS] += 2 * pairs * 3 * I * D;
    by[GLM_PF_EXPERTS] += selected * 3 * I * D * fm->expert_bits / 8 +
                          pairs * (2 * D * 2 + 2 * I * 4 + I * 2 + D * 4) + 2 * T * D * 4;
}

void glm_prefill_costs(const glm_config *c, int rows, double pos, const glm_prefill_format *f,
                       double flops[GLM_PF_GROUPS], double bytes[GLM_PF_GROUPS])
{
    for (int g = 0; g < GLM_PF_GROUPS; g++)
        flops[g] = bytes[g] = 0;
    double T = rows, D = c->hidden_size, S = c->hc_mult, mix = (2 + S) * S;
    for (int li = 0; li < c->num_layers; li++) {
        /* the two HC mixing products (f32 weights; fused with the input norm, the same bytes) */
        product(&flops[GLM_PF_DENSE], &bytes[GLM_PF_DENSE], T, S * D, mix, 4);
        product(&flops[GLM_PF_DENSE], &bytes[GLM_PF_DENSE], T, S * D, mix, 4);
        if (c->attn[li] == GLM_ATTN_KDA)
            kda_layer(c, T, f->dense_bytes, flops, bytes);
        else
            dsa_layer(c, T, pos, f, flops, bytes);
        ffn_layer(c, li, T, f, flops, bytes);
    }
}

void glm_project_prefill_group(double measured_us, double here_flops, double here_bytes,
                               const glm_prefill_here *h, double target_flops, double target_bytes,
                               double rest_scale, const glm_prefill_target *t, double *floor_us,
                               double *at_eff_us, double *by_sm_us)
{
    double here = fmax(h->flops_per_s > 0 ? here_flops / h->flops_per_s : 0,
                       h->bytes_per_s > 0 ? here_bytes / h->bytes_per_s : 0) * 1e6;
    double there = fmax(target_flops / t->flops_per_s, target_bytes / t->bytes_per_s) * 1e6;
    double sm_ratio = (double)h->sms / t->sms;
    *floor_us = there;
    if (here > 0) {
        double work = fmax(h->flops_per_s > 0 ? target_flops / h->flops_per_s : 0,
                           h->bytes_per_s > 0 ? target_bytes / h->bytes_per_s : 0) * 1e6 / here;
        *at_eff_us = there * measured_us / here;
        *by_sm_us = fmax(there, measured_us * work * sm_ratio);
    } else {
        *at_eff_us = measured_us * rest_scale * h->bytes_per_s / t->bytes_per_s;
        *by_sm_us = measured_us * rest_scale * sm_ratio;
    }
}

double glm_prefill_exchange_us(const glm_prefill_target *t, int layers, int rows, int hidden)
{
    double bytes = (double)rows * hidden * 4;
    return 2.0 * layers * (bytes / t->link_bytes_per_s * 1e6 + t->exchange_us);
}
