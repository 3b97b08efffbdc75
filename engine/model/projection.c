/* projection.c: bounds a decode step on a target machine from the per-op times measured on this
 * one and the per-op bytes of model/traffic.c, and maps the CUDA decode profile's labels to ops.
 *
 * The method, per op (or group of ops timed together), per call:
 *   m      = target bytes / target bandwidth          (the op at the target's memory speed)
 *   t      = the measured time
 *   lower  = max(m, t)        the op is no faster than its bytes allow there, nor than it ran
 *                             here (the measuring GPU has more bandwidth and more SMs)
 *   excess = max(0, t - measured bytes / measured bandwidth)   the part of t that memory does
 *                             not explain: launches, latency, arithmetic
 *   upper  = max(m, t + excess * (measured SMs / target SMs - 1))   the same with that part
 *                             slower in proportion to the SMs (132 / 48 for H200 -> GB10)
 * The step: sum over ops of calls x bound, plus the exchanges (90 x 11 us for two Sparks): the
 * ranks exchange after every attention block and every FFN and wait for each. tok/s = 1e6 / us.
 * Each op's measured time is the whole (one-rank) op's, standing for a rank's half on the target. */
#include "model/projection.h"

#include <string.h>

void glm_project_op(const glm_projection_op *op, double measured_bytes_per_s, int measured_sms,
                    const glm_target *t, double *lower_us, double *upper_us)
{
    double m = op->target_bytes / t->bytes_per_s * 1e6;
    double measured = op->measured_us;
    double memory = measured_bytes_per_s > 0 ? op->measured_bytes / measured_bytes_per_s * 1e6 : 0;
    double excess = measured > memory ? measured - memory : 0;
    double slower = t->sms > 0 ? (double)measured_sms / t->sms - 1 : 0;
    double scaled = measured + excess * slower;
    *lower_us = m > measured ? m : measured;
    *upper_us = m > scaled ? m : scaled;
}

void glm_project_step(const glm_projection_op *ops, int n, double measured_bytes_per_s,
                      int measured_sms, const glm_target *t, double *lower_us, double *upper_us)
{
    double lo = t->exchanges * t->exchange_us, hi = lo;
    for (int i = 0; i < n; i++) {
        double l, u;
        glm_project_op(&ops[i], measured_bytes_per_s, measured_sms, t, &l, &u);
        lo += ops[i].calls * l;
        hi += ops[i].calls * u;
    }
    *lower_us = lo;
    *upper_us = hi;
}

/* ---- the decode profile's labels ----------------------------------------------------------- */

#define OP(x) (1ul << (x))

static const char *const l_embed[] = {"the embedding", NULL};
static const char *const l_hc[] = {"the HC mixing product (split)",
                                   "the HC update with the next mixing product",
                                   "the HC collapse and norm",
                                   "the HC Sinkhorn mix (on the side stream)", "the HC update", NULL};
static const char *const l_kda_in[] = {"the KDA products of the input", NULL};
static const char *const l_kda_step[] = {
    "the KDA gates' second products", "the KDA conv, norms, gates, delta rule and gated norm",
    "the KDA gates' second products, conv, norms, gates, delta rule and gated norm",
    "the KDA conv trail", /* a verification window's conv rows after each row */
    NULL};
static const char *const l_kda_o[] = {"the KDA output projection", NULL};
static const char *const l_mla_in[] = {"the MLA products of the input", NULL};
static const char *const l_mla_qa[] = {"the MLA products of q_a", NULL};
static const char *const l_mla_small[] = {"the q_a norm", "the kv_a norm", "the latent cache write",
                                          "the kv_a norm and the latent cache write",
                                          "the q_a and kv_a norms and the new cache rows", NULL};
static const char *const l_idx_small[] = {"the indexer key norm", "the indexer key cache",
                                          "the indexer gate cache", "the pool keys",
                                          "the indexer key norm and the key and gate caches", NULL};
static const char *const l_idx_score[] = {"the indexer's top-k", NULL};
static const char *const l_absorb[] = {"the absorbed query", NULL};
static const char *const l_latent[] = {"the latent attention", NULL};
static const char *const l_expand[] = {"the value expansion", NULL};
static const char *const l_mla_o[] = {"the MLA output projection", NULL};
static const char *const l_dense[] = {"an MLP gate/up product with SwiGLU", "an MLP down projection", NULL};
static const char *const l_router[] = {"the router", "the routing", "the router and the routing",
                                       NULL};
static const char *const l_shared[] = {"the shared gate/up (on the side stream)",
                                       "the shared down product (on the side stream)",
                                       "the shared expert's sum", NULL};
static const char *const l_routed[] = {"the EXL3 experts", NULL};
static const char *const l_final[] = {"the final norm", NULL};
/* the logits' copy to the host: the head's output (V / ranks floats, under a MB), a copy
 * engine's work; counted with the head, whose weight bytes bound the group on a Spark, rather
 * than as an unknown label's time that the upper bound would scale by the SM counts */
static const char *const l_head[] = {"the LM head", "the logits' copy", NULL};

const glm_projection_group glm_decode_groups[] = {
    {"embedding row", l_embed, OP(GLM_OP_EMBED), GLM_OP_EMBED},
    {"HC mix, collapse + norm, update", l_hc, OP(GLM_OP_HC_MIX) | OP(GLM_OP_HC_COLLAPSE) | OP(GLM_OP_HC_UPDATE),
     GLM_OP_HC_MIX},
    {"KDA q/k/v/f_a/g_a/beta", l_kda_in, OP(GLM_OP_KDA_PROJ), GLM_OP_KDA_PROJ},
    /* one group: the decode step folds f_b/g_b in where it can */
    {"KDA f_b/g_b, conv + state (fused step)", l_kda_step,
     OP(GLM_OP_KDA_GATES_B) | OP(GLM_OP_KDA_CONV) | OP(GLM_OP_KDA_STATE), GLM_OP_KDA_STATE},
    {"KDA o_proj", l_kda_o, OP(GLM_OP_KDA_O), GLM_OP_KDA_O},
    {"DSA q_a, kv_a, indexer wk/gate/weights", l_mla_in,
     OP(GLM_OP_DSA_Q_A) | OP(GLM_OP_DSA_KV_A) | OP(GLM_OP_INDEXER_IN), GLM_OP_DSA_Q_A},
    {"DSA q_b, indexer wq_b", l_mla_qa, OP(GLM_OP_DSA_Q_B) | OP(GLM_OP_INDEXER_Q), GLM_OP_DSA_Q_B},
    {"DSA norms, latent write", l_mla_small, 0, GLM_OP_DSA_KV_A},
    {"indexer key norm, caches, pools", l_idx_small, 0, GLM_OP_INDEXER_SCORE},
    {"indexer scores (pooled keys)", l_idx_score, OP(GLM_OP_INDEXER_SCORE), GLM_OP_INDEXER_SCORE},
    {"DSA kv_b key half (absorb)", l_absorb, OP(GLM_OP_DSA_KV_B_K), GLM_OP_DSA_KV_B_K},
    {"DSA latent cache reads", l_latent, OP(GLM_OP_LATENT), GLM_OP_LATENT},
    {"DSA kv_b value half (expand)", l_expand, OP(GLM_OP_DSA_KV_B_V), GLM_OP_DSA_KV_B_V},
    {"DSA o_proj", l_mla_o, OP(GLM_OP_DSA_O), GLM_OP_DSA_O},
    {"dense MLP", l_dense, OP(GLM_OP_DENSE_MLP), GLM_OP_DENSE_MLP},
    {"router + routing", l_router, OP(GLM_OP_ROUTER), GLM_OP_ROUTER},
    {"shared expert", l_shared, OP(GLM_OP_SHARED), GLM_OP_SHARED},
    {"routed experts (top-k)", l_routed, OP(GLM_OP_ROUTED), GLM_OP_ROUTED},
    {"final norm", l_final, OP(GLM_OP_FINAL_NORM), GLM_OP_FINAL_NORM},
    {"LM head", l_head, OP(GLM_OP_LM_HEAD), GLM_OP_LM_HEAD},
};
const int glm_decode_group_count = (int)(sizeof glm_decode_groups / sizeof *glm_decode_groups);
#define MAX_GROUPS 64
_Static_assert(sizeof glm_decode_groups / sizeof *glm_decode_groups <= MAX_GROUPS,
               "glm_projection_from_profile sums at most MAX_GROUPS groups");
_Static_assert(GLM_OP_COUNT <= 32, "a group's ops are bits of an unsigned long");

/* The group that takes label, or -1. */
static int group_of(const char *label)
{
    for (int g = 0; g < glm_decode_group_count; g++)
        for (const char *const *l = glm_decode_groups[g].labels; *l; l++)
            if (strcmp(*l, label) == 0)
                return g;
    return -1;
}

static double group_bytes(const glm_traffic_table *t, unsigned long ops)
{
    double b = 0;
    for (int op = 0; op < GLM_OP_COUNT; op++)
        if (ops & OP(op))
            b += t->op[op].bytes;
    return b;
}

int glm_projection_from_profile(const glm_label_time *times, int n_times, double time_scale,
                                const glm_traffic_table *measured, const glm_traffic_table *target,
                                glm_projection_op *out, const char **unknown, int max_unknown)
{
    int n_unknown = 0, G = glm_decode_group_count;
    double us[MAX_GROUPS] = {0}, other_us = 0;
    for (int i = 0; i < n_times; i++) {
        int g = group_of(times[i].label);
        if (g >= 0) {
            us[g] += times[i].us;
            continue;
        }
        other_us += times[i].us;
        if (unknown && n_unknown < max_unknown)
            unknown[n_unknown] = times[i].label;
        n_unknown++;
    }
    for (int g = 0; g < G; g++) {
        const glm_projection_group *grp = &glm_decode_groups[g];
        double mc = measured->op[grp->calls_of].calls, tc = target->op[grp->calls_of].calls;
        glm_projection_op *o = &out[g];
        o->name = grp->name;
        o->calls = tc;
        o->measured_us = mc > 0 ? us[g] * time_scale / mc : 0;
        o->measured_bytes = mc > 0 ? group_bytes(measured, grp->ops) / mc : 0;
        o->target_bytes = tc > 0 ? group_bytes(target, grp->ops) / tc : 0;
    }
    out[G] = (glm_projection_op){.name = "other labels (as measured)", .calls = 1,
                                 .measured_us = other_us * time_scale};
    return n_unknown;
}
