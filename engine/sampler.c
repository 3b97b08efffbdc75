/* sampler.c: greedy and sampled token choice (temperature, top-k, top-p, min-p) over one
 * logits row, with a splitmix64 generator seeded per reply. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct glm_sampler {
    glm_sampling p;
    int vocab;
    uint64_t rng;
    cand *c;
    double *prob;
};

uint64_t sampler_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double sampler_rng_uniform(uint64_t *state)
{
    return (double)(sampler_rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

glm_sampler *sampler_new(const glm_sampling *p, int vocab, glm_error *err)
{
    if (vocab <= 0 || p->top_k < 0 || p->top_p < 0 || p->top_p > 1 || p->min_p < 0 || p->min_p > 1 ||
        isnan(p->temperature)) {
        glm_error_set(err, GLM_ERR_ARG, "sampling settings out of range (temperature %g, top_p %g, "
                      "top_k %d, min_p %g): top_p and min_p lie in [0, 1], top_k >= 0",
                      (double)p->temperature, (double)p->top_p, p->top_k, (double)p->min_p);
        return NULL;
    }
    glm_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->c = malloc((size_t)vocab * sizeof *s->c);
        s->prob = malloc((size_t)vocab * sizeof *s->prob);
    }
    if (!s || !s->c || !s->prob) {
        sampler_free(s);
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory for the sampler");
        return NULL;
    }
    s->p = *p;
    s->vocab = vocab;
    s->rng = p->seed;
    return s;
}

void sampler_free(glm_sampler *s)
{
    if (!s)
        return;
    free(s->c);
    free(s->prob);
    free(s);
}

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->logit > y->logit)
        return -1;
    if (x->logit < y->logit)
        return 1;
    return (x->id > y->id) - (x->id < y->id);
}

int32_t glm_argmax(const float *logits, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

int32_t sampler_pick(glm_sampler *s, const float *logits)
{
    if (s->p.temperature <= 0)
        return glm_argmax(logits, s->vocab);
    int n = 0;
    for (int i = 0; i < s->vocab; i++) {
        if (isnan(logits[i]) || logits[i] == -INFINITY)
            continue;
        s->c[n].logit = logits[i] / s->p.temperature;
        s->c[n].id = i;
        n++;
    }
    if (n == 0)
        return glm_argmax(logits, s->vocab);
    qsort(s->c, (size_t)n, sizeof *s->c, cmp_cand);
    if (s->p.top_k > 0 && s->p.top_k < n)
        n = s->p.top_k;
    double sum = 0, mx = s->c[0].logit;
    for (int i = 0; i < n; i++) {
        s->prob[i] = exp((double)s->c[i].logit - mx);
        sum += s->prob[i];
    }
    for (int i = 0; i < n; i++)
        s->prob[i] /= sum;
    if (s->p.top_p > 0 && s->p.top_p < 1) { /* the smallest prefix reaching top_p */
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += s->prob[i];
            if (cum >= s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (s->p.min_p > 0) {
        double floor_p = s->p.min_p * s->prob[0];
        int keep = 1;
        while (keep < n && s->prob[keep] >= floor_p)
            keep++;
        n = keep;
    }
    sum = 0;
    for (int i = 0; i < n; i++)
        sum += s->prob[i];
    double u = sampler_rng_uniform(&s->rng) * sum, cum = 0;
    for (int i = 0; i < n; i++) {
        cum += s->prob[i];
        if (u < cum)
            return s->c[i].id;
    }
    return s->c[n - 1].id;
}
