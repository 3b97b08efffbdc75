/* ffn.c: the feed-forward sub-blocks (architecture.md 2.6): SwiGLU with its clamp, the
 * sigmoid router with correction bias and expert groups, the routed experts and shared expert. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/blocks.h"

int cpu_mlp(cpu_pool *pool, const glm_config *c, const glm_mlp_weights *w, int64_t inter,
            const float *x, int T, float *out, const cpu_inputs *in)
{
    size_t n = (size_t)T * (size_t)inter;
    float *g = malloc(n * sizeof *g), *u = malloc(n * sizeof *u);
    int rc = -1;
    if (g && u && !cpu_matmul_in(pool, &w->gate, x, T, g, in) &&
        !cpu_matmul_in(pool, &w->up, x, T, u, in)) {
        float lim = c->swiglu_limit;
        for (size_t i = 0; i < n; i++) {
            float gi = fminf(g[i], lim);
            float ui = fminf(fmaxf(u[i], -lim), lim);
            g[i] = cpu_silu(gi) * ui;
        }
        rc = cpu_matmul_in(pool, &w->down, g, T, out, in);
    }
    free(g);
    free(u);
    return rc;
}

/* Index of the best of n candidates by score, skipping taken ones; ties: lowest index. */
static int best_of(const float *score, const float *taken, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (taken[i] == 0 && (best < 0 || score[i] > score[best]))
            best = i;
    return best;
}

void cpu_route(const glm_config *c, const float *logits, const float *bias, float *scratch,
               int *experts, float *weights)
{
    int E = c->n_routed_experts, G = c->n_group, per = E / G, K = c->num_experts_per_tok;
    float *prob = scratch, *choice = prob + E, *taken = choice + E, *gscore = taken + E;
    for (int e = 0; e < E; e++) {
        prob[e] = cpu_sigmoid(logits[e]);
        choice[e] = prob[e] + bias[e];
        taken[e] = 0;
    }
    /* group score: the sum of the group's two best choice scores; keep topk_group groups */
    for (int g = 0; g < G; g++) {
        const float *s = choice + g * per;
        int a = 0;
        for (int i = 1; i < per; i++)
            if (s[i] > s[a])
                a = i;
        int b = a == 0 ? 1 : 0;
        for (int i = 0; i < per; i++)
            if (i != a && s[i] > s[b])
                b = i;
        gscore[g] = s[a] + s[b];
    }
    for (int k = 0; k < c->topk_group; k++)
        taken[best_of(gscore, taken, G)] = 1;
    for (int e = 0; e < E; e++) /* experts of groups not kept are out of the race */
        if (taken[e / per] == 0)
            choice[e] = -INFINITY;
    for (int e = 0; e < E; e++)
        taken[e] = 0;
    float sum = 0;
    for (int k = 0; k < K; k++) {
        int e = best_of(choice, taken, E);
        taken[e] = 1;
        experts[k] = e;
        weights[k] = prob[e];
        sum += prob[e];
    }
    for (int k = 0; k < K; k++) {
        if (c->norm_topk_prob)
            weights[k] /= sum + 1e-20f;
        weights[k] *= c->routed_scaling_factor;
    }
}

int cpu_moe(cpu_pool *pool, const glm_config *c, const glm_layer_weights *w, const float *x, int T,
            float *out, const cpu_inputs *in)
{
    int E = c->n_routed_experts, K = c->num_experts_per_tok, D = c->hidden_size;
    float *logits = malloc((size_t)T * E * sizeof *logits);
    int *chosen = malloc((size_t)T * K * sizeof *chosen);
    float *cw = malloc((size_t)T * K * sizeof *cw);
    int *tok = malloc((size_t)T * sizeof *tok);
    float *tw = malloc((size_t)T * sizeof *tw);
    float *xe = malloc((size_t)T * D * sizeof *xe), *ye = malloc((size_t)T * D * sizeof *ye);
    float *scratch = malloc((size_t)(3 * E + c->n_group) * sizeof *scratch);
    int rc = -1;
    if (!logits || !chosen || !cw || !tok || !tw || !xe || !ye || !scratch)
        goto out;
    if (cpu_matmul_in(pool, &w->router, x, T, logits, in))
        goto out;
    for (int t = 0; t < T; t++)
        cpu_route(c, logits + (size_t)t * E, w->router_bias, scratch, chosen + t * K, cw + t * K);
    memset(out, 0, (size_t)T * D * sizeof *out);
    /* experts in index order, each over the tokens that chose it */
    for (int e = 0; e < E; e++) {
        int n = 0;
        for (int t = 0; t < T; t++)
            for (int k = 0; k < K; k++)
                if (chosen[t * K + k] == e) {
                    tok[n] = t;
                    tw[n] = cw[t * K + k];
                    memcpy(xe + (size_t)n * D, x + (size_t)t * D, (size_t)D * sizeof *xe);
                    n++;
                }
        if (!n)
            continue;
        /* never one part: the CUDA backend runs the routed experts in their own kernels */
        if (cpu_mlp(pool, c, &w->experts[e], c->moe_intermediate_size, xe, n, ye, NULL))
            goto out;
        for (int i = 0; i < n; i++)
            for (int d = 0; d < D; d++)
                out[(size_t)tok[i] * D + d] += tw[i] * ye[(size_t)i * D + d];
    }
    if (w->has_shared) {
        if (cpu_mlp(pool, c, &w->mlp, (int64_t)c->moe_intermediate_size * c->n_shared_experts, x, T,
                    ye, in))
            goto out;
        for (size_t i = 0; i < (size_t)T * D; i++)
            out[i] += ye[i];
    }
    rc = 0;
out:
    free(logits);
    free(chosen);
    free(cw);
    free(tok);
    free(tw);
    free(xe);
    free(ye);
    free(scratch);
    return rc;
}
