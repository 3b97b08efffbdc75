/* test_engine_util_draft.c: the engine test helpers that need no Check (test_engine_util.h), so
 * the GPU tests link them too: token sequences, logits compared, drafted replies against plain. */
#include "test_engine_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int32_t *tu_some_tokens(int n, uint64_t seed, int vocab)
{
    int32_t *t = malloc((size_t)(n > 0 ? n : 1) * sizeof *t);
    for (int i = 0; t && i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((seed >> 33) % (uint64_t)vocab);
    }
    return t;
}

float tu_max_abs_diff(const float *a, const float *b, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

int tu_keep_token(int32_t t, void *user)
{
    tu_tokens *k = user;
    if (k->n < TU_MAX_REPLY)
        k->v[k->n++] = t;
    return 0;
}

int tu_oracle_draft(const int32_t *ctx, int n, int32_t *out, int max, void *user)
{
    const tu_oracle *o = user;
    int at = n - o->n_prompt, k = 0; /* reply tokens the context holds */
    for (; k < max && at + k < o->reply->n; k++) {
        int32_t t = o->reply->v[at + k];
        uint32_t h = (uint32_t)(at + k) * 2654435761u;
        int wrong = o->wrong_until > 0 ? at + k < o->wrong_until : (h >> 16) % 5 == 0;
        out[k] = wrong ? (t + 1) % o->vocab : t;
    }
    (void)ctx;
    return k;
}

void tu_add_stats(spec_stats *all, const spec_stats *st)
{
    all->windows += st->windows;
    for (int i = 0; i < SPEC_MAX_DRAFT; i++) {
        all->proposed[i] += st->proposed[i];
        all->accepted[i] += st->accepted[i];
    }
}

void tu_print_acceptance(const spec_stats *st)
{
    printf("%lld windows, accepted/proposed by position:", (long long)st->windows);
    for (int i = 0; i < SPEC_MAX_DRAFT; i++)
        printf(" %lld/%lld", (long long)st->accepted[i], (long long)st->proposed[i]);
}

void tu_run_drafted(glm_engine *plain, glm_engine *drafted, const int32_t *prompt, int n_prompt,
                    const glm_sampling *smp, int max_new, int oracle_vocab, tu_drafted_run *r)
{
    tu_run_drafted_oracle(plain, drafted, prompt, n_prompt, smp, max_new, oracle_vocab, 0, r);
}

double tu_cost_flat(int rows, double measured_s, void *user)
{
    (void)rows, (void)measured_s, (void)user;
    return 1.0;
}

void tu_run_drafted_oracle(glm_engine *plain, glm_engine *drafted, const int32_t *prompt,
                           int n_prompt, const glm_sampling *smp, int max_new, int oracle_vocab,
                           int wrong_until, tu_drafted_run *r)
{
    tu_run_drafted_costed(plain, drafted, prompt, n_prompt, smp, max_new, oracle_vocab,
                          wrong_until, tu_cost_flat, NULL, r);
}

void tu_run_drafted_costed(glm_engine *plain, glm_engine *drafted, const int32_t *prompt,
                           int n_prompt, const glm_sampling *smp, int max_new, int oracle_vocab,
                           int wrong_until, glm_cost_fn cost, void *cost_user, tu_drafted_run *r)
{
    memset(r, 0, sizeof *r);
    int eos[] = {-1}, na = 0, nb = 0;
    glm_session *sa = glm_session_new(plain, &r->err);
    glm_session *sb = sa ? glm_session_new(drafted, &r->err) : NULL;
    if (!sb) {
        r->plain_st = r->drafted_st = r->err.status ? r->err.status : GLM_ERR_NOMEM;
        glm_session_free(sa);
        return;
    }
    tu_oracle o = {.reply = &r->plain, .n_prompt = n_prompt, .vocab = oracle_vocab,
                   .wrong_until = wrong_until};
    if (oracle_vocab > 0)
        session_set_drafter(sb, tu_oracle_draft, &o);
    session_set_forward_cost(sb, cost, cost_user);
    r->plain_st = glm_session_generate_tokens(sa, prompt, n_prompt, smp, eos, 1, max_new,
                                              tu_keep_token, &r->plain, &na, &r->err);
    if (r->plain_st == GLM_OK)
        r->drafted_st = glm_session_generate_tokens(sb, prompt, n_prompt, smp, eos, 1, max_new,
                                                    tu_keep_token, &r->drafted, &nb, &r->err);
    else
        r->drafted_st = r->plain_st;
    int ok = r->plain_st == GLM_OK && r->drafted_st == GLM_OK;
    r->same = ok && na == nb && r->plain.n == r->drafted.n &&
              memcmp(r->plain.v, r->drafted.v, (size_t)r->plain.n * sizeof *r->plain.v) == 0 &&
              glm_session_length(sa) == glm_session_length(sb);
    const float *la = ok ? glm_session_logits(sa) : NULL, *lb = ok ? glm_session_logits(sb) : NULL;
    r->logits_same = la && lb &&
                     memcmp(la, lb, (size_t)glm_session_vocab(sa) * sizeof *la) == 0;
    r->plain_windows = session_spec_stats(sa)->windows;
    r->stats = *session_spec_stats(sb);
    int32_t probe[4];
    r->mtp_drafts = ok ? session_mtp_draft(sb, prompt[0], probe, 4, NULL) : 0;
    glm_session_free(sa);
    glm_session_free(sb);
}
