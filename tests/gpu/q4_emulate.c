/* q4_emulate.c: the CUDA backend's q4 dense option (GLMCHAT_CUDA_DENSE=q4) emulated on the CPU:
 * the same linears replaced by their dequantized 4-bit values, CPU logits of a prompt against
 * those of the stored weights; the CUDA q4 run's error (test_cuda_engine) should equal this one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model/exl3.h"
#include "model/model.h"

static int n_quantized, n_kept;

/* As eng_quantize_q4: per 32 columns s = fp16(amax / 7), w <- clamp(round(w / s), -7, 7) s; the
 * weight becomes F32 (the values need more bits than BF16 has). Widths not a multiple of 128
 * stay, as on the GPU. */
static int quantize(glm_weight *w)
{
    if (w->kind != GLM_W_PLAIN || (w->dtype != ST_BF16 && w->dtype != ST_F32))
        return 0;
    if (w->cols % 128) {
        n_kept++;
        return 0;
    }
    size_t n = (size_t)w->rows * (size_t)w->cols;
    float *d = malloc(n * sizeof *d);
    if (!d)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (w->dtype == ST_F32) {
            d[i] = ((const float *)w->data)[i];
        } else {
            uint32_t u = (uint32_t)((const uint16_t *)w->data)[i] << 16;
            memcpy(&d[i], &u, 4);
        }
    }
    for (size_t g = 0; g < n; g += 32) {
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(d[g + i]));
        float s = exl3_f16_to_f32(exl3_f16_from_f64((double)(amax / 7.0f)));
        for (int i = 0; i < 32; i++) {
            float q = s > 0 ? rintf(d[g + i] / s) : 0;
            d[g + i] = fminf(fmaxf(q, -7), 7) * s;
        }
    }
    w->data = d; /* kept until exit */
    w->dtype = ST_F32;
    n_quantized++;
    return 0;
}

/* The roles weights.c requantizes: attention, dense and shared MLPs, the LM head. */
static int quantize_model(glm_model *m)
{
    const glm_config *c = &m->cfg;
    int rc = 0;
    for (int li = 0; li < c->num_layers; li++) {
        glm_layer_weights *L = &m->w.layers[li];
        if (c->attn[li] == GLM_ATTN_KDA) {
            glm_kda_weights *k = &L->kda;
            glm_weight *ws[] = {&k->q_proj, &k->k_proj, &k->v_proj, &k->f_a,  &k->f_b,
                                &k->b_proj, &k->g_a,    &k->g_b,    &k->o_proj};
            for (int i = 0; i < 9; i++)
                rc |= quantize(ws[i]);
        } else {
            glm_dsa_weights *a = &L->dsa;
            glm_weight *ws[] = {&a->q_a, &a->q_b, &a->kv_a, &a->o_proj, &a->idx_wq_b, &a->idx_wk,
                                &a->idx_weights, &a->idx_gate};
            for (int i = 0; i < (a->has_indexer ? 8 : 4); i++)
                rc |= quantize(ws[i]);
        }
        if (!c->moe[li] || L->has_shared) {
            rc |= quantize(&L->mlp.gate);
            rc |= quantize(&L->mlp.up);
            rc |= quantize(&L->mlp.down);
        }
    }
    return rc | quantize(&m->w.lm_head);
}

static int logits(const glm_model *m, const int32_t *tok, int n, float *out, glm_error *err)
{
    engine_backend be;
    if (backend_open_cpu(m, 0, &be, err))
        return -1;
    void *st = be.ops->state_new(be.impl, err);
    int rc = st && be.ops->prefill(be.impl, st, tok, n, out, 1, err) == GLM_OK ? 0 : -1;
    if (st)
        be.ops->state_free(st);
    backend_close(&be);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: q4_emulate MODEL_DIR PROMPT_TOKENS\n");
        return 2;
    }
    int N = atoi(argv[2]);
    glm_error err = {0};
    glm_model *m = glm_model_open(argv[1], &err), *mq = m ? glm_model_open(argv[1], &err) : NULL;
    if (!m || !mq || N < 1) {
        fprintf(stderr, "q4_emulate: %s\n", m && mq ? "PROMPT_TOKENS must be >= 1" : err.message);
        return 1;
    }
    if (quantize_model(mq)) {
        fprintf(stderr, "q4_emulate: out of memory\n");
        return 1;
    }
    int V = m->cfg.vocab_size;
    int32_t *tok = malloc((size_t)N * sizeof *tok);
    float *a = malloc((size_t)N * V * sizeof *a), *b = malloc((size_t)N * V * sizeof *b);
    if (!tok || !a || !b)
        return 1;
    uint64_t x = 0x9e3779b97f4a7c15ull; /* test_cuda_engine's prompt */
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((x >> 33) % (uint64_t)(V < 4096 ? V : 4096));
    }
    if (logits(m, tok, N, a, &err) || logits(mq, tok, N, b, &err)) {
        fprintf(stderr, "q4_emulate: the CPU backend: %s\n", err.message);
        return 1;
    }
    double num = 0, den = 0, md = 0, mx = 1e-30;
    for (size_t i = 0; i < (size_t)N * V; i++) {
        double d = (double)b[i] - a[i];
        num += d * d;
        den += (double)a[i] * a[i];
        md = fmax(md, fabs(d));
        mx = fmax(mx, fabs(a[i]));
    }
    printf("%s: %d matrices q4, %d kept; CPU q4 emulation max|diff| %.3e (rel %.2e), "
           "|diff|/|ref| %.3e over all logits\n", argv[1], n_quantized, n_kept, md, md / mx,
           den > 0 ? sqrt(num / den) : 0.0);
    free(tok), free(a), free(b);
    glm_model_close(m);
    glm_model_close(mq);
    return 0;
}
