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
 * Tensor work: each product's FLOPs times the parts its kernel splits an operand into (the
 * format's; a dense BF16 product in two fp16 parts does its FLOPs twice), the KDA delta rule and
 * the f32 HC mixing products once (FMA pipes, not parts).
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

/* The chunk's sums, each group's three (glm_prefill_costs' arrays). */
typedef struct costs {
    double *fl, *tn, *by;
} costs;

/* A format's parts, 0 read as 1. */
static double parts(double p)
{
    return p > 0 ? p : 1;
}

/* FLOPs of group g done `p` times over on the tensor cores. */
static void work(costs *k, int g, double flops, double p)
{
    k->fl[g] += flops;
    k->tn[g] += flops * parts(p);
}

/* A weight product of rows rows, in -> out, weights of wbytes bytes a value, its input in p parts
 * (dense group). */
static void product(costs *k, double rows, double in, double out, double wbytes, double p)
{
    work(k, GLM_PF_DENSE, 2 * rows * in * out, p);
    k->by[GLM_PF_DENSE] += in * out * wbytes + rows * (in + out) * 4;
}

static void kda_layer(const glm_config *c, double T, const glm_prefill_format *fm, costs *k)
{
    double D = c->hidden_size, H = c->kda_heads, dk = c->kda_head_dim, C = H * dk;
    double wb = fm->dense_bytes, p = fm->dense_parts;
    product(k, T, D, C, wb, p); /* q, k, v */
    product(k, T, D, C, wb, p);
    product(k, T, D, C, wb, p);
    product(k, T, D, dk, wb, p); /* forget gate a, b */
    product(k, T, dk, C, wb, p);
    product(k, T, D, H, wb, p);  /* beta */
    product(k, T, D, dk, wb, p); /* output gate a, b */
    product(k, T, dk, C, wb, p);
    product(k, T, C, D, wb, p);  /* output */
    work(k, GLM_PF_KDA, T * 6 * H * dk * dk, 1);
    k->by[GLM_PF_KDA] += T * C * 4 * 10 + 2 * H * dk * dk * 4;
}

static void dsa_layer(const glm_config *c, double T, double pos, const glm_prefill_format *fm,
                      costs *k)
{
    double D = c->hidden_size, NH = c->num_heads, dn = c->qk_nope_head_dim, dv = c->v_head_dim;
    double R = c->kv_lora_rank, qr = c->q_lora_rank, IH = c->index_n_heads, ID = c->index_head_dim;
    double kp = c->index_kpool > 0 ? c->index_kpool : 1, wb = fm->dense_bytes, p = fm->dense_parts;
    product(k, T, D, qr, wb, p);
    product(k, T, qr, NH * dn, wb, p);
    product(k, T, D, R, wb, p);
    product(k, T, NH * dv, D, wb, p);
    product(k, T, qr, IH * ID, wb, p); /* the indexer: query, key, gate, head weights */
    product(k, T, D, ID, wb, p);
    product(k, T, D, ID, wb, p);
    product(k, T, D, IH, wb, p);
    double mid = pos + T / 2;          /* the chunk's rows see mid positions on average */
    double sel = fmin(mid + 1, c->index_topk + kp - 1);
    work(k, GLM_PF_ATTENTION, T * (2 * NH * dn * R + 2 * NH * R * dv), fm->absorb_parts);
    work(k, GLM_PF_ATTENTION, T * 4 * NH * sel * R, fm->attend_parts);
    work(k, GLM_PF_ATTENTION, T * 2 * IH * ID * (mid / kp), fm->index_parts);
    double end = pos + T;
    k->by[GLM_PF_ATTENTION] += NH * (dn + dv) * R * 2 + end * (R * fm->cache_bytes + 4) +
                               end / kp * (ID * fm->cache_bytes + 4) +
                               T * NH * (dn + 2 * R + dv) * 4;
}

static void ffn_layer(const glm_config *c, int li, double T, const glm_prefill_format *fm,
                      costs *k)
{
    double D = c->hidden_size, wb = fm->dense_bytes, p = fm->dense_parts;
    if (!c->moe[li]) {
        double inter = c->intermediate_size;
        product(k, T, D, inter, wb, p);
        product(k, T, D, inter, wb, p);
        product(k, T, inter, D, wb, p);
        return;
    }
    double E = c->n_routed_experts, K = c->num_experts_per_tok, I = c->moe_intermediate_size;
    double shared = I * (c->n_shared_experts > 0 ? c->n_shared_experts : 0);
    product(k, T, D, E, 2, p); /* the router (bf16, as shipped) */
    if (shared > 0) {
        product(k, T, D, shared, wb, p);
        product(k, T, D, shared, wb, p);
        product(k, T, shared, D, wb, p);
    }
    double pairs = T * K, selected = E * (1 - pow(1 - 1 / E, pairs));
    work(k, GLM_PF_EXPERTS, 2 * pairs * 3 * I * D, 1); /* fp16 inputs against decoded weights */
    k->by[GLM_PF_EXPERTS] += selected * 3 * I * D * fm->expert_bits / 8 +
                             pairs * (2 * D * 2 + 2 * I * 4 + I * 2 + D * 4) + 2 * T * D * 4;
}

void glm_prefill_costs(const glm_config *c, int rows, double pos, const glm_prefill_format *f,
                       double flops[GLM_PF_GROUPS], double tensor[GLM_PF_GROUPS],
                       double bytes[GLM_PF_GROUPS])
{
    for (int g = 0; g < GLM_PF_GROUPS; g++)
        flops[g] = tensor[g] = bytes[g] = 0;
    costs k = {flops, tensor, bytes};
    double T = rows, D = c->hidden_size, S = c->hc_mult, mix = (2 + S) * S;
    for (int li = 0; li < c->num_layers; li++) {
        /* the two HC mixing products (f32 weights on the FMA pipes; fused with the input norm,
         * the same bytes) */
        product(&k, T, S * D, mix, 4, 1);
        product(&k, T, S * D, mix, 4, 1);
        if (c->attn[li] == GLM_ATTN_KDA)
            kda_layer(c, T, f, &k);
        else
            dsa_layer(c, T, pos, f, &k);
        ffn_layer(c, li, T, f, &k);
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
    return 2.0 * layers * (bytes / t->link_bytes_per_s * 1e6 + t->exchange_us) +
           layers * (4 / t->link_bytes_per_s * 1e6 + t->exchange_us);
}

double glm_prefill_exchange_halves_us(const glm_prefill_target *t, int layers, int half_rows,
                                      int hidden, double compute_us)
{
    double e = (double)half_rows * hidden * 4 / t->link_bytes_per_s * 1e6 + t->exchange_us;
    double phases = 4.0 * layers, phase = compute_us / phases;
    return (phases - 1) * fmax(0, e - phase) + e +
           layers * (4 / t->link_bytes_per_s * 1e6 + t->exchange_us);
}
