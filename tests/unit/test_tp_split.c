/* test_tp_split.c: Check suite for the weight split among 2, 3 and 4 ranks: on the tiny-A fixture
 * the LM head's vocabulary parts give exactly the one-rank logits and MLP parts summed in rank order
 * match one rank; EXL3 output parts are exact, input parts and EXL3 MLPs sum to one rank, bad cuts
 * refused; the whole forward among 2, 3 and 4 threads matches one rank, every rank's logits alike. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/blocks.h"
#include "cpu/forward.h"
#include "cpu/ops.h"
#include "model/exl3.h"
#include "model/model.h"
#include "tp/split.h"
#include "tests/common/check_main.h"

static glm_model *open_fixture(void)
{
    const char *src = getenv("GLMCHAT_SRCDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/tiny-A", src ? src : ".");
    glm_error err = {0};
    glm_model *m = glm_model_open(dir, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    return m;
}

static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = ((float)(seed >> 8) / (float)(1u << 24) - 0.5f) * 2.0f;
    }
}

START_TEST(parts_follow_each_other_the_first_ranks_taking_the_remainder)
{
    int64_t want3[3][2] = {{0, 2}, {2, 1}, {3, 1}};
    for (int r = 0; r < 3; r++) {
        tp_part p = tp_part_of(4, r, 3);
        ck_assert_int_eq(p.start, want3[r][0]);
        ck_assert_int_eq(p.count, want3[r][1]);
    }
    for (int world = 1; world <= TP_SPLIT_MAX_RANKS; world++) {
        int64_t next = 0;
        for (int r = 0; r < world; r++) {
            tp_part p = tp_part_of(512, r, world);
            ck_assert_int_eq(p.start, next);
            ck_assert_int_eq(p.count, 512 / world + (r < 512 % world));
            next += p.count;
        }
        ck_assert_int_eq(next, 512);
    }
}
END_TEST

/* world ranks' vocabulary parts of rows x: each output row is the same dot product on one rank
 * or several, so the parts are bit for bit the one-rank logits (512 among 3: 171, 171, 170). */
static void check_vocabulary_parts(int world)
{
    glm_model *m = open_fixture();
    const glm_weight *head = &m->w.lm_head;
    int D = m->cfg.hidden_size, V = (int)head->rows, T = 3;
    float *x = malloc(sizeof(float) * (size_t)T * D), *full = malloc(sizeof(float) * (size_t)T * V);
    float *part = malloc(sizeof(float) * (size_t)T * V);
    fill(x, (size_t)T * D, 7);
    ck_assert_int_eq(cpu_matmul(NULL, head, x, T, full), 0);
    glm_error err;
    int64_t covered = 0;
    for (int r = 0; r < world; r++) {
        glm_weight h;
        tp_part p = tp_part_of(V, r, world);
        ck_assert_msg(tp_split_rows(head, V, r, world, &h, &err) == GLM_OK, "%s", err.message);
        ck_assert_int_eq(h.rows, p.count);
        ck_assert_int_eq(cpu_matmul(NULL, &h, x, T, part), 0);
        for (int t = 0; t < T; t++)
            ck_assert_mem_eq(part + (size_t)t * p.count, full + (size_t)t * V + p.start,
                             sizeof(float) * (size_t)p.count);
        covered += p.count;
    }
    ck_assert_int_eq(covered, V);
    free(x);
    free(full);
    free(part);
    glm_model_close(m);
}

START_TEST(lm_head_vocabulary_parts_are_exact)
{
    check_vocabulary_parts(2);
    check_vocabulary_parts(3);
    check_vocabulary_parts(4);
}
END_TEST

/* world ranks' parts of a dense MLP (96 features: 32 each among 3, 24 among 4) or a shared expert
 * (32: 11, 11, 10 among 3), their partial outputs summed in rank order 0..world-1 as every rank
 * sums them: within 1e-6 of one rank's largest output. */
static double mlp_parts_worst(int world, int64_t shared_units)
{
    glm_model *m = open_fixture();
    const glm_config *c = &m->cfg;
    int li = 0;
    while (li < c->num_layers && (shared_units ? !c->moe[li] || !m->w.layers[li].has_shared : c->moe[li]))
        li++;
    ck_assert_int_lt(li, c->num_layers);
    const glm_mlp_weights *w = &m->w.layers[li].mlp;
    int64_t width = w->gate.rows, units = shared_units ? shared_units : c->intermediate_size;
    int D = c->hidden_size, T = 4;
    float *x = malloc(sizeof(float) * (size_t)T * D), *full = malloc(sizeof(float) * (size_t)T * D);
    float *sum = calloc((size_t)T * D, sizeof(float)), *part = malloc(sizeof(float) * (size_t)T * D);
    fill(x, (size_t)T * D, 11);
    ck_assert_int_eq(cpu_mlp(NULL, c, w, width, x, T, full, NULL), 0);
    glm_error err;
    for (int r = 0; r < world; r++) {
        glm_mlp_weights h = *w;
        tp_split_owned owned = {0};
        ck_assert_msg(tp_split_mlp(&h, units, r, world, &owned, &err) == GLM_OK, "%s", err.message);
        int64_t mine = tp_part_of(units, r, world).count * (width / units);
        ck_assert_int_eq(h.gate.rows, mine);
        ck_assert_int_eq(h.down.cols, mine);
        ck_assert_int_eq(cpu_mlp(NULL, c, &h, mine, x, T, part, NULL), 0);
        for (size_t i = 0; i < (size_t)T * D; i++)
            sum[i] = r == 0 ? part[i] : sum[i] + part[i]; /* rank order, as every rank sums */
        tp_split_owned_free(&owned);
    }
    double worst = 0, scale = 0;
    for (size_t i = 0; i < (size_t)T * D; i++)
        scale = fmax(scale, fabs(full[i]));
    for (size_t i = 0; i < (size_t)T * D; i++)
        worst = fmax(worst, fabs((double)sum[i] - full[i]) / scale);
    free(x);
    free(full);
    free(sum);
    free(part);
    glm_model_close(m);
    return worst;
}

START_TEST(mlp_parts_sum_to_the_full_mlp)
{
    for (int world = 2; world <= 4; world++) {
        double dense = mlp_parts_worst(world, 0), shared = mlp_parts_worst(world, 32);
        ck_assert_msg(dense < 1e-6, "%d ranks: rank-order sum differs from one rank by %g", world, dense);
        ck_assert_msg(shared < 1e-6, "%d ranks: shared expert differs by %g", world, shared);
        printf("mlp split among %d: worst difference %.3g of the largest output (shared expert %.3g)\n",
               world, dense, shared);
    }
}
END_TEST

START_TEST(unsplittable_shapes_are_refused)
{
    glm_weight w = {.name = "odd", .kind = GLM_W_PLAIN, .dtype = ST_F32, .rows = 3, .cols = 4};
    float data[12] = {0};
    w.data = data;
    glm_weight h;
    float *owned;
    glm_error err;
    ck_assert_int_eq(tp_split_rows(&w, 3, 2, 3, &h, &err), GLM_OK); /* one row each */
    ck_assert_int_eq(h.rows, 1);
    ck_assert_ptr_eq(h.data, data + 8);
    ck_assert_int_eq(tp_split_rows(&w, 3, 0, 4, &h, &err), GLM_ERR_ARG);
    ck_assert_msg(strstr(err.message, "odd has 3 rows in 3 groups: it cannot be shared among 4 ranks"),
                  "%s", err.message);
    ck_assert_int_eq(tp_split_rows(&w, 2, 0, 2, &h, &err), GLM_ERR_ARG);
    ck_assert_msg(strstr(err.message, "odd has 3 rows, not a whole number of its 2 groups"), "%s", err.message);
    ck_assert_int_eq(tp_split_rows(&w, 3, 3, 3, &h, &err), GLM_ERR_ARG);
    ck_assert_int_eq(tp_split_cols(&w, 4, 1, 2, &h, &owned, &err), GLM_OK);
    ck_assert_int_eq(h.cols, 2);
    free(owned);
    ck_assert_int_eq(tp_split_cols(&w, 4, 2, 3, &h, &owned, &err), GLM_OK); /* 2, 1, 1 */
    ck_assert_int_eq(h.cols, 1);
    ck_assert(((const float *)h.data)[0] == data[3]);
    free(owned);
    w.kind = GLM_W_EXL3;
    ck_assert_int_eq(tp_split_cols(&w, 4, 0, 2, &h, &owned, &err), GLM_ERR_UNSUPPORTED);
}
END_TEST

/* ---- EXL3 ---------------------------------------------------------------------------------- */

/* A random [out, in] EXL3 weight (random trellis words and scales: any words decode, and the
 * split is about which words and scales each rank takes); buffers live in q (exl3_weight_free). */
typedef struct exl3_weight {
    exl3_tensor t;
    glm_weight w;
    uint16_t *bias;
} exl3_weight;

static void exl3_weight_make(exl3_weight *q, const char *name, int out, int in, unsigned seed)
{
    int bits = 4;
    size_t words = (size_t)(in / 16) * (size_t)(out / 16) * 16 * (size_t)bits;
    uint16_t *trellis = malloc(words * 2), *suh = malloc((size_t)in * 2), *svh = malloc((size_t)out * 2);
    ck_assert(trellis && suh && svh);
    for (size_t i = 0; i < words; i++) {
        seed = seed * 1103515245u + 12345u;
        trellis[i] = (uint16_t)(seed >> 12);
    }
    float *s = malloc(sizeof(float) * (size_t)(in + out));
    fill(s, (size_t)(in + out), seed);
    for (int i = 0; i < in; i++)
        suh[i] = exl3_f16_from_f64(s[i] < 0 ? s[i] - 0.5 : s[i] + 0.5);
    for (int i = 0; i < out; i++)
        svh[i] = exl3_f16_from_f64(0.02 * (s[in + i] + 1.5));
    free(s);
    q->t = (exl3_tensor){.in = in, .out = out, .bits = bits, .codebook = EXL3_CB_MCG,
                         .trellis = trellis, .suh = suh, .svh = svh};
    q->w = (glm_weight){.name = name, .kind = GLM_W_EXL3, .dtype = ST_I16, .rows = out, .cols = in,
                        .data = trellis, .exl3 = &q->t};
    q->bias = NULL;
}

static void exl3_weight_free(exl3_weight *q)
{
    free((void *)q->t.trellis);
    free((void *)q->t.suh);
    free((void *)q->t.svh);
    free(q->bias);
}

/* An [N, K] EXL3 weight's output parts among world ranks, N in `units` groups: exact. */
static void check_exl3_output_parts(int N, int64_t units, int world)
{
    exl3_weight q;
    exl3_weight_make(&q, "gate.trellis", N, 128, 5);
    int T = 3, K = 128;
    float *x = malloc(sizeof(float) * (size_t)T * K), *full = malloc(sizeof(float) * (size_t)T * N);
    float *part = malloc(sizeof(float) * (size_t)T * N);
    fill(x, (size_t)T * K, 9);
    ck_assert_int_eq(cpu_matmul(NULL, &q.w, x, T, full), 0);
    glm_error err;
    for (int r = 0; r < world; r++) {
        glm_weight h;
        void *owned;
        int64_t per = N / units, start = tp_part_of(units, r, world).start * per;
        int64_t n = tp_part_of(units, r, world).count * per;
        ck_assert_msg(tp_split_exl3(&q.w, units, r, world, 0, &h, &owned, &err) == GLM_OK, "%s", err.message);
        ck_assert_int_eq(h.rows, n);
        ck_assert_int_eq(h.cols, K);
        ck_assert_int_eq(cpu_matmul(NULL, &h, x, T, part), 0);
        for (int t = 0; t < T; t++)
            ck_assert_mem_eq(part + (size_t)t * n, full + (size_t)t * N + start, sizeof(float) * (size_t)n);
        free(owned);
    }
    free(x);
    free(full);
    free(part);
    exl3_weight_free(&q);
}

START_TEST(exl3_output_parts_are_exact)
{
    check_exl3_output_parts(256, 256, 2);
    check_exl3_output_parts(384, 384, 3);
    check_exl3_output_parts(512, 4, 3); /* four heads of 128: 256, 128, 128 */
}
END_TEST

/* A [128, K] EXL3 weight's input parts among world ranks (K in units of 1), summed in rank order. */
static void check_exl3_input_parts(int K, int world)
{
    exl3_weight q;
    exl3_weight_make(&q, "down.trellis", 128, K, 6);
    int T = 2, N = 128;
    q.bias = malloc(sizeof(uint16_t) * (size_t)N);
    for (int i = 0; i < N; i++)
        q.bias[i] = exl3_f16_from_f64(0.01 * (i % 7) - 0.03);
    q.t.bias = q.bias;
    float *x = malloc(sizeof(float) * (size_t)T * K), *full = malloc(sizeof(float) * (size_t)T * N);
    float *xh = malloc(sizeof(float) * (size_t)T * K);
    float *part = malloc(sizeof(float) * (size_t)T * N), *sum = malloc(sizeof(float) * (size_t)T * N);
    fill(x, (size_t)T * K, 10);
    ck_assert_int_eq(cpu_matmul(NULL, &q.w, x, T, full), 0);
    glm_error err;
    for (int r = 0; r < world; r++) {
        glm_weight h;
        void *owned;
        tp_part p = tp_part_of(K, r, world);
        ck_assert_msg(tp_split_exl3(&q.w, K, r, world, 1, &h, &owned, &err) == GLM_OK, "%s", err.message);
        ck_assert_int_eq(h.cols, p.count);
        ck_assert(r == 0 ? h.exl3->bias != NULL : h.exl3->bias == NULL);
        for (int t = 0; t < T; t++)
            memcpy(xh + (size_t)t * p.count, x + (size_t)t * K + p.start, sizeof(float) * (size_t)p.count);
        ck_assert_int_eq(cpu_matmul(NULL, &h, xh, T, part), 0);
        for (size_t i = 0; i < (size_t)T * N; i++)
            sum[i] = r == 0 ? part[i] : sum[i] + part[i];
        free(owned);
    }
    double worst = 0, scale = 0;
    for (size_t i = 0; i < (size_t)T * N; i++)
        scale = fmax(scale, fabs(full[i]));
    for (size_t i = 0; i < (size_t)T * N; i++)
        worst = fmax(worst, fabs((double)sum[i] - full[i]) / scale);
    ck_assert_msg(worst < 1e-6, "EXL3 input parts among %d differ from the whole by %g of the largest "
                  "output", world, worst);
    ck_assert_msg(worst > 0 || sum[0] != 0, "the partial products are empty");
    printf("exl3 input split among %d: worst difference %.3g of the largest output\n", world, worst);
    free(x);
    free(xh);
    free(full);
    free(part);
    free(sum);
    exl3_weight_free(&q);
}

START_TEST(exl3_input_parts_sum_to_the_whole)
{
    check_exl3_input_parts(256, 2);
    check_exl3_input_parts(384, 3);
    check_exl3_input_parts(512, 4);
}
END_TEST

START_TEST(exl3_mlp_parts_sum_to_the_full_mlp)
{
    glm_model *m = open_fixture(); /* for the config's SwiGLU settings only */
    int D = 128, I = 384, T = 3;
    exl3_weight g, u, d;
    exl3_weight_make(&g, "gate", I, D, 21);
    exl3_weight_make(&u, "up", I, D, 22);
    exl3_weight_make(&d, "down", D, I, 23);
    glm_mlp_weights w = {g.w, u.w, d.w};
    float *x = malloc(sizeof(float) * (size_t)T * D), *full = malloc(sizeof(float) * (size_t)T * D);
    float *part = malloc(sizeof(float) * (size_t)T * D), *sum = malloc(sizeof(float) * (size_t)T * D);
    fill(x, (size_t)T * D, 12);
    ck_assert_int_eq(cpu_mlp(NULL, &m->cfg, &w, I, x, T, full, NULL), 0);
    glm_error err;
    for (int r = 0; r < 3; r++) {
        glm_mlp_weights h = w;
        tp_split_owned owned = {0};
        ck_assert_msg(tp_split_mlp(&h, I, r, 3, &owned, &err) == GLM_OK, "%s", err.message);
        ck_assert_int_eq(owned.n, 3);
        ck_assert_int_eq(cpu_mlp(NULL, &m->cfg, &h, I / 3, x, T, part, NULL), 0);
        for (size_t i = 0; i < (size_t)T * D; i++)
            sum[i] = r == 0 ? part[i] : sum[i] + part[i];
        tp_split_owned_free(&owned);
    }
    double worst = 0, scale = 0;
    for (size_t i = 0; i < (size_t)T * D; i++)
        scale = fmax(scale, fabs(full[i]));
    for (size_t i = 0; i < (size_t)T * D; i++)
        worst = fmax(worst, fabs((double)sum[i] - full[i]) / scale);
    ck_assert_msg(worst < 1e-6, "EXL3 MLP parts differ from the whole by %g of the largest output", worst);
    printf("exl3 mlp split among 3: worst difference %.3g of the largest output\n", worst);
    free(x);
    free(full);
    free(part);
    free(sum);
    exl3_weight_free(&g);
    exl3_weight_free(&u);
    exl3_weight_free(&d);
    glm_model_close(m);
}
END_TEST

START_TEST(exl3_cuts_inside_a_hadamard_block_are_refused)
{
    exl3_weight q;
    exl3_weight_make(&q, "layers.1.mlp.experts.0.gate_proj.trellis", 128, 256, 7);
    glm_weight h;
    void *owned = (void *)1;
    glm_error err;
    ck_assert_int_eq(tp_split_exl3(&q.w, 128, 0, 2, 0, &h, &owned, &err), GLM_ERR_UNSUPPORTED);
    ck_assert_ptr_null(owned);
    ck_assert_msg(strstr(err.message, "layers.1.mlp.experts.0.gate_proj.trellis: EXL3 weights [128 out, "
                                      "256 in]") && strstr(err.message, "rank 0's 64 from 0 are not whole "
                                      "blocks of 128"), "%s", err.message);
    ck_assert_int_eq(tp_split_exl3(&q.w, 256, 1, 2, 1, &h, &owned, &err), GLM_OK); /* 256 inputs halve */
    free(owned);
    /* among 3, rank 2's cut is refused on rank 0 too: every rank refuses alike */
    ck_assert_int_eq(tp_split_exl3(&q.w, 256, 0, 3, 1, &h, &owned, &err), GLM_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.message, "among 3 ranks by inputs: rank 0's 86 from 0"), "%s", err.message);
    glm_mlp_weights w = {q.w, q.w, q.w};
    tp_split_owned o = {0};
    ck_assert_int_eq(tp_split_mlp(&w, 128, 0, 2, &o, &err), GLM_ERR_UNSUPPORTED);
    tp_split_owned_free(&o);
    exl3_weight_free(&q);
}
END_TEST

/* ---- the whole forward among N ranks, one thread each ------------------------------------- */

#define FWD_TOKENS 12
#define FWD_PREFILL 7

/* The ranks' exchanges in memory: each posts its buffer, all read every rank's in rank order. */
typedef struct board {
    pthread_barrier_t bar;
    int world;
    const float *piece[TP_SPLIT_MAX_RANKS];
} board;

typedef struct rank_run {
    board *b;
    int rank;
    glm_model *m;
    tp_split_owned owned;
    float *logits; /* FWD_TOKENS - FWD_PREFILL + 1 rows: after the prefill, then each decode */
    glm_error err;
    glm_status st;
    /* rank 0's cancel, set before the run (NULL: none): each rank first prefills into a cancel
     * and records how it ended (a worker's flag stays 0, as glm_session_new gives it one) */
    atomic_int *cancel;
    glm_status canceled;
    int length_after;
    char canceled_msg[sizeof(glm_error){0}.message];
} rank_run;

static glm_status board_gather(void *user, const float *mine, float *all, size_t n, glm_error *err)
{
    (void)err;
    rank_run *r = user;
    r->b->piece[r->rank] = mine;
    pthread_barrier_wait(&r->b->bar);
    for (int k = 0; k < r->b->world; k++)
        memcpy(all + (size_t)k * n, r->b->piece[k], n * sizeof *all);
    pthread_barrier_wait(&r->b->bar);
    return GLM_OK;
}

/* As tp_group_all_reduce: gathered, then summed in rank order 0..world-1 on every rank. */
static glm_status board_reduce(void *user, float *buf, size_t n, glm_error *err)
{
    rank_run *r = user;
    float *all = malloc((size_t)r->b->world * n * sizeof *all);
    ck_assert_ptr_nonnull(all);
    glm_status st = board_gather(user, buf, all, n, err);
    memcpy(buf, all, n * sizeof *buf);
    for (int k = 1; k < r->b->world; k++)
        for (size_t i = 0; i < n; i++)
            buf[i] += all[(size_t)k * n + i];
    free(all);
    return st;
}

static const int32_t fwd_tokens[FWD_TOKENS] = {1, 5, 9, 200, 17, 33, 2, 7, 100, 45, 3, 8};

/* A prefill of FWD_PREFILL tokens, then one decode at a time; the logits after each. */
static glm_status run_tokens(cpu_state *s, float *logits, size_t V, glm_error *err)
{
    glm_status st = cpu_prefill(s, NULL, fwd_tokens, FWD_PREFILL, logits, 0, err);
    for (int t = FWD_PREFILL; st == GLM_OK && t < FWD_TOKENS; t++)
        st = cpu_decode(s, NULL, fwd_tokens[t], logits + (size_t)(t - FWD_PREFILL + 1) * V, err);
    return st;
}

static void *rank_main(void *arg)
{
    rank_run *r = arg;
    cpu_state *s = cpu_state_new(r->m, &r->err);
    r->st = s ? GLM_OK : r->err.status;
    backend_collective coll = {.all_reduce = board_reduce, .all_gather = board_gather, .user = r,
                               .rank = r->rank, .world = r->b->world};
    atomic_int never;
    atomic_init(&never, 0);
    if (s && r->cancel) {
        cpu_state_set_cancel(s, r->rank == 0 ? r->cancel : &never);
        cpu_state_set_collective(s, &coll);
        glm_error e = {0};
        r->canceled = cpu_prefill(s, NULL, fwd_tokens, FWD_PREFILL, r->logits, 0, &e);
        snprintf(r->canceled_msg, sizeof r->canceled_msg, "%s", e.message);
        r->length_after = cpu_state_length(s);
        cpu_state_reset(s);
        if (r->rank == 0) /* read by this rank's own next exchange, so no other rank races it */
            atomic_store(r->cancel, 0);
    }
    if (s) {
        cpu_state_set_collective(s, &coll);
        r->st = run_tokens(s, r->logits, (size_t)r->m->cfg.vocab_size, &r->err);
    }
    cpu_state_free(s);
    return NULL;
}

/* tiny-A among world ranks (4 heads of each kind: 2, 1, 1 among 3; vocabulary 512: 171, 171,
 * 170): rank 0's logits within 1e-5 of one rank's largest, every rank's equal to rank 0's.
 * canceled: rank 0's cancel set first, and every rank's prefill into it must stop before the
 * first layer (the ranks agree through their flags' exchange) with nothing held, before the run
 * that is compared. */
static double whole_forward_among(int world, int canceled)
{
    glm_model *one = open_fixture();
    size_t V = (size_t)one->cfg.vocab_size, rows = FWD_TOKENS - FWD_PREFILL + 1;
    float *want = malloc(rows * V * sizeof *want);
    glm_error err;
    cpu_state *s = cpu_state_new(one, &err);
    ck_assert_msg(s && run_tokens(s, want, V, &err) == GLM_OK, "%s", err.message);
    cpu_state_free(s);
    board b = {.world = world};
    pthread_barrier_init(&b.bar, NULL, (unsigned)world);
    rank_run runs[TP_SPLIT_MAX_RANKS];
    pthread_t th[TP_SPLIT_MAX_RANKS];
    atomic_int cancel;
    atomic_init(&cancel, 1);
    for (int r = 0; r < world; r++) {
        runs[r] = (rank_run){.b = &b, .rank = r, .m = open_fixture(), .cancel = canceled ? &cancel : NULL};
        runs[r].logits = calloc(rows * V, sizeof(float));
        ck_assert_msg(tp_split_model_ranks(runs[r].m, r, world, &runs[r].owned, &err) == GLM_OK, "%s",
                      err.message);
        ck_assert_int_eq(runs[r].m->cfg.kda_heads, (int)tp_part_of(4, r, world).count);
    }
    for (int r = 0; r < world; r++)
        ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, &runs[r]), 0);
    for (int r = 0; r < world; r++)
        pthread_join(th[r], NULL);
    double scale = 0, worst = 0;
    for (size_t i = 0; i < rows * V; i++)
        scale = fmax(scale, fabs(want[i]));
    for (int r = 0; r < world && canceled; r++) {
        ck_assert_msg(runs[r].canceled == GLM_ERR_CANCELED && runs[r].length_after == 0 &&
                      strstr(runs[r].canceled_msg, "at layer 0 of"),
                      "rank %d of %d: the prefill under rank 0's cancel ended with status %d, "
                      "holding %d tokens: %s", r, world, (int)runs[r].canceled,
                      runs[r].length_after, runs[r].canceled_msg);
        ck_assert_str_eq(runs[r].canceled_msg, runs[0].canceled_msg);
    }
    for (int r = 0; r < world; r++) {
        ck_assert_msg(runs[r].st == GLM_OK, "rank %d: %s", r, runs[r].err.message);
        ck_assert_msg(memcmp(runs[r].logits, runs[0].logits, rows * V * sizeof(float)) == 0,
                      "rank %d's logits differ from rank 0's", r);
    }
    for (size_t i = 0; i < rows * V; i++)
        worst = fmax(worst, fabs((double)runs[0].logits[i] - want[i]) / scale);
    for (int r = 0; r < world; r++) {
        free(runs[r].logits);
        tp_split_owned_free(&runs[r].owned);
        glm_model_close(runs[r].m);
    }
    pthread_barrier_destroy(&b.bar);
    free(want);
    glm_model_close(one);
    return worst;
}

START_TEST(the_whole_forward_among_n_ranks_matches_one_rank)
{
    for (int world = 2; world <= 4; world++) {
        double worst = whole_forward_among(world, 0);
        ck_assert_msg(worst <= 1e-5, "%d ranks: logits differ from one rank by %g of the largest", world, worst);
        printf("tiny-A forward among %d ranks: worst difference %.3g of the largest logit\n", world, worst);
    }
}
END_TEST

/* A cancel on rank 0 alone (the head's user) stops every rank's prefill before the same layer,
 * no rank left waiting on another's exchange, and the ranks then run the tokens as one rank does. */
START_TEST(a_cancel_on_rank_0_stops_every_rank_at_the_same_layer)
{
    for (int world = 2; world <= 3; world++) {
        double worst = whole_forward_among(world, 1);
        ck_assert_msg(worst <= 1e-5, "%d ranks after a cancel: logits differ from one rank by %g",
                      world, worst);
    }
}
END_TEST

/* The tap's hook sets the cancel once layer 2 has run: a cancel within a prefill, deterministic. */
static void cancel_at_layer_2(void *user, int layer, backend_tap_what what, int pos0, int T,
                              const void *vals, int per_row)
{
    (void)what, (void)pos0, (void)T, (void)vals, (void)per_row;
    if (layer == 2)
        atomic_store((atomic_int *)user, 1);
}

/* A prefill canceled within (after layers 0-2 ran, their KDA states moved on) goes back to a
 * mark made at its start: the state keeps its length and mark, and running the tokens again
 * gives the bits of a state that was never canceled. */
START_TEST(a_cancel_within_a_prefill_goes_back_to_the_mark)
{
    enum { P = 7, M = 5 }; /* FWD_PREFILL tokens held, then M more */
    glm_model *m = open_fixture();
    size_t V = (size_t)m->cfg.vocab_size;
    float *want = malloc(V * sizeof *want), *got = malloc(V * sizeof *got);
    glm_error err = {0};
    cpu_state *ref = cpu_state_new(m, &err), *s = cpu_state_new(m, &err);
    ck_assert_msg(ref && s, "%s", err.message);
    ck_assert_int_eq(cpu_prefill(ref, NULL, fwd_tokens, P, NULL, 0, &err), GLM_OK);
    ck_assert_int_eq(cpu_prefill(ref, NULL, fwd_tokens + P, M, want, 0, &err), GLM_OK);
    atomic_int flag;
    atomic_init(&flag, 0);
    backend_tap tap = {.fn = cancel_at_layer_2, .user = &flag};
    ck_assert_int_eq(cpu_prefill(s, NULL, fwd_tokens, P, NULL, 0, &err), GLM_OK);
    ck_assert_int_eq(cpu_state_mark(s, &err), GLM_OK);
    cpu_state_set_cancel(s, &flag);
    cpu_state_set_tap(s, &tap);
    glm_status st = cpu_prefill(s, NULL, fwd_tokens + P, M, got, 0, &err);
    ck_assert_msg(st == GLM_ERR_CANCELED && strstr(err.message, "at layer 3 of"), "%d: %s",
                  (int)st, err.message);
    ck_assert_int_eq(cpu_state_length(s), P);
    ck_assert_int_eq(cpu_state_mark_length(s), P);
    cpu_state_set_tap(s, NULL);
    atomic_store(&flag, 0);
    ck_assert_int_eq(cpu_prefill(s, NULL, fwd_tokens + P, M, got, 0, &err), GLM_OK);
    ck_assert_msg(memcmp(got, want, V * sizeof *got) == 0,
                  "the logits after a canceled prefill went back to its mark differ");
    /* a mark made before a reset belongs to other tokens: a prefill of others to the same
     * length, canceled within the next one, is not sent back to it (the caller resets) */
    int32_t others[P];
    for (int i = 0; i < P; i++)
        others[i] = fwd_tokens[FWD_TOKENS - 1 - i];
    ck_assert_int_eq(cpu_state_mark(s, &err), GLM_OK);
    cpu_state_reset(s);
    ck_assert_int_eq(cpu_state_mark_length(s), -1);
    ck_assert_int_eq(cpu_prefill(s, NULL, others, P, NULL, 0, &err), GLM_OK);
    cpu_state_set_tap(s, &tap);
    ck_assert_int_eq(cpu_prefill(s, NULL, fwd_tokens + P, M, got, 0, &err), GLM_ERR_CANCELED);
    ck_assert_int_ne(cpu_state_mark_length(s), P);
    cpu_state_free(ref);
    cpu_state_free(s);
    free(want);
    free(got);
    glm_model_close(m);
}
END_TEST

START_TEST(a_model_is_refused_more_ranks_than_heads)
{
    glm_model *m = open_fixture();
    tp_split_owned owned;
    glm_error err;
    ck_assert_int_eq(tp_split_model_ranks(m, 0, 5, &owned, &err), GLM_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.message, "linear_num_heads (KDA heads) is 4, fewer than the 5 ranks sharing it"),
                  "%s", err.message);
    ck_assert_int_eq(m->cfg.kda_heads, 4); /* untouched */
    ck_assert_int_eq(tp_split_model_ranks(m, 3, 3, &owned, &err), GLM_ERR_ARG);
    glm_model_close(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tp_split");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, parts_follow_each_other_the_first_ranks_taking_the_remainder);
    tcase_add_test(tc, lm_head_vocabulary_parts_are_exact);
    tcase_add_test(tc, mlp_parts_sum_to_the_full_mlp);
    tcase_add_test(tc, unsplittable_shapes_are_refused);
    tcase_add_test(tc, exl3_output_parts_are_exact);
    tcase_add_test(tc, exl3_input_parts_sum_to_the_whole);
    tcase_add_test(tc, exl3_mlp_parts_sum_to_the_full_mlp);
    tcase_add_test(tc, exl3_cuts_inside_a_hadamard_block_are_refused);
    tcase_add_test(tc, the_whole_forward_among_n_ranks_matches_one_rank);
    tcase_add_test(tc, a_cancel_on_rank_0_stops_every_rank_at_the_same_layer);
    tcase_add_test(tc, a_cancel_within_a_prefill_goes_back_to_the_mark);
    tcase_add_test(tc, a_model_is_refused_more_ranks_than_heads);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
