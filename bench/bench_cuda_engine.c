/* bench_cuda_engine.c: the CUDA backend on a model of GLM-5.3-Flash's real shapes built in memory
 * (BF16 dense weights, random 4-bit EXL3 experts, 3 KDA : 1 DSA).
 * Usage: bench_cuda_engine [LAYERS [PREFILL_SIZES [CHUNKS [POSITIONS]]]], the lists
 * comma-separated: LAYERS 16; PREFILL_SIZES "8192" (e.g. "8192,65536,262144"); CHUNKS "0" (the
 * memory plan's prefill chunk, or GLMCHAT_CUDA_CHUNK's; e.g. "1024,4096"); POSITIONS
 * "1024,65536,262144" (the decode step's context positions).
 * Decode per layer type and per step against the bandwidth floor (model/traffic.c's bytes / copy
 * bandwidth measured here), the whole step with plain launches against programmatic dependent
 * ones (the default); BENCH_NCU=1: one eager and one graph decode step between cudaProfilerStart
 * and cudaProfilerStop (for ncu --profile-from-start off), then it stops. Then the decode step at
 * each position (caches filled with synthetic rows, state_at), each op's share there and the
 * indexer's score and select kernels alone, and verification windows of 1-16 rows at the first
 * position beside the public engine's published window costs. Then prefill of each size at each
 * chunk (the backend reopened for each; a chunk the memory plan refuses is reported as "does not
 * fit" and skipped) against cuBLAS bf16 GEMM in the same run, with each op group's share of a
 * chunk and the chunk projected onto two Sparks (model/prefill_projection.c), and the smallest
 * size timed under each grouped EXL3 experts' kernel (their logits must agree bit for bit). Then
 * the two-Spark projection (model/projection.c) from the decode op profile's times, as the graph
 * runs the step (event record nodes between ops in a graph of its own) and, for comparison, as
 * one eager step (kernel by kernel from the host) runs it; last, with an
 * MTP block added to the model, the MTP drafts' time and the windows with its catch-up.
 * Long prompts: bench_cuda_engine --long LAYERS SIZES [LIMIT_S [EVERY]] (bench/long_prefill.h)
 * times each size alone from an empty session against an 8k prefill of the same run, with
 * progress lines and a time limit a size (a stopped size is reported as PARTIAL). */
#include <cublas_v2.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "tests/gpu/cuda_env.h"
#include "cuda/cuda_internal.h"
#include "decode_tables.h"
#include "bench/op_marks.h"
#include "bench/op_profile.h"
#include "long_prefill.h"
#include "model/exl3.h"
#include "model/prefill_projection.h"
#include "model/projection.h"
#include "model/traffic.h"
#include "bench/bench_clock.h"

#define RECIPE_TOKS 60.4
#define BENCH_WINDOW 1048576 /* the model's max_position_embeddings: no prompt is longer */

static void real_config(glm_config *c, int layers)
{
    memset(c, 0, sizeof *c);
    c->vocab_size = 154880, c->hidden_size = 4096, c->num_layers = layers;
    c->max_position_embeddings = BENCH_WINDOW, c->intermediate_size = 12288;
    c->moe_intermediate_size = 2048, c->rms_norm_eps = 1e-5f, c->swiglu_limit = 10.0f;
    c->hc_mult = 4, c->hc_sinkhorn_iters = 20, c->hc_eps = 1e-6f;
    c->kda_heads = 64, c->kda_head_dim = 128, c->kda_conv_kernel = 4;
    c->kda_has_lower_bound = 1, c->kda_lower_bound = -5.0f;
    c->num_heads = 64, c->q_lora_rank = 1536, c->kv_lora_rank = 512;
    c->qk_nope_head_dim = 256, c->v_head_dim = 256;
    c->index_n_heads = 32, c->index_head_dim = 128, c->index_topk = 2048, c->index_kpool = 4;
    c->n_routed_experts = 288, c->num_experts_per_tok = 8, c->n_shared_experts = 1;
    c->n_group = 1, c->topk_group = 1, c->norm_topk_prob = 1, c->routed_scaling_factor = 2.5f;
    for (int i = 0; i < layers; i++) {
        c->attn[i] = i % 4 == 3 ? GLM_ATTN_DSA : GLM_ATTN_KDA;
        c->moe[i] = i >= 1; /* layer 0 dense, as the first three of the real model */
    }
}

/* The model the projections are for: the real 45 layers, the first three dense. */
static void projected_config(glm_config *full)
{
    real_config(full, 45);
    full->moe[1] = full->moe[2] = 0; /* layers 0-2 dense (real_config: layer 0) */
}

/* The traffic parameters of this bench's run at a context: one rank, its dense format, 4-bit
 * experts, the plan's cache formats (what the projections count as measured). */
static glm_traffic_params bench_traffic(engine_backend *be, int context)
{
    const cuda_plan *pl = backend_cuda_plan(be);
    int q4 = ((const cuda_backend *)be->impl)->dense_q4;
    return (glm_traffic_params){.ranks = 1, .context = context,
                                .dense = q4 ? GLM_TRAFFIC_Q4_G32 : GLM_TRAFFIC_BF16,
                                .expert_bits = 4, .latent_cache = (glm_cache_format)pl->kv_dtype,
                                .index_cache = (glm_cache_format)pl->kv_index_dtype};
}

/* One shared random BF16 pool: every dense matrix views its start (timing needs the bytes,
 * not distinct values; each still gets its own device copy). */
static uint16_t *g_bf16;
static float *g_ones, *g_small;

static glm_weight bf16(int64_t rows, int64_t cols)
{
    glm_weight w = {.kind = GLM_W_PLAIN, .dtype = ST_BF16, .rows = rows, .cols = cols, .data = g_bf16};
    return w;
}

static exl3_tensor *exl3_random(int in, int out, const uint16_t *trellis, const uint16_t *suh,
                                const uint16_t *svh)
{
    exl3_tensor *t = calloc(1, sizeof *t);
    t->in = in, t->out = out, t->bits = 4, t->codebook = EXL3_CB_MCG;
    t->trellis = trellis, t->suh = suh, t->svh = svh;
    return t;
}

static glm_weight exl3w(exl3_tensor *t)
{
    glm_weight w = {.kind = GLM_W_EXL3, .rows = t->out, .cols = t->in, .exl3 = t};
    return w;
}

static void build_model(glm_model *m, int layers)
{
    glm_config *c = &m->cfg;
    real_config(c, layers);
    size_t big = (size_t)c->vocab_size * c->hidden_size;
    g_bf16 = malloc(big * 2);
    uint64_t x = 1;
    for (size_t i = 0; i < big; i++) { /* small values: |w| < 2^-5 */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        g_bf16[i] = (uint16_t)(0x3c00 + ((x >> 40) & 0x00ff)) | (uint16_t)((x >> 63) << 15);
    }
    size_t nsmall = (size_t)16 * 1024 * 1024;
    g_ones = malloc(nsmall * sizeof *g_ones);
    g_small = malloc(nsmall * sizeof *g_small);
    for (size_t i = 0; i < nsmall; i++) {
        g_ones[i] = 1.0f;
        g_small[i] = 0.01f * (float)((i * 2654435761u) % 200) / 200.0f;
    }
    int D = c->hidden_size, I = c->moe_intermediate_size, S = c->hc_mult, mix = (2 + S) * S;
    int C = c->kda_heads * c->kda_head_dim, dk = c->kda_head_dim, E = c->n_routed_experts;
    size_t words = (size_t)(D / 16) * (I / 16) * 16 * 4;
    uint16_t *tr = malloc(words * 2), *su = malloc((size_t)D * 2), *svi = malloc((size_t)I * 2);
    uint16_t *sud = malloc((size_t)I * 2), *svd = malloc((size_t)D * 2);
    for (size_t i = 0; i < words; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tr[i] = (uint16_t)(x >> 48);
    }
    for (int i = 0; i < D; i++)
        su[i] = (i & 1) ? 0xbc00 : 0x3c00, svd[i] = 0x2000; /* +-1; ~0.008 */
    for (int i = 0; i < I; i++)
        svi[i] = 0x2000, sud[i] = (i & 1) ? 0xbc00 : 0x3c00;
    glm_weights *w = &m->w;
    w->embed = bf16(c->vocab_size, D);
    w->lm_head = bf16(c->vocab_size, D);
    w->final_norm = g_ones;
    w->n_layers = layers;
    w->layers = calloc((size_t)layers, sizeof *w->layers);
    for (int li = 0; li < layers; li++) {
        glm_layer_weights *L = &w->layers[li];
        L->hc_attn_fn = bf16(mix, (int64_t)S * D);
        L->hc_ffn_fn = bf16(mix, (int64_t)S * D);
        L->hc_attn_base = L->hc_ffn_base = g_small;
        L->hc_attn_scale = L->hc_ffn_scale = g_small;
        L->input_norm = L->post_norm = g_ones;
        if (c->attn[li] == GLM_ATTN_KDA) {
            glm_kda_weights *k = &L->kda;
            k->q_proj = k->k_proj = k->v_proj = bf16(C, D);
            k->f_a = k->g_a = bf16(dk, D);
            k->f_b = k->g_b = bf16(C, dk);
            k->b_proj = bf16(c->kda_heads, D);
            k->o_proj = bf16(D, C);
            k->q_conv = k->k_conv = k->v_conv = g_small;
            k->A_log = k->dt_bias = g_small;
            k->o_norm = g_ones;
        } else {
            glm_dsa_weights *a = &L->dsa;
            int NH = c->num_heads, dn = c->qk_nope_head_dim, dv = c->v_head_dim;
            a->q_a = bf16(c->q_lora_rank, D);
            a->q_b = bf16((int64_t)NH * dn, c->q_lora_rank);
            a->kv_a = bf16(c->kv_lora_rank, D);
            a->kv_b = bf16((int64_t)NH * (dn + dv), c->kv_lora_rank);
            a->o_proj = bf16(D, (int64_t)NH * dv);
            a->q_a_norm = a->kv_a_norm = g_ones;
            a->has_indexer = 1;
            a->idx_wq_b = bf16((int64_t)c->index_n_heads * c->index_head_dim, c->q_lora_rank);
            a->idx_wk = a->idx_gate = bf16(c->index_head_dim, D);
            a->idx_weights = bf16(c->index_n_heads, D);
            a->idx_k_norm_w = g_ones;
            a->idx_k_norm_b = a->idx_ape = g_small;
        }
        if (!c->moe[li]) {
            L->mlp.gate = L->mlp.up = bf16(c->intermediate_size, D);
            L->mlp.down = bf16(D, c->intermediate_size);
            continue;
        }
        L->has_shared = 1;
        L->mlp.gate = L->mlp.up = bf16(I, D);
        L->mlp.down = bf16(D, I);
        L->router = bf16(E, D); /* as the published checkpoint ships it */
        L->router_bias = g_small;
        L->experts = calloc((size_t)E, sizeof *L->experts);
        for (int e = 0; e < E; e++) {
            L->experts[e].gate = exl3w(exl3_random(D, I, tr, su, svi));
            L->experts[e].up = exl3w(exl3_random(D, I, tr, su, svi));
            L->experts[e].down = exl3w(exl3_random(I, D, tr, sud, svd));
        }
    }
}

static double copy_bandwidth(void)
{
    size_t n = (size_t)2 << 30;
    void *a, *b;
    cudaMalloc(&a, n);
    cudaMalloc(&b, n);
    cudaMemset(a, 1, n);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e0, 0);
    for (int i = 0; i < 10; i++)
        cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaFree(a);
    cudaFree(b);
    return 2.0 * n * 10 / (ms * 1e-3); /* read + write bytes per second */
}

static double cublas_tflops(int M, int N, int K)
{
    void *A, *B, *Cm;
    cudaMalloc(&A, (size_t)M * K * 2);
    cudaMalloc(&B, (size_t)K * N * 2);
    cudaMalloc(&Cm, (size_t)M * N * 4);
    cudaMemset(A, 0, (size_t)M * K * 2);
    cudaMemset(B, 0, (size_t)K * N * 2);
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
        return 0;
    float one = 1, zero = 0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int it = 0; it < 2; it++) {
        if (it == 1)
            cudaEventRecord(e0, 0);
        for (int r = 0; r < (it ? 20 : 2); r++)
            cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &one, A, CUDA_R_16BF, K, B,
                         CUDA_R_16BF, K, &zero, Cm, CUDA_R_32F, M, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT);
    }
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    cublasDestroy(h);
    cudaFree(A);
    cudaFree(B);
    cudaFree(Cm);
    return 2.0 * M * N * K * 20 / (ms * 1e-3) / 1e12;
}

/* The model's FLOPs for the first `done` tokens of a prompt prefilled in chunks of `chunk` rows:
 * model/prefill_projection.c's count over every group (weight products, the latent attention and
 * the indexer's scores, the KDA delta rule), the one the projection uses too; MFU divides it. */
static double prompt_flops(const glm_config *c, int done, int chunk)
{
    glm_prefill_format f = {.dense_bytes = 2, .expert_bits = 4, .cache_bytes = 1};
    double fl[GLM_PF_GROUPS], tn[GLM_PF_GROUPS], by[GLM_PF_GROUPS], sum = 0;
    for (int pos = 0; pos < done; pos += chunk) {
        glm_prefill_costs(c, done - pos < chunk ? done - pos : chunk, pos, &f, fl, tn, by);
        for (int g = 0; g < GLM_PF_GROUPS; g++)
            sum += fl[g];
    }
    return sum;
}

/* The decode or prefill op profile: each mark's time from the run's first (us) into m, once the
 * device has finished. */
static int read_marks(cuda_backend *cb, op_mark *m)
{
    if (cudaDeviceSynchronize() != cudaSuccess)
        return -1;
    return op_marks_read(cb, m);
}

/* The op profile of the last profiled run (bench/op_profile.c attributes the two streams); a
 * failure is said (FAIL) and returned. */
static int collect_profile(cuda_backend *cb, op_profile *p)
{
    op_mark m[CUDA_PROF_MAX];
    char why[256];
    memset(p, 0, sizeof *p);
    if (read_marks(cb, m)) {
        printf("FAIL: op profile: a mark's time could not be read (%s)\n",
               cudaGetErrorString(cudaGetLastError()));
        return -1;
    }
    if (op_profile_build(m, cb->prof.n, p, why, sizeof why)) {
        printf("FAIL: op profile: %s\n", why);
        return -1;
    }
    return 0;
}

/* Prints the profile's ops, largest first (24 of them without alone, every one with it: a reader
 * can then redo the projection from the alone column): main-stream time (its share of the main stream's total)
 * and, for ops on the side stream, their own time there; with alone (else NULL), each op's
 * kernels replayed alone (us summed over its calls; negative: not timed) and kernels[k] how many
 * kernel nodes op k has (none: a copy). */
static void print_profile_alone(const op_profile *p, const double *alone, const double *chain,
                                const int *kernels, const char *title)
{
    int shown[OP_PROFILE_MAX] = {0};
    printf("\n-- %s: %.1f us in all on the main stream", title, p->total_us);
    if (p->side_us_total > 0)
        printf("; beside it the side stream's ops, %.1f us of their own (\"side\", in no total)",
               p->side_us_total);
    printf("\n");
    for (int r = 0; r < (alone ? p->n : 24); r++) {
        int best = -1;
        for (int k = 0; k < p->n; k++)
            if (!shown[k] && (best < 0 || p->op[k].us + p->side_us[k] >
                                              p->op[best].us + p->side_us[best]))
                best = k;
        if (best < 0)
            break;
        shown[best] = 1;
        int calls = p->calls[best] ? p->calls[best] : 1;
        printf("%-34s %5d calls %10.1f us %8.1f us/call %5.1f%%", p->op[best].label,
               p->calls[best], p->op[best].us, p->op[best].us / calls,
               dt_share(p->op[best].us, p->total_us));
        if (p->side_us[best] > 0)
            printf(" | side %8.1f us %6.1f us/call", p->side_us[best], p->side_us[best] / calls);
        if (alone && alone[best] < 0)
            printf(" | alone (not timed)");
        else if (alone && kernels[best] == 0)
            printf(" | alone (no kernel)");
        else if (alone)
            printf(" | alone %6.1f us/call", alone[best] / calls);
        if (chain && alone && kernels[best] > 0)
            printf(chain[best] >= 0 ? ", chained %6.1f" : ", chained (not timed)",
                   chain[best] / calls);
        printf("\n");
    }
}

static void print_profile(const op_profile *p, const char *title)
{
    print_profile_alone(p, NULL, NULL, NULL, title);
}

/* The decode step's op profile as the graph runs it (cuda_decode_graph_profiled: a graph of its
 * own with an event record node after each op; the step's own graph untouched). */
/* KERNEL_CHAIN: copies of a kernel node one after another in one graph, the second way of timing
 * it alone (its time in a graph without the launch of a graph of one node each time) */
enum { GRAPH_PROFILE_REPLAYS = 20, GRAPH_TIMING_REPS = 50, KERNEL_CHAIN = 16 };
typedef struct graph_profile {
    op_profile prof;    /* from the mean of GRAPH_PROFILE_REPLAYS replays' mark times */
    int marks;          /* event record nodes in the profiled graph */
    double profiled_us; /* a launch of the profiled graph, GRAPH_TIMING_REPS back to back */
    double plain_us;    /* a launch of the step's own graph (s->graph), timed the same way */
    double span_min_us, span_max_us; /* the replays' spans, first mark to last */
    /* per op of prof: its kernel nodes each replayed alone (kernel_alone_us), summed over its
     * calls; -1 where one of them could not be; alone_total over all ops timed */
    double alone_us[OP_PROFILE_MAX], alone_total;
    /* the same with each kernel node timed as KERNEL_CHAIN copies in one graph (a copy's share) */
    double chain_us[OP_PROFILE_MAX], chain_total;
    int op_kernels[OP_PROFILE_MAX];   /* kernel nodes of each op (all its calls) */
    int alone_kernels, alone_missing; /* kernel nodes timed alone, and not */
    int chain_missing;                /* kernel nodes whose chain could not be timed */
} graph_profile;

static double graph_us(cudaGraphExec_t ex, cudaStream_t st, int reps);

/* 1 when node copy has the cluster shape of node k (where k's can be read at all). */
static int same_cluster(cudaGraphNode_t k, cudaGraphNode_t copy)
{
    cudaKernelNodeAttrValue want, got;
    cudaKernelNodeAttrID cluster = cudaKernelNodeAttributeClusterDimension;
    if (cudaGraphKernelNodeGetAttribute(k, cluster, &want) != cudaSuccess)
        return 1; /* none to keep: CopyAttributes copied whatever k has */
    return cudaGraphKernelNodeGetAttribute(copy, cluster, &got) == cudaSuccess &&
           want.clusterDim.x == got.clusterDim.x && want.clusterDim.y == got.clusterDim.y &&
           want.clusterDim.z == got.clusterDim.z;
}

/* Microseconds of kernel node k replayed alone: `chain` nodes with k's parameters and attributes
 * (a cluster kernel's shape among them, checked), each after the one before, in a graph of their
 * own, GRAPH_TIMING_REPS launches back to back (graph_us); a node's share. A chain of one
 * carries a graph's launch each time; a longer one a 1/chain share of it and the dependency
 * between two nodes of a graph, as the step has (without its programmatic edges). -1 when that
 * graph cannot be made or run. */
static double kernel_alone_us(cudaGraphNode_t k, cudaStream_t st, int chain)
{
    struct cudaKernelNodeParams p;
    cudaGraph_t one = NULL;
    cudaGraphNode_t node = NULL, prev = NULL;
    cudaGraphExec_t ex = NULL;
    int bad = cudaGraphKernelNodeGetParams(k, &p) != cudaSuccess ||
              cudaGraphCreate(&one, 0) != cudaSuccess;
    for (int i = 0; !bad && i < chain; i++) {
        bad = cudaGraphAddKernelNode(&node, one, prev ? &prev : NULL, prev ? 1 : 0, &p) !=
                  cudaSuccess ||
              cudaGraphKernelNodeCopyAttributes(node, k) != cudaSuccess || !same_cluster(k, node);
        prev = node;
    }
    bad = bad || cudaGraphInstantiate(&ex, one, 0) != cudaSuccess;
    double us = bad ? -1 : graph_us(ex, st, GRAPH_TIMING_REPS) / chain;
    if (ex)
        cudaGraphExecDestroy(ex);
    if (one)
        cudaGraphDestroy(one);
    cudaGetLastError(); /* a refused graph is reported as not timed, not left for the next call */
    return us;
}

/* The index in g's n nodes of node x, or -1. */
static long node_index(const cudaGraphNode_t *nodes, size_t n, cudaGraphNode_t x)
{
    for (size_t i = 0; i < n; i++)
        if (nodes[i] == x)
            return (long)i;
    return -1;
}

/* Pushes x's dependencies onto stack (*top of them so far, cap at most; edges: room for cap
 * edges' data, which must be asked for with the nodes: the step's programmatic edges are not
 * default ones); -1 on failure. */
static int push_dependencies(cudaGraphNode_t x, cudaGraphNode_t *stack, cudaGraphEdgeData *edges,
                             size_t *top, size_t cap)
{
    size_t nd = cap - *top; /* room; the count found comes back */
    if (*top >= cap || cudaGraphNodeGetDependencies(x, stack + *top, edges, &nd) != cudaSuccess ||
        *top + nd > cap)
        return -1;
    *top += nd;
    return 0;
}

/* The kernel nodes mark reaches back to without passing another event record node (the kernels
 * of op k, the one it ends), each timed alone into gp->alone_us[k] (summed); counts into gp. -1
 * when the walk fails. */
static int time_op_kernels(cudaGraphNode_t mark, const cudaGraphNode_t *nodes, size_t n,
                           unsigned char *seen, cudaStream_t st, int k, graph_profile *gp)
{
    double *us = &gp->alone_us[k], *cus = &gp->chain_us[k];
    size_t cap = 2 * n + 1; /* a node is expanded once, each stacked once per edge into it */
    cudaGraphNode_t *stack = malloc(cap * sizeof *stack);
    cudaGraphEdgeData *edges = malloc(cap * sizeof *edges);
    size_t top = 0;
    int rc = stack && edges ? push_dependencies(mark, stack, edges, &top, cap) : -1;
    while (rc == 0 && top > 0) {
        cudaGraphNode_t x = stack[--top];
        long i = node_index(nodes, n, x);
        enum cudaGraphNodeType type;
        if (i < 0 || cudaGraphNodeGetType(x, &type) != cudaSuccess) {
            rc = -1;
            break;
        }
        if (seen[i] || type == cudaGraphNodeTypeEventRecord)
            continue;
        seen[i] = 1;
        if (type != cudaGraphNodeTypeKernel) { /* a copy: through it to the op's kernels */
            rc = push_dependencies(x, stack, edges, &top, cap);
            continue;
        }
        gp->op_kernels[k]++;
        double k_us = kernel_alone_us(x, st, 1), c_us = kernel_alone_us(x, st, KERNEL_CHAIN);
        if (k_us < 0 || *us < 0) {
            gp->alone_missing++;
            *us = -1;
        } else {
            gp->alone_kernels++;
            *us += k_us;
        }
        if (c_us < 0 || *cus < 0) {
            gp->chain_missing += c_us < 0;
            *cus = -1;
        } else {
            *cus += c_us;
        }
        rc = push_dependencies(x, stack, edges, &top, cap);
    }
    free(stack);
    free(edges);
    return rc;
}

/* Each op's kernels replayed alone (gp->alone_us per op of gp->prof), from the captured
 * profiled graph g: its event record nodes name the marks (prof's events). -1 when the graph
 * cannot be walked. */
static int time_ops_alone(cudaGraph_t g, const cu_prof *prof, cudaStream_t st, graph_profile *gp)
{
    size_t n = 0;
    if (cudaGraphGetNodes(g, NULL, &n) != cudaSuccess)
        return -1;
    cudaGraphNode_t *nodes = calloc(n ? n : 1, sizeof *nodes);
    unsigned char *seen = calloc(n ? n : 1, 1);
    int rc = nodes && seen && cudaGraphGetNodes(g, nodes, &n) == cudaSuccess ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        enum cudaGraphNodeType type;
        cudaEvent_t ev;
        if (cudaGraphNodeGetType(nodes[i], &type) != cudaSuccess)
            rc = -1;
        if (rc || type != cudaGraphNodeTypeEventRecord)
            continue;
        if (cudaGraphEventRecordNodeGetEvent(nodes[i], &ev) != cudaSuccess) {
            rc = -1;
            continue;
        }
        int m = 0;
        while (m < prof->n && prof->ev[m] != (void *)ev)
            m++;
        int k = 0;
        while (m < prof->n && prof->what[m] && k < gp->prof.n &&
               strcmp(gp->prof.op[k].label, prof->what[m]) != 0)
            k++;
        if (m == prof->n || !prof->what[m] || k == gp->prof.n) /* a starting point, or no op */
            continue;
        rc = time_op_kernels(nodes[i], nodes, n, seen, st, k, gp);
    }
    for (int k = 0; rc == 0 && k < gp->prof.n; k++) {
        gp->alone_total += gp->alone_us[k] > 0 ? gp->alone_us[k] : 0;
        gp->chain_total += gp->chain_us[k] > 0 ? gp->chain_us[k] : 0;
    }
    free(nodes);
    free(seen);
    return rc;
}

/* Replays the profiled graph at the state's last position (after one untimed replay) and reads
 * its marks after each; then both graphs' launch times. s->graph must be the current step's. */
static int replay_profiled(cuda_state *s, void *g, graph_profile *gp, glm_error *err)
{
    cuda_backend *cb = s->be;
    int n = cb->prof.n;
    op_mark m[CUDA_PROF_MAX], mean[CUDA_PROF_MAX];
    for (int i = 0; i < n; i++)
        mean[i] = (op_mark){cb->prof.what[i], cb->prof.side[i], 0.0};
    int rc = eng_graph_launch(g, cb->stream) || eng_stream_sync(cb->stream);
    for (int r = 0; !rc && r < GRAPH_PROFILE_REPLAYS; r++) {
        rc = eng_graph_launch(g, cb->stream) || read_marks(cb, m);
        for (int i = 0; !rc && i < n; i++)
            mean[i].t_us += m[i].t_us / GRAPH_PROFILE_REPLAYS;
        double span = !rc && n > 0 ? m[n - 1].t_us : 0;
        gp->span_min_us = r == 0 || span < gp->span_min_us ? span : gp->span_min_us;
        gp->span_max_us = r == 0 || span > gp->span_max_us ? span : gp->span_max_us;
    }
    if (rc)
        return glm_error_set(err, GLM_ERR_BACKEND, "replaying the profiled decode graph or "
                             "reading its event nodes' times failed (%s)",
                             cudaGetErrorString(cudaGetLastError())), -1;
    char why[256];
    if (op_profile_build(mean, n, &gp->prof, why, sizeof why))
        return glm_error_set(err, GLM_ERR_BACKEND, "the in-graph op profile: %s", why), -1;
    gp->marks = n;
    gp->profiled_us = graph_us(g, cb->stream, GRAPH_TIMING_REPS);
    gp->plain_us = graph_us(s->graph, cb->stream, GRAPH_TIMING_REPS);
    if (gp->profiled_us < 0 || gp->plain_us < 0)
        return glm_error_set(err, GLM_ERR_BACKEND, "timing the decode graphs back to back failed "
                             "(%s)", cudaGetErrorString(cudaGetLastError())), -1;
    return 0;
}

static int profile_in_graph(cuda_state *s, graph_profile *gp, glm_error *err)
{
    memset(gp, 0, sizeof *gp);
    if (!s->graph || s->graph_cap != s->cap)
        return glm_error_set(err, GLM_ERR_BACKEND, "no current decode graph to time beside the "
                             "profiled one (run a graph step first)"), -1;
    void *g = NULL, *captured = NULL;
    if (cuda_decode_graph_profiled(s, &g, &captured, err))
        return -1;
    int rc = replay_profiled(s, g, gp, err);
    if (rc == 0 && time_ops_alone(captured, &s->be->prof, s->be->stream, gp)) {
        printf("WARNING: the in-graph profile's ops could not be timed alone: walking the "
               "profiled graph failed (%s)\n", cudaGetErrorString(cudaGetLastError()));
        for (int k = 0; k < OP_PROFILE_MAX; k++)
            gp->alone_us[k] = gp->chain_us[k] = -1;
        gp->alone_total = gp->chain_total = 0;
    }
    eng_graph_free(g);
    eng_graph_destroy(captured);
    return rc;
}

/* The in-graph profile's table and what its event nodes cost against the step's own graph. */
static void print_graph_profile(const graph_profile *gp)
{
    char title[200];
    snprintf(title, sizeof title, "decode op profile (in the graph: event nodes between ops; "
             "the mean of %d replays)", GRAPH_PROFILE_REPLAYS);
    print_profile_alone(&gp->prof, gp->alone_us, gp->chain_us, gp->op_kernels, title);
    printf("profiled graph: %.1f us a launch (%d event nodes) against the step's own graph %.1f "
           "us, both %d launches back to back: the nodes, and the programmatic launches they "
           "turn into full dependencies, cost %.1f us (%.2f us a node; the profiled graph is "
           "%.3f of the step's); one replay's marks span %.1f to %.1f us over the %d\n",
           gp->profiled_us, gp->marks, gp->plain_us, GRAPH_TIMING_REPS,
           gp->profiled_us - gp->plain_us,
           gp->marks ? (gp->profiled_us - gp->plain_us) / gp->marks : 0.0,
           dt_ratio(gp->profiled_us, gp->plain_us), gp->span_min_us, gp->span_max_us,
           GRAPH_PROFILE_REPLAYS);
    printf("kernels alone: %d kernel nodes, each replayed in a graph of its own (%d launches back "
           "to back), %.1f us summed over the step (\"alone\": per op and call; no launch gaps, "
           "no overlap, inputs in cache); %d could not be timed alone (their ops say so); "
           "\"chained\": each as %d copies one after another in one graph, %.1f us summed, %d "
           "chains could not be timed\n",
           gp->alone_kernels, GRAPH_TIMING_REPS, gp->alone_total, gp->alone_missing, KERNEL_CHAIN,
           gp->chain_total, gp->chain_missing);
}

/* The two-Spark projection (model/projection.c): each op group's bytes per rank at the Sparks'
 * bandwidth beside its time here, for the real 45 layers on two ranks with q4 and bf16 dense
 * weights; measured: the bench's model and run, its op times scaled to the graph step. */
static void print_projection(int sms, const op_profile *decode, const char *source,
                             const glm_config *c, const glm_traffic_params *run, double step_us,
                             double bw)
{
    glm_config full;
    projected_config(&full);
    glm_target spark = GLM_TARGET_SPARKS;
    glm_traffic_table measured, target[2];
    glm_error err = {0};
    glm_traffic_dense fmt[2] = {GLM_TRAFFIC_Q4_G32, GLM_TRAFFIC_BF16};
    if (glm_traffic_step(c, run, &measured, &err) != GLM_OK) {
        printf("FAIL: projection: %s\n", err.message);
        return;
    }
    for (int k = 0; k < 2; k++) {
        glm_traffic_params p = *run;
        p.ranks = 2;
        p.dense = fmt[k];
        if (glm_traffic_step(&full, &p, &target[k], &err) != GLM_OK) {
            printf("FAIL: projection: %s\n", err.message);
            return;
        }
    }
    double scale = decode->total_us > 0 ? step_us / decode->total_us : 1;
    int G = glm_decode_group_count;
    glm_projection_op ops[2][64 + 1];
    const char *unknown[16];
    int n_unknown = 0;
    for (int k = 0; k < 2; k++)
        n_unknown = glm_projection_from_profile(decode->op, decode->n, scale, &measured, &target[k],
                                                ops[k], unknown, 16);
    printf("\n-- projection: the real 45 layers on two DGX Sparks (%.0f GB/s, %d SMs each; %d "
           "exchanges of %.0f us), from %s (context %d, dense %s, cache "
           "%s/%s) with its op times scaled by %.3f to the graph step (%.1f us); this GPU's bandwidth: "
           "this run's copy, %.0f GB/s; %d SMs here. Per call: lower max(Spark bytes / %.0f GB/s, "
           "GPU us), upper the same with the GPU us beyond its bytes / copy bandwidth times "
           "%d/%d (bench/BENCHMARKS.md, Spark projection: method)\n",
           spark.bytes_per_s / 1e9, spark.sms, spark.exchanges, spark.exchange_us, source,
           run->context,
           glm_traffic_dense_name(run->dense), glm_cache_format_name(run->latent_cache),
           glm_cache_format_name(run->index_cache), scale, step_us, bw / 1e9, sms,
           spark.bytes_per_s / 1e9, sms, spark.sms);
    printf("%-38s %5s %9s %9s %9s | %9s %9s %9s %9s | %9s %9s %9s %9s\n", "op group", "calls",
           "GPU us", "GPU MB", "GPU flr", "q4 MB", "q4 mem", "q4 low", "q4 high", "bf16 MB",
           "bf16 mem", "bf16 low", "bf16 high");
    double lo[2] = {0}, hi[2] = {0};
    for (int g = 0; g <= G; g++) {
        const glm_projection_op *o = &ops[0][g];
        printf("%-38.38s %5.0f %9.2f %9.3f %9.2f", o->name, o->calls, o->measured_us,
               o->measured_bytes / 1e6, o->measured_bytes / bw * 1e6);
        for (int k = 0; k < 2; k++) {
            double l, u;
            const glm_projection_op *x = &ops[k][g];
            glm_project_op(x, bw, sms, &spark, &l, &u);
            printf(" %s %9.3f %9.2f %9.2f %9.2f", k ? "|" : "|", x->target_bytes / 1e6,
                   x->target_bytes / spark.bytes_per_s * 1e6, l, u);
            lo[k] += x->calls * l;
            hi[k] += x->calls * u;
        }
        printf("\n");
    }
    printf("(us and MB per call; low/high x calls summed below, plus %d x %.0f us exchanges)\n",
           spark.exchanges, spark.exchange_us);
    for (int k = 0; k < 2; k++) {
        double l, u;
        glm_project_step(ops[k], G + 1, bw, sms, &spark, &l, &u);
        printf("%-5s dense: %.2f GB a rank a step; two Sparks between %.1f tok/s (%.0f us) and "
               "%.1f tok/s (%.0f us); at the bandwidth floor alone %.1f tok/s; the recipe: %.1f tok/s\n",
               glm_traffic_dense_name(fmt[k]), glm_traffic_bytes(&target[k]) / 1e9, 1e6 / u, u,
               1e6 / l, l,
               1e6 / (glm_traffic_bytes(&target[k]) / spark.bytes_per_s * 1e6 +
                      spark.exchanges * spark.exchange_us), RECIPE_TOKS);
    }
    for (int i = 0; i < n_unknown && i < 16; i++)
        printf("WARNING: the profile's label '%s' is in no group of model/projection.c: its time "
               "is counted as measured, at no bytes\n", unknown[i]);
}

/* ---- the decode step at long context positions and verification windows ------------------- */

/* Positions are reached without a prefill: each DSA layer's caches (latent, indexer keys and
 * gates, pool keys) get random rows of their dtype up to the position and the state's length is
 * set there. A step reads the cached rows, scores every completed pool and selects from the
 * scores, so its work depends on the position (and the values' spread), not on how the rows were
 * made; the KDA states stay zero, as a KDA step costs the same whatever their values. */
enum { MAX_POSITIONS = 8, POS_STEPS = 20, POS_MARGIN = 512, N_WINDOWS = 5, WINDOW_REPS = 6 };
static const int window_rows[N_WINDOWS] = {1, 2, 4, 8, 16};

/* Random bytes, then each value made one of the dtype's: e4m3 codes without the NaN ones (0x7f,
 * 0xff) at a row scale of 2^-6; bf16 of |x| in [2^-7, 2^-5); f32 in [-1, 1). */
static void random_values(unsigned char *h, size_t bytes, int dtype, uint64_t *x)
{
    for (size_t i = 0; i < bytes; i += 8) {
        *x = *x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t v = *x ^ (*x >> 29);
        memcpy(h + i, &v, bytes - i < 8 ? bytes - i : 8);
    }
    if (dtype == ENG_CACHE_FP8) {
        for (size_t i = 0; i < bytes; i++)
            if ((h[i] & 0x7f) == 0x7f)
                h[i] ^= 1;
    } else if (dtype == ENG_CACHE_BF16) {
        uint16_t *v = (uint16_t *)h;
        for (size_t i = 0; i < bytes / 2; i++)
            v[i] = (uint16_t)(0x3c00 + (v[i] & 0x00ff)) | (uint16_t)(v[i] & 0x8000);
    } else {
        uint32_t *v = (uint32_t *)h;
        for (size_t i = 0; i < bytes / 4; i++) {
            float f = (float)(v[i] >> 8) * (2.0f / 16777216.0f) - 1.0f;
            memcpy(&v[i], &f, sizeof f);
        }
    }
}

/* Rows [0, n) of cache c <- random values of its dtype (random_values). */
static int fill_rows(const eng_cache *c, size_t n, uint64_t *x)
{
    if (n == 0)
        return 0;
    size_t bytes = n * (size_t)c->width * cuda_value_bytes(c->dtype);
    unsigned char *h = malloc(bytes);
    if (!h)
        return -1;
    random_values(h, bytes, c->dtype, x);
    int bad = cudaMemcpy(c->rows, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess;
    free(h);
    if (bad || c->dtype != ENG_CACHE_FP8)
        return bad ? -1 : 0;
    float *scale = malloc(n * sizeof *scale);
    if (!scale)
        return -1;
    for (size_t i = 0; i < n; i++)
        scale[i] = 1.0f / 64.0f;
    bad = cudaMemcpy(c->scale, scale, n * sizeof *scale, cudaMemcpyHostToDevice) != cudaSuccess;
    free(scale);
    return bad ? -1 : 0;
}

/* A fresh state (n 0) brought to `pos` tokens with synthetic cache rows (see above). */
static glm_status state_at(cuda_state *s, int pos, glm_error *err)
{
    const glm_config *c = &s->be->m->cfg;
    glm_status st = cuda_state_reserve(s, pos + POS_MARGIN, err);
    if (st)
        return st;
    int nd = glm_config_count(c, GLM_ATTN_DSA), kp = c->index_kpool;
    uint64_t x = 0x5eed0000u + (uint64_t)pos;
    for (int i = 0; i < nd; i++) {
        cu_dsa_cache *d = &s->dsa[i];
        size_t rows = (size_t)pos, pools = (size_t)(pos / kp);
        if (fill_rows(&d->latent, rows, &x) || fill_rows(&d->idx_key, rows, &x) ||
            fill_rows(&d->idx_gate, rows, &x) || fill_rows(&d->pool_key, pools, &x))
            return glm_error_set(err, GLM_ERR_BACKEND, "writing DSA layer %d's synthetic cache "
                                 "rows for position %d failed (%s)", i, pos,
                                 cudaGetErrorString(cudaGetLastError()));
    }
    s->n = pos;
    return GLM_OK;
}

/* Microseconds of one launch of ex on st, the mean of reps after one untimed; -1 on failure. */
static double graph_us(cudaGraphExec_t ex, cudaStream_t st, int reps)
{
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess)
        return -1;
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return -1;
    }
    int bad = cudaGraphLaunch(ex, st) != cudaSuccess || cudaEventRecord(e0, st) != cudaSuccess;
    for (int r = 0; !bad && r < reps; r++)
        bad = cudaGraphLaunch(ex, st) != cudaSuccess;
    float ms = 0;
    bad = bad || cudaEventRecord(e1, st) != cudaSuccess ||
          cudaEventSynchronize(e1) != cudaSuccess ||
          cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return bad ? -1 : ms * 1000.0 / reps;
}

/* The indexer's times for one query at the state's position, from DSA layer 0's pool keys and the
 * last step's queries: eng_dsa_select whole, and each kernel it launches alone (captured once,
 * then each kernel node replayed in a graph of its own); kernels whose names hold "score" make
 * the score pass, the others the selection. names: "kernel us, ..." for the table's note, or
 * why the kernels could not be timed (then -1). */
typedef struct indexer_times {
    double all_us, score_us, select_us;
    char names[512];
} indexer_times;

static int time_indexer(cuda_state *s, int reps, indexer_times *t)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    int kp = c->index_kpool, width = c->index_topk + kp - 1;
    memset(t, 0, sizeof *t);
    cudaStream_t st;
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess)
        return -1;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ex = NULL;
    int bad = cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed) != cudaSuccess;
    if (!bad) {
        int rc = eng_dsa_select(&s->dsa[0].pool_key, be->s.iq, NULL, be->s.hw, s->d_pos, 0, 1,
                                c->index_n_heads, c->index_head_dim, kp, c->index_topk / kp,
                                s->cap / kp + 1, s->scores, width, be->s.sel_idx, be->s.sel_count,
                                st);
        bad = (cudaStreamEndCapture(st, &g) != cudaSuccess) || rc;
    }
    bad = bad || cudaGraphInstantiate(&ex, g, 0) != cudaSuccess;
    if (!bad)
        bad = (t->all_us = graph_us(ex, st, reps)) < 0; /* leaves the scores the select reads */
    size_t n = 0;
    cudaGraphNode_t *nodes = NULL;
    bad = bad || cudaGraphGetNodes(g, NULL, &n) != cudaSuccess ||
          !(nodes = calloc(n ? n : 1, sizeof *nodes)) ||
          cudaGraphGetNodes(g, nodes, &n) != cudaSuccess;
    for (size_t i = 0; !bad && i < n; i++) {
        enum cudaGraphNodeType type;
        struct cudaKernelNodeParams p;
        if (cudaGraphNodeGetType(nodes[i], &type) != cudaSuccess || type != cudaGraphNodeTypeKernel)
            continue;
        const char *name = NULL;
        cudaGraph_t one = NULL;
        cudaGraphNode_t node;
        cudaGraphExec_t one_ex = NULL;
        bad = cudaGraphKernelNodeGetParams(nodes[i], &p) != cudaSuccess ||
              cudaGraphCreate(&one, 0) != cudaSuccess ||
              cudaGraphAddKernelNode(&node, one, NULL, 0, &p) != cudaSuccess ||
              cudaGraphInstantiate(&one_ex, one, 0) != cudaSuccess;
        double us = bad ? -1 : graph_us(one_ex, st, reps);
        bad = bad || us < 0;
        if (cudaFuncGetName(&name, p.func) != cudaSuccess || !name)
            name = "a kernel";
        if (!bad && strstr(name, "score"))
            t->score_us += us;
        else if (!bad)
            t->select_us += us;
        size_t used = strlen(t->names);
        snprintf(t->names + used, sizeof t->names - used, "%s%.40s %.1f us", used ? ", " : "", name,
                 us);
        if (one_ex)
            cudaGraphExecDestroy(one_ex);
        if (one)
            cudaGraphDestroy(one);
    }
    free(nodes);
    if (ex)
        cudaGraphExecDestroy(ex);
    if (g)
        cudaGraphDestroy(g);
    cudaStreamDestroy(st);
    cudaError_t last = cudaGetLastError();
    if (bad)
        snprintf(t->names, sizeof t->names, "not timed: a graph call failed (%s)",
                 cudaGetErrorString(last));
    return bad ? -1 : 0;
}

typedef struct position_run {
    int pos, cap;
    double step_us; /* through the decode graph, the mean of POS_STEPS */
    op_profile prof; /* one eager step's op profile */
    indexer_times idx;
} position_run;

/* Decode steps of token ids from tok through the graph at the state's position. */
static double decode_steps_us(engine_backend *be, cuda_state *s, const int32_t *tok, int steps,
                              float *logits, glm_error *err)
{
    for (int i = 0; i < 3; i++) /* the graph's capture at this cache size, first launches */
        if (be->ops->prefill(be->impl, s, &tok[i], 1, logits, 0, err))
            return -1;
    double t0 = bench_now_s();
    for (int i = 0; i < steps; i++)
        if (be->ops->prefill(be->impl, s, &tok[i], 1, logits, 0, err))
            return -1;
    return (bench_now_s() - t0) / steps * 1e6;
}

/* The verification windows at the state's position: each size's best of WINDOW_REPS (after one
 * untimed, which grows the kept KDA states and the staging), going back to the window's first
 * token after each as a rejected draft does; experts: the distinct experts the last MoE layer
 * routed the last forward's rows to (a window runs in forwards of at most CUDA_DECODE_T rows). */
typedef struct window_run {
    int rows, group, experts;
    double us;
} window_run;

static int run_windows(engine_backend *be, cuda_state *s, const int32_t *tok, window_run *w,
                       glm_error *err)
{
    cuda_backend *cb = be->impl;
    int K = cb->m->cfg.num_experts_per_tok;
    int32_t ids[CUDA_DECODE_T * 64];
    for (int k = 0; k < N_WINDOWS; k++) {
        int rows = window_rows[k];
        w[k].rows = rows;
        w[k].us = 1e30;
        for (int r = 0; r <= WINDOW_REPS; r++) {
            double t0 = bench_now_s();
            if (be->ops->verify(be->impl, s, tok + r * 17, rows, NULL, err))
                return -1;
            double us = (bench_now_s() - t0) * 1e6;
            if (r > 0 && us < w[k].us)
                w[k].us = us;
            if (r == WINDOW_REPS) { /* the routing of the last forward, still in the scratch */
                w[k].group = rows - (rows - 1) / CUDA_DECODE_T * CUDA_DECODE_T;
                int n = w[k].group * K;
                w[k].experts = n <= (int)(sizeof ids / sizeof *ids) &&
                                       cudaMemcpy(ids, cb->s.rids, (size_t)n * sizeof *ids,
                                                  cudaMemcpyDeviceToHost) == cudaSuccess
                                   ? dt_distinct(ids, n) : -1;
            }
            if (rows > 1 && be->ops->state_rewind(s, be->ops->state_length(s) - rows + 1, err))
                return -1;
        }
    }
    return 0;
}

static void print_positions(const position_run *r, int n, const glm_config *c)
{
    printf("\n-- decode step by context position (%d layers: %d DSA with the indexer's top-%d of "
           "pools of %d); caches filled with synthetic rows of their dtype to the position, not "
           "prefilled (bench_cuda_engine.c, state_at: the step's work is the same)\n",
           c->num_layers, glm_config_count(c, GLM_ATTN_DSA), c->index_topk / c->index_kpool,
           c->index_kpool);
    printf("%9s %9s %11s %8s | %11s %9s %9s %8s %8s %9s\n", "position", "cache cap", "step us",
           "x first", "indexer us", "score us", "select us", "score x", "select x", "sel/score");
    for (int i = 0; i < n; i++) {
        const indexer_times *t = &r[i].idx;
        printf("%9d %9d %11.1f %8.3f | %11.1f %9.1f %9.1f %8.2f %8.2f %9.2f\n", r[i].pos, r[i].cap,
               r[i].step_us, dt_ratio(r[i].step_us, r[0].step_us), t->all_us, t->score_us,
               t->select_us, dt_ratio(t->score_us, r[0].idx.score_us),
               dt_ratio(t->select_us, r[0].idx.select_us), dt_ratio(t->select_us, t->score_us));
    }
    printf("(step: the graph, mean of %d; indexer: one query on DSA layer 0 through "
           "eng_dsa_select, whole and each kernel alone; x: against the first position)\n",
           POS_STEPS);
    for (int i = 0; i < n; i++)
        printf("indexer kernels at %d: %s\n", r[i].pos, r[i].idx.names);
    const position_run *a = &r[0], *z = &r[n - 1];
    if (n > 1) {
        double grow_sel = dt_ratio(z->idx.select_us, a->idx.select_us);
        double grow_score = dt_ratio(z->idx.score_us, a->idx.score_us);
        printf("goal: the %d step within 10%% of the %d step: %s (x%.3f); the selection grows "
               "x%.2f from %d to %d, the score pass x%.2f: %s\n", z->pos, a->pos,
               dt_within(z->step_us, a->step_us, 0.10) ? "met" : "NOT met",
               dt_ratio(z->step_us, a->step_us), grow_sel, a->pos, z->pos, grow_score,
               grow_sel <= grow_score ? "not faster than the score (met)"
                                      : "FASTER than the score (NOT met)");
    }
    /* each op's share of the eager step at each position, the largest at the last position first */
    enum { TOP = 18 };
    double us[OP_PROFILE_MAX];
    int idx[OP_PROFILE_MAX];
    for (int k = 0; k < z->prof.n; k++)
        us[k] = z->prof.op[k].us;
    dt_order_desc(us, z->prof.n, idx);
    printf("\n-- decode op profile by position (one eager step each; us summed over the step, "
           "%% of that step's op total)\n%-34s", "op");
    for (int i = 0; i < n; i++)
        printf(" | %9d us %6s", r[i].pos, "share");
    printf("\n");
    for (int j = 0; j < z->prof.n && j < TOP; j++) {
        const char *label = z->prof.op[idx[j]].label;
        printf("%-34.34s", label);
        for (int i = 0; i < n; i++) {
            double v = 0;
            for (int k = 0; k < r[i].prof.n; k++)
                if (strcmp(r[i].prof.op[k].label, label) == 0)
                    v = r[i].prof.op[k].us;
            printf(" | %12.1f %5.1f%%", v, dt_share(v, r[i].prof.total_us));
        }
        printf("\n");
    }
    printf("%-34s", "op total (eager)");
    for (int i = 0; i < n; i++)
        printf(" | %12.1f %6s", r[i].prof.total_us, "");
    printf("\n");
}

static void print_windows(const window_run *w, int pos, double step_us, const glm_config *c)
{
    printf("\n-- verification windows at context %d: rows verified as one-token steps compute "
           "them, in forwards of at most %d rows; x step: against the 1-row decode step through "
           "the graph (%.1f us); public: the public engine's published window costs\n", pos,
           CUDA_DECODE_T, step_us);
    printf("%5s %11s %8s %10s | %10s %9s | %9s %10s\n", "rows", "window us", "x step",
           "x 1-row w", "public ms", "public x", "experts", "if random");
    for (int k = 0; k < N_WINDOWS; k++) {
        double pub = dt_public_ratio(w[k].rows);
        printf("%5d %11.1f %8.2f %10.2f | ", w[k].rows, w[k].us, dt_ratio(w[k].us, step_us),
               dt_ratio(w[k].us, w[0].us));
        if (pub > 0)
            printf("%10.1f %8.2fx | ", dt_public_window_ms[w[k].rows - 1], pub);
        else
            printf("%10s %9s | ", "-", "-");
        printf("%4d of %-3d %10.1f\n", w[k].experts, w[k].group * c->num_experts_per_tok,
               dt_random_union(c->n_routed_experts, c->num_experts_per_tok, w[k].group));
    }
    printf("(experts: distinct experts the last MoE layer routed the window's last forward's rows "
           "to; if random: rows drawing their %d of %d uniformly)\n", c->num_experts_per_tok,
           c->n_routed_experts);
    printf("copy drafts come from the host: a copy-drafted step costs the window of its rows "
           "above; MTP drafts: the last table; both end to end: bench_cuda_spec "
           "(tests/gpu/spec.sh)\n");
}

/* One window of `rows` rows eagerly with the op marks on (a window's forwards are never a graph),
 * going back to its first token after, into *p. */
static int profile_window(engine_backend *be, cuda_state *s, const int32_t *tok, int rows,
                          op_profile *p, glm_error *err)
{
    cuda_backend *cb = be->impl;
    cb->prof.on = 1;
    cb->prof.n = 0;
    int rc = be->ops->verify(be->impl, s, tok, rows, NULL, err) != GLM_OK;
    cb->prof.on = 0;
    if (!rc && collect_profile(cb, p)) /* (said why) */
        rc = glm_error_set(err, GLM_ERR_BACKEND, "the op profile of a %d-row window", rows) != 0;
    if (!rc && be->ops->state_rewind(s, be->ops->state_length(s) - rows + 1, err))
        rc = 1;
    return rc ? -1 : 0;
}

static int gpu_sms(const char *what); /* below, with the projections' other helpers */

/* The window projected onto two Sparks the way the step is (print_projection's method): the
 * window's and the one-row step's eager op profiles at the same position, each against its own
 * traffic (model/traffic.c: a window reads the weights once, its expert union, each row's streams
 * and states), for the real 45 layers on two ranks; the union measured here stands for the real
 * model's. The ratio of the two is what the public engine's window costs compare to. */
static void print_window_projection(int sms, double bw, const op_profile *win, int rows,
                                    double experts, const op_profile *one, const glm_config *c,
                                    const glm_traffic_params *run)
{
    glm_config full;
    projected_config(&full);
    glm_target spark = GLM_TARGET_SPARKS;
    glm_traffic_dense fmt[2] = {GLM_TRAFFIC_Q4_G32, GLM_TRAFFIC_BF16};
    const op_profile *prof[2] = {one, win};
    double lo[2][2], hi[2][2]; /* [format][the step, the window] */
    glm_projection_op q4ops[2][64 + 1]; /* q4's groups, [the step, the window] */
    glm_error err = {0};
    for (int w = 0; w < 2; w++) {
        glm_traffic_params mp = *run;
        mp.rows = w ? rows : 1;
        mp.experts_read = w ? experts : 0;
        glm_traffic_table measured;
        if (glm_traffic_step(c, &mp, &measured, &err) != GLM_OK) {
            printf("FAIL: window projection: %s\n", err.message);
            return;
        }
        for (int k = 0; k < 2; k++) {
            glm_traffic_params tp = mp;
            tp.ranks = 2;
            tp.dense = fmt[k];
            glm_traffic_table target;
            glm_projection_op ops[64 + 1];
            if (glm_traffic_step(&full, &tp, &target, &err) != GLM_OK) {
                printf("FAIL: window projection: %s\n", err.message);
                return;
            }
            glm_projection_from_profile(prof[w]->op, prof[w]->n, 1.0, &measured, &target, ops,
                                        NULL, 0);
            glm_project_step(ops, glm_decode_group_count + 1, bw, sms, &spark, &lo[k][w],
                             &hi[k][w]);
            if (k == 0)
                memcpy(q4ops[w], ops, sizeof ops);
        }
    }
    printf("\n-- the %d-row window projected onto two DGX Sparks as the step is (the eager op "
           "profiles of the window and of the one-row step at the same position, each against its "
           "own traffic: weights once a window, %.0f routed experts a MoE layer as measured here, "
           "each row's streams and states; 45 layers, two ranks)\n", rows, experts);
    for (int k = 0; k < 2; k++)
        printf("%-5s dense: the one-row step %.0f - %.0f us, the %d-row window %.0f - %.0f us: "
               "%.2fx (conservative) / %.2fx (optimistic) the step; the public engine's %d-row "
               "window: %.2fx its step\n", glm_traffic_dense_name(fmt[k]), lo[k][0], hi[k][0],
               rows, lo[k][1], hi[k][1], dt_ratio(hi[k][1], hi[k][0]),
               dt_ratio(lo[k][1], lo[k][0]), rows, dt_public_ratio(rows));
    /* where the q4 window's time goes: each group's bounds x its calls, the step's beside it */
    printf("%-38s %10s %10s | %10s %10s | %10s\n", "op group (q4, us x calls)", "step low",
           "step high", "window low", "window high", "window MB");
    for (int g = 0; g <= glm_decode_group_count; g++) {
        double b[2][2];
        for (int w = 0; w < 2; w++) {
            glm_project_op(&q4ops[w][g], bw, sms, &spark, &b[w][0], &b[w][1]);
            b[w][0] *= q4ops[w][g].calls;
            b[w][1] *= q4ops[w][g].calls;
        }
        printf("%-38.38s %10.1f %10.1f | %10.1f %10.1f | %10.3f\n", q4ops[1][g].name, b[0][0],
               b[0][1], b[1][0], b[1][1], q4ops[1][g].target_bytes / 1e6);
    }
}

/* Where a window's time grows: each op of the window's profile beside the same op in the one-row
 * eager step at the same position, largest growth in us first (what the window adds). */
static void print_window_growth(const op_profile *win, int rows, const op_profile *one)
{
    int shown[OP_PROFILE_MAX] = {0};
    printf("\n-- a %d-row window's op profile (eager, op marks; us summed over the window) against "
           "the 1-row eager step's at the same position: %.1f against %.1f us on the main stream\n",
           rows, win->total_us, one->total_us);
    printf("%-34s %10s %10s %8s %10s\n", "op", "1 row us", "window us", "x", "added us");
    for (int r = 0; r < win->n; r++) {
        int best = -1;
        double best_add = 0;
        for (int k = 0; k < win->n; k++) {
            if (shown[k])
                continue;
            double base = 0;
            for (int j = 0; j < one->n; j++)
                if (strcmp(one->op[j].label, win->op[k].label) == 0)
                    base = one->op[j].us;
            double add = win->op[k].us - base;
            if (best < 0 || add > best_add)
                best = k, best_add = add;
        }
        shown[best] = 1;
        double base = win->op[best].us - best_add;
        printf("%-34.34s %10.1f %10.1f %8.2f %10.1f\n", win->op[best].label, base,
               win->op[best].us, dt_ratio(win->op[best].us, base), best_add);
    }
}

/* The decode step at each position (a fresh state each), then the windows at the first. The
 * backend's context is raised for these states alone (the prefill's keep their cache sizes). */
static int bench_positions(engine_backend *be, const int *pos, int n, const int32_t *tok,
                           float *logits, double bw, glm_error *err)
{
    cuda_backend *cb = be->impl;
    int saved = cb->context, most = 0;
    for (int i = 0; i < n; i++)
        most = pos[i] > most ? pos[i] : most;
    if (most + POS_MARGIN > cb->context)
        cb->context = most + POS_MARGIN;
    position_run *r = calloc((size_t)n, sizeof *r);
    window_run w[N_WINDOWS];
    op_profile win8; /* an 8-row window's ops, at the first position */
    int rc = r ? 0 : -1, windows = 0;
    float us_layers[GLM_MAX_LAYERS], head_us = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        cuda_state *s = be->ops->state_new(be->impl, err);
        rc = !s || state_at(s, pos[i], err);
        r[i].pos = pos[i];
        if (!rc)
            rc = (r[i].step_us = decode_steps_us(be, s, tok, POS_STEPS, logits, err)) < 0;
        if (!rc)
            r[i].cap = s->cap;
        if (!rc && time_indexer(s, 50, &r[i].idx)) /* its note says why; the rest goes on */
            printf("WARNING: the indexer's kernels at position %d: %s\n", pos[i], r[i].idx.names);
        if (!rc)
            rc = cuda_time_layers(s, tok[1], us_layers, &head_us, err) != GLM_OK; /* untimed */
        if (!rc) {
            cb->prof.on = 1;
            cb->prof.n = 0;
            rc = cuda_time_layers(s, tok[2], us_layers, &head_us, err) != GLM_OK;
            cb->prof.on = 0;
            if (!rc && collect_profile(cb, &r[i].prof)) /* (said why) */
                rc = glm_error_set(err, GLM_ERR_BACKEND, "the op profile at %d", pos[i]) != 0;
        }
        if (!rc && i == 0 && (rc = run_windows(be, s, tok, w, err)) == 0)
            windows = 1;
        if (!rc && i == 0)
            rc = profile_window(be, s, tok, CUDA_DECODE_T, &win8, err);
        if (s)
            be->ops->state_free(s);
    }
    cb->context = saved;
    if (rc == 0) {
        print_positions(r, n, &cb->m->cfg);
        if (windows) {
            print_windows(w, pos[0], r[0].step_us, &cb->m->cfg);
            print_window_growth(&win8, CUDA_DECODE_T, &r[0].prof);
            glm_traffic_params run = bench_traffic(be, pos[0]);
            int sms = gpu_sms("window projection"), k8 = 0;
            while (k8 < N_WINDOWS - 1 && window_rows[k8] != CUDA_DECODE_T)
                k8++;
            if (sms > 0 && w[k8].experts > 0)
                print_window_projection(sms, bw, &win8, CUDA_DECODE_T, w[k8].experts, &r[0].prof,
                                        &cb->m->cfg, &run);
            else if (sms > 0)
                printf("FAIL: the window projection: the %d-row window's experts were not read\n",
                       CUDA_DECODE_T);
        }
    }
    free(r);
    return rc;
}

/* MTP drafting at the real shapes: the in-memory model gets an MTP block (the first DSA + MoE
 * layer's weights, an eh_proj and norms) uploaded into the open backend after every other table
 * has run, since a state with the block runs its catch-up in every prefill and step. At context
 * ctx (a real prefill): the decode step with the block's catch-up, 1, 3 and 7 chained drafts
 * (backend.h's mtp_draft) and the verification windows with the block's catch-up; k drafts and
 * then the window of k + 1 rows make one drafted step. */
enum { MTP_SIZES = 3, MTP_MOST = 7, MTP_REPS = 10 };
static const int mtp_drafts[MTP_SIZES] = {1, 3, 7};

static int bench_mtp(engine_backend *be, glm_model *m, const int32_t *tok, int ctx, float *logits,
                     double plain_step_us)
{
    cuda_backend *cb = be->impl;
    const glm_config *c = &m->cfg;
    glm_error err = {0};
    int host = -1;
    for (int li = 0; li < c->num_layers && host < 0; li++)
        if (c->attn[li] == GLM_ATTN_DSA && c->moe[li])
            host = li;
    if (host < 0 || !be->ops->mtp_draft) {
        printf("\n-- MTP drafting: not timed (%s)\n", host < 0 ? "no DSA + MoE layer to copy the "
               "MTP block from" : "the backend has no mtp_draft");
        return 0;
    }
    glm_mtp_weights *x = &m->w.mtp;
    x->eh_proj = bf16(c->hidden_size, 2 * (int64_t)c->hidden_size);
    x->enorm = x->hnorm = x->head_norm = g_ones;
    x->layer = m->w.layers[host];
    m->w.has_mtp = 1;
    if (cu_weights_put_mtp(m, cb->dense_q4, cb->chunk, &cb->w, 0, NULL, &err)) {
        printf("FAIL: uploading the MTP block: %s\n", err.message);
        return 1;
    }
    cb->w.has_mtp = 1;
    cuda_state *s = be->ops->state_new(be->impl, &err);
    double step_us = -1, draft_us[MTP_SIZES];
    window_run w[N_WINDOWS];
    int rc = !s || be->ops->prefill(be->impl, s, tok, ctx, logits, 0, &err);
    if (!rc)
        rc = (step_us = decode_steps_us(be, s, tok, POS_STEPS, logits, &err)) < 0;
    for (int i = 0; !rc && i < MTP_SIZES; i++) {
        int32_t out[MTP_MOST];
        int k = mtp_drafts[i], got = 0;
        draft_us[i] = 1e30;
        for (int r = 0; !rc && r <= MTP_REPS; r++) { /* the first untimed */
            double t0 = bench_now_s();
            rc = be->ops->mtp_draft(be->impl, s, tok[r], out, k, &got, &err) != GLM_OK;
            double us = (bench_now_s() - t0) * 1e6;
            if (!rc && got != k) {
                glm_error_set(&err, GLM_ERR_BACKEND, "the MTP block drafted %d of %d tokens", got,
                              k);
                rc = 1;
            }
            if (r > 0 && us < draft_us[i])
                draft_us[i] = us;
        }
    }
    int pos = s ? be->ops->state_length(s) : 0;
    if (!rc)
        rc = run_windows(be, s, tok, w, &err);
    if (s)
        be->ops->state_free(s);
    if (rc) {
        printf("FAIL: MTP drafting: %s\n", err.message);
        return 1;
    }
    printf("\n-- MTP drafting at context %d (an MTP block of layer %d's DSA + MoE weights added "
           "last to the in-memory model; its catch-up runs in every step and window)\n", pos, host);
    printf("decode step (graph) with the MTP catch-up: %.1f us; without the block: %.1f us "
           "(x%.3f)\n", step_us, plain_step_us, dt_ratio(step_us, plain_step_us));
    printf("%7s %10s %9s | %7s %10s %8s | %12s %11s %8s\n", "drafts", "draft us", "us/draft",
           "window", "window us", "x step", "draft+window", "us a token*", "x step");
    for (int i = 0; i < MTP_SIZES; i++) {
        int k = mtp_drafts[i];
        const window_run *wk = NULL;
        for (int j = 0; j < N_WINDOWS; j++)
            if (w[j].rows == k + 1)
                wk = &w[j];
        if (!wk)
            continue;
        double total = draft_us[i] + wk->us, per = total / (k + 1);
        printf("%7d %10.1f %9.1f | %7d %10.1f %8.2f | %12.1f %11.1f %8.2f\n", k, draft_us[i],
               draft_us[i] / k, k + 1, wk->us, dt_ratio(wk->us, step_us), total, per,
               dt_ratio(per, step_us));
    }
    printf("(* k drafts and the window of k + 1 rows, over the k + 1 tokens they give when every "
           "draft is accepted; x step: against the decode step with the catch-up)\n");
    printf("windows with the MTP catch-up:");
    for (int j = 0; j < N_WINDOWS; j++)
        printf(" %d rows %.1f us (x%.2f);", w[j].rows, w[j].us, dt_ratio(w[j].us, step_us));
    printf("\n");
    return 0;
}

/* ---- prefill --------------------------------------------------------------------------- */

/* A comma-separated list of whole numbers in lo..hi into out (at most max); its count, or -1
 * after a FAIL line naming what. */
static int parse_list(const char *arg, int *out, int max, long lo, long hi, const char *what)
{
    int n = 0;
    if (!*arg) {
        printf("FAIL: %s: the list is empty\n", what);
        return -1;
    }
    for (const char *p = arg; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < lo || v > hi || n == max || (*end && *end != ',')) {
            printf("FAIL: %s '%s': give at most %d numbers from %ld to %ld, comma-separated\n",
                   what, arg, max, lo, hi);
            return -1;
        }
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* The flag a chat's session hands its state (backend.h's state_set_cancel), never set: the timed
 * prefills read it between layers as a chat's prompts do. */
static atomic_int never_canceled;

/* The backend and its state opened on m with prefill chunks of `chunk` rows (0: the plan's). */
static int open_at_chunk(glm_model *m, glm_engine_params *params, int chunk, engine_backend *be,
                         cuda_state **s, glm_error *err)
{
    backend_settings bs;
    params->cuda.chunk = chunk;
    if (gpu_settings(m, params, &bs, err) || backend_open_cuda_with(m, &bs, be, err))
        return -1;
    if (!(*s = be->ops->state_new(be->impl, err))) {
        backend_close(be);
        return -1;
    }
    be->ops->state_set_cancel(*s, &never_canceled);
    return 0;
}

/* The backend reopened on the same model with prefill chunks of `chunk` rows (0: the plan's);
 * 0, or 1 after "does not fit" when the memory plan refuses that chunk (the plan is right to:
 * the backend is then reopened at `fallback` rows), or -1 after a FAIL line. */
static int reopen(glm_model *m, glm_engine_params *params, int chunk, int fallback,
                  engine_backend *be, cuda_state **s)
{
    glm_error err = {0};
    be->ops->state_free(*s);
    *s = NULL;
    backend_close(be);
    int refused = 0;
    if (open_at_chunk(m, params, chunk, be, s, &err)) {
        if (err.status != GLM_ERR_NOMEM) {
            printf("FAIL: reopening with prefill chunks of %d rows: %s\n", chunk, err.message);
            return -1;
        }
        printf("\n== prefill, chunks of %d rows: does not fit: %s\n", chunk, err.message);
        refused = 1;
        if (open_at_chunk(m, params, fallback, be, s, &err)) {
            printf("FAIL: reopening with prefill chunks of %d rows: %s\n", fallback, err.message);
            return -1;
        }
    }
    char plan[768];
    cuda_plan_describe(backend_cuda_plan(be), plan, sizeof plan);
    printf("\nplan: %s\n", plan);
    return refused;
}

/* The prefill of n tokens again without the cancel read between layers (no flag: a state no
 * session holds), against `polled` seconds with it: what the read costs. */
static int prefill_unpolled(engine_backend *be, cuda_state *s, const int32_t *tok, int n,
                            double polled)
{
    glm_error err = {0};
    be->ops->state_set_cancel(s, NULL);
    be->ops->state_reset(s);
    cudaDeviceSynchronize();
    double p0 = bench_now_s();
    int rc = be->ops->prefill(be->impl, s, tok, n, NULL, 0, &err) != GLM_OK;
    cudaDeviceSynchronize();
    double ps = bench_now_s() - p0;
    be->ops->state_set_cancel(s, &never_canceled);
    if (rc) {
        printf("FAIL: prefill %d without the cancel's read: %s\n", n, err.message);
        return -1;
    }
    printf("prefill %d without the cancel read between layers: %.3f s; with it (above) %.3f s = "
           "%.3fx\n", n, ps, polled, polled / ps);
    return 0;
}

/* One chunk of `rows` tokens at the state's length with the op profile on. */
static int profile_chunk(engine_backend *be, cuda_state *s, const int32_t *tok, int rows,
                         op_profile *prof)
{
    cuda_backend *cb = be->impl;
    glm_error err = {0};
    cb->prof.on = 1;
    cb->prof.n = 0;
    int rc = be->ops->prefill(be->impl, s, tok, rows, NULL, 0, &err) != GLM_OK;
    cb->prof.on = 0;
    if (rc) {
        printf("FAIL: profiled prefill chunk of %d rows at %d: %s\n", rows, s->n, err.message);
        return -1;
    }
    return collect_profile(cb, prof);
}

/* The GPU's multiprocessor count, which both projections scale by; -1 after a FAIL line naming
 * what needed it. */
static int gpu_sms(const char *what)
{
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || sms <= 0) {
        printf("FAIL: %s: the GPU's multiprocessor count could not be read\n", what);
        return -1;
    }
    return sms;
}

/* What the CUDA kernels read and issue for a prefill chunk under params: the weights' formats
 * and the parts each product splits its f32 operand into (model/prefill_projection.h): a BF16
 * weight product takes one fp16 part of its input under cuda_gemm = onepart (the default), two
 * with fixed (gemm_fp16x2), three bf16 parts with three or cublas; q4 dense weights run on the
 * FMA pipes (one pass); the
 * absorbed query and value expansion (head_gemm_kernel) take three bf16 parts, the indexer's
 * pooled scores three, or one fp16 part where its query takes the one-part form (onepart with
 * BF16 dense weights, the bench model's fp8 pool keys: forward.c index_one_part), the flash
 * latent attention two (hi and lo of the query and the weights). */
static glm_prefill_format cuda_prefill_format(const glm_engine_params *params)
{
    int q4 = params->dense == GLM_DENSE_Q4;
    glm_cuda_gemm g = params->cuda.gemm;
    double dense = q4 || backend_cuda_one_part(g)                      ? 1
                   : g == GLM_CUDA_GEMM_THREE || g == GLM_CUDA_GEMM_CUBLAS ? 3
                                                                           : 2;
    return (glm_prefill_format){.dense_bytes = q4 ? 0.5625 : 2,
                                .expert_bits = 4,
                                .cache_bytes = 1,
                                .dense_parts = dense,
                                .absorb_parts = 3,
                                .attend_parts = 2,
                                .index_parts = backend_cuda_one_part(g) && !q4 ? 1 : 3};
}

/* The profiled chunk (rows at position pos) projected onto two Sparks holding the real 45 layers:
 * each op group's share here, its floor here and there at each machine's rates (from the tensor
 * work the kernels issue, f's parts, beside the model's own FLOPs), and its time there at the
 * efficiency it had here (model/prefill_projection.c). */
static int print_prefill_projection(const op_profile *prof, const glm_config *c, int rows, int pos,
                                    const glm_prefill_format *f, double cub_flops, double bw)
{
    int sms = gpu_sms("prefill projection");
    if (sms < 0)
        return -1;
    glm_config full, half;
    projected_config(&full);
    cuda_plan_rank_config(&full, &half);
    glm_prefill_target t = GLM_PREFILL_SPARKS;
    double hf[GLM_PF_GROUPS], ht[GLM_PF_GROUPS], hb[GLM_PF_GROUPS];
    double tf[GLM_PF_GROUPS], tt[GLM_PF_GROUPS], tb[GLM_PF_GROUPS];
    double us[GLM_PF_GROUPS] = {0};
    glm_prefill_costs(c, rows, pos, f, hf, ht, hb);
    glm_prefill_costs(&half, rows, pos, f, tf, tt, tb);
    for (int i = 0; i < prof->n; i++)
        us[glm_prefill_group_of(prof->op[i].label)] += prof->op[i].us;
    glm_prefill_here here = {cub_flops, bw, sms};
    double rest_scale = (double)full.num_layers / c->num_layers; /* the rest runs whole a rank */
    printf("\n-- prefill projection: a chunk of %d rows at position %d, the real 45 layers on two "
           "DGX Sparks (a rank: %.0f GB/s, %.1f TFLOP/s bf16 dense assumed, %d SMs, exchanges over "
           "%.0f GB/s + %.0f us); here: cuBLAS bf16 %.0f TFLOP/s and copy %.0f GB/s of this run, %d "
           "SMs; 'at eff': there at the fraction of its floor each group ran at here (pessimistic "
           "for integer-bound work); 'by SM': its time here times the work and %d/%d (optimistic); "
           "formulas in model/prefill_projection.h\n",
           rows, pos, t.bytes_per_s / 1e9, t.flops_per_s / 1e12, t.sms, t.link_bytes_per_s / 1e9,
           t.exchange_us, cub_flops / 1e12, bw / 1e9, sms, sms, t.sms);
    printf("(tensor work: the products the kernels issue, %.0f part(s) a dense product, %.0f the "
           "absorbed query and value expansion, %.0f the attention, %.0f the indexer's scores; "
           "'model flr': the floor there at the model's own FLOPs)\n",
           f->dense_parts, f->absorb_parts, f->attend_parts, f->index_parts);
    printf("%-36s %10s %6s %10s %10s %10s %7s | %10s %10s %10s %10s %10s %10s %10s\n", "op group",
           "here us", "share", "GFLOP", "tensor GF", "MB", "here flr", "GFLOP/rank",
           "tensor/rk", "MB/rank", "model flr", "floor us", "by SM us", "at eff us");
    double total = prof->total_us > 0 ? prof->total_us : 1, sum_floor = 0, sum_eff = 0, sum_sm = 0;
    double sum_model = 0;
    for (int g = 0; g < GLM_PF_GROUPS; g++) {
        double fl, eff, by_sm;
        glm_project_prefill_group(us[g], ht[g], hb[g], &here, tt[g], tb[g], rest_scale, &t, &fl,
                                  &eff, &by_sm);
        double here_floor = fmax(ht[g] / cub_flops, hb[g] / bw) * 1e6;
        double model = fmax(tf[g] / t.flops_per_s, tb[g] / t.bytes_per_s) * 1e6;
        printf("%-36s %10.0f %5.1f%% %10.1f %10.1f %10.1f %6.0f%% | %10.1f %10.1f %10.1f %10.0f "
               "%10.0f %10.0f %10.0f\n",
               glm_prefill_group_names[g], us[g], 100 * us[g] / total, hf[g] / 1e9, ht[g] / 1e9,
               hb[g] / 1e6, us[g] > 0 && here_floor > 0 ? 100 * here_floor / us[g] : 0.0,
               tf[g] / 1e9, tt[g] / 1e9, tb[g] / 1e6, model, fl, by_sm, eff);
        sum_floor += fl;
        sum_eff += eff;
        sum_sm += by_sm;
        sum_model += model;
    }
    double ex = glm_prefill_exchange_us(&t, full.num_layers, rows, full.hidden_size);
    printf("exchanges: %d x %.1f MB a chunk and %d of the cancel flags: %.0f us\n",
           2 * full.num_layers, (double)rows * full.hidden_size * 4 / 1e6, full.num_layers, ex);
    printf("two Sparks, chunks of %d at %d: at the model's floor %.0f tok/s (%.0f us a chunk), at "
           "the kernels' floor %.0f tok/s (%.0f us); between %.0f tok/s at this run's efficiency "
           "(%.0f us) and %.0f tok/s by SM (%.0f us); the recipe: ~1,950 tok/s to 64k "
           "(research/seed.md)\n",
           rows, pos, rows / ((sum_model + ex) * 1e-6), sum_model + ex,
           rows / ((sum_floor + ex) * 1e-6), sum_floor + ex, rows / ((sum_eff + ex) * 1e-6),
           sum_eff + ex, rows / ((sum_sm + ex) * 1e-6), sum_sm + ex);
    glm_prefill_target both = t;
    both.link_bytes_per_s *= GLM_PREFILL_RAILS_BOTH;
    double ex2 = glm_prefill_exchange_us(&both, full.num_layers, rows, full.hidden_size);
    printf("the same over both rails (%.0f GB/s striped): exchanges %.0f us; the kernels' floor %.0f "
           "tok/s, at this run's efficiency %.0f, by SM %.0f\n",
           both.link_bytes_per_s / 1e9, ex2, rows / ((sum_floor + ex2) * 1e-6),
           rows / ((sum_eff + ex2) * 1e-6), rows / ((sum_sm + ex2) * 1e-6));
    /* two ranks run a chunk of 2 x rows as two halves of this chunk's rows, each half's exchanges
     * under the other's work (forward.c's layers_in_halves): this chunk's compute twice */
    if (rows >= CUDA_HALF_ROWS) {
        double xs[3], comp[3] = {2 * sum_floor, 2 * sum_eff, 2 * sum_sm};
        for (int k = 0; k < 3; k++)
            xs[k] = glm_prefill_exchange_halves_us(&t, full.num_layers, rows, full.hidden_size,
                                                   comp[k]);
        printf("two Sparks, chunks of %d run as two halves of %d (their exchanges under each "
               "other's work; this chunk's compute twice): exchanges left waiting %.0f / %.0f / "
               "%.0f us; the kernels' floor %.0f tok/s, at this run's efficiency %.0f, by SM %.0f "
               "(one rail)\n",
               2 * rows, rows, xs[0], xs[1], xs[2], 2 * rows / ((comp[0] + xs[0]) * 1e-6),
               2 * rows / ((comp[1] + xs[1]) * 1e-6), 2 * rows / ((comp[2] + xs[2]) * 1e-6));
    }
    return 0;
}

/* The grouped EXL3 experts' kernels (kern_exl3_set_grouped) over one prefill of n tokens each:
 * its time, and the last row's logits in the bits of the first kernel's (they must be equal);
 * those logits into last (vocab floats). */
static int grouped_kernels(engine_backend *be, cuda_state *s, const int32_t *tok, int n, int chunk,
                           float *last)
{
    static const int variants[] = {KERN_EXL3_GROUPED_PIPE_64, KERN_EXL3_GROUPED_PIPE_128_ONCE,
                                   KERN_EXL3_GROUPED_AUTO};
    static const char *const names[] = {"pipe, 64 rows a pass", "pipe, 128 rows, one decode",
                                        "auto (the default)"};
    enum { NV = sizeof variants / sizeof variants[0] };
    const glm_config *c = &((cuda_backend *)be->impl)->m->cfg;
    size_t V = (size_t)c->vocab_size;
    float *first = malloc(V * sizeof *first), *got = malloc(V * sizeof *got);
    int rc = first && got ? 0 : -1, was = kern_exl3_grouped();
    for (int v = 0; v < NV && !rc; v++) {
        glm_error err = {0};
        kern_exl3_set_grouped(variants[v]);
        be->ops->state_reset(s);
        double p0 = bench_now_s();
        if (be->ops->prefill(be->impl, s, tok, n, v ? got : first, 0, &err)) {
            printf("FAIL: prefill %d with the grouped kernel '%s': %s\n", n, names[v], err.message);
            rc = -1;
            break;
        }
        double ps = bench_now_s() - p0;
        int same = !v || memcmp(first, got, V * sizeof *got) == 0;
        printf("grouped experts' kernel %-26s prefill %d (chunks of %d): %.3f s = %.0f tok/s; the "
               "last row's logits %s\n", names[v], n, chunk, ps, n / ps,
               !v ? "(the reference)" : same ? "in the same bits" : "DIFFER");
        if (!same) {
            printf("FAIL: the grouped kernel '%s' changes the logits\n", names[v]);
            rc = -1;
        }
    }
    kern_exl3_set_grouped(was);
    if (!rc)
        memcpy(last, first, V * sizeof *first);
    free(first);
    free(got);
    return rc;
}

/* Prefill at one chunk size: the op profile of a chunk at position 0, each size timed from an
 * empty session (MFU against cuBLAS bf16 in this run), a chunk after the largest size profiled,
 * and the projection; the smallest size's last row's logits into last (vocab floats). */
static int prefill_at_chunk(engine_backend *be, cuda_state *s, const int *sizes, int n_sizes,
                            const int32_t *tok, double cub, double bw,
                            const glm_prefill_format *f, float *last)
{
    const cuda_plan *plan = backend_cuda_plan(be);
    const glm_config *c = &((cuda_backend *)be->impl)->m->cfg;
    int chunk = plan->chunk, largest = 0, smallest = sizes[0];
    glm_error err = {0};
    op_profile prof;
    char title[160];
    be->ops->state_reset(s);
    if (profile_chunk(be, s, tok, chunk, &prof))
        return -1;
    snprintf(title, sizeof title, "prefill op profile (one chunk of %d rows at position 0)", chunk);
    print_profile(&prof, title);
    if (print_prefill_projection(&prof, c, chunk, 0, f, cub * 1e12, bw))
        return -1;
    for (int i = 0; i < n_sizes; i++) {
        largest = sizes[i] > largest ? sizes[i] : largest;
        smallest = sizes[i] < smallest ? sizes[i] : smallest;
    }
    if (grouped_kernels(be, s, tok, smallest, chunk, last)) /* three prefills: the cheapest size */
        return -1;
    for (int i = 0; i < n_sizes; i++) {
        int np = sizes[i];
        be->ops->state_reset(s);
        cudaDeviceSynchronize();
        double p0 = bench_now_s();
        if (be->ops->prefill(be->impl, s, tok, np, NULL, 0, &err)) {
            printf("FAIL: prefill %d: %s\n", np, err.message);
            return -1;
        }
        cudaDeviceSynchronize();
        double ps = bench_now_s() - p0;
        double flops = prompt_flops(c, np, chunk);
        printf("\n-- prefill %d tokens (chunks of %d): %.2f s = %.0f tok/s; %.1f TFLOP/s (the model's "
               "FLOPs, model/prefill_projection.c); cuBLAS bf16 GEMM 8192^3 here: %.0f TFLOP/s (%.2f%%)\n",
               np, chunk, ps, np / ps, flops / ps / 1e12, cub, 100 * flops / ps / 1e12 / cub);
        if (np == smallest && prefill_unpolled(be, s, tok, np, ps))
            return -1;
        if (np != largest)
            continue;
        if (profile_chunk(be, s, tok + np, chunk, &prof)) /* what grows with the position */
            return -1;
        snprintf(title, sizeof title, "prefill op profile (one chunk of %d rows at position %d)",
                 chunk, np);
        print_profile(&prof, title);
        if (print_prefill_projection(&prof, c, chunk, np, f, cub * 1e12, bw))
            return -1;
    }
    return 0;
}

/* Prefill at each chunk of `chunks` (0: the chunk the backend was opened with, the plan's or
 * GLMCHAT_CUDA_CHUNK's), the backend reopened for each other chunk; a chunk the memory plan
 * refuses is reported and skipped. *be and *s are left open at the chunk they had. */
static int bench_prefill(glm_model *m, glm_engine_params *params, engine_backend *be,
                         cuda_state **s, const int *sizes, int n_sizes, const int *chunks,
                         int n_chunks, double bw)
{
    int largest = 0, most_chunk = CUDA_CHUNK_CAP, first = params->cuda.chunk, open = first;
    for (int i = 0; i < n_sizes; i++)
        largest = sizes[i] > largest ? sizes[i] : largest;
    for (int i = 0; i < n_chunks; i++)
        most_chunk = chunks[i] > most_chunk ? chunks[i] : most_chunk;
    int32_t *tok = malloc((size_t)(largest + most_chunk) * sizeof *tok);
    size_t V = (size_t)m->cfg.vocab_size;
    float *ref = malloc(V * sizeof *ref), *last = malloc(V * sizeof *last);
    int have = 0, ref_rows = 0, smallest = sizes[0];
    for (int i = 0; i < n_sizes; i++)
        smallest = sizes[i] < smallest ? sizes[i] : smallest;
    if (!tok || !ref || !last) {
        free(tok), free(ref), free(last);
        printf("FAIL: prefill tokens: out of memory\n");
        return -1;
    }
    for (int i = 0; i < largest + most_chunk; i++)
        tok[i] = (int32_t)((i * 7919u) % 150000u);
    double cub = cublas_tflops(8192, 8192, 8192);
    glm_prefill_format f = cuda_prefill_format(params);
    int rc = 0;
    double summary[8] = {0};
    int rows[8] = {0}; /* each entry's chunk as opened (the plan's where it is 0) */
    for (int k = 0; k < n_chunks && rc >= 0; k++) {
        int want = chunks[k] ? chunks[k] : first;
        summary[k] = -1;
        if (want != open) {
            rc = reopen(m, params, want, first, be, s);
            open = rc == 1 ? first : want;
            if (rc)
                continue;
        }
        rows[k] = backend_cuda_plan(be)->chunk;
        printf("\n== prefill, chunks of %d rows\n", rows[k]);
        double p0 = bench_now_s();
        rc = prefill_at_chunk(be, *s, sizes, n_sizes, tok, cub, bw, &f, have ? last : ref);
        summary[k] = bench_now_s() - p0;
        if (rc >= 0 && have) { /* a row's bits must not depend on the chunk it was computed in */
            int same = memcmp(ref, last, V * sizeof *ref) == 0;
            printf("the last row's logits of the %d-token prefill in chunks of %d rows: %s those in "
                   "chunks of %d\n", smallest, rows[k], same ? "the same bits as" : "DIFFER from",
                   ref_rows);
            if (!same) {
                printf("FAIL: the prefill's logits depend on the chunk size\n");
                rc = -1;
            }
        } else if (rc >= 0) {
            have = 1;
            ref_rows = rows[k];
        }
    }
    if (rc >= 0 && open != first) /* as the caller opened it */
        rc = reopen(m, params, first, first, be, s);
    if (rc >= 0 && n_chunks > 1) {
        printf("\n(each chunk size's whole prefill section, profiles included: ");
        for (int k = 0; k < n_chunks; k++) {
            if (summary[k] < 0)
                printf("%d rows: does not fit", chunks[k]);
            else
                printf("%d rows %.1f s", rows[k], summary[k]);
            printf("%s", k + 1 < n_chunks ? ", " : ")\n");
        }
    }
    free(tok), free(ref), free(last);
    return rc < 0 ? -1 : 0;
}

/* ---- long prefill (--long): each size from an empty session, a time limit a size ---------- */

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Free device bytes now (0 when unknown). */
static size_t device_free(void)
{
    size_t free_b = 0, total_b = 0;
    return cudaMemGetInfo(&free_b, &total_b) == cudaSuccess ? free_b : 0;
}

typedef struct long_run {
    engine_backend *be;
    const int32_t *tok;
    float *logits;      /* the last row's */
    double limit_s;     /* LP_MAX_LIMIT_S: no limit */
    int every;          /* 0: no progress lines */
    size_t free_at_open;
    double plan_gib;
} long_run;

/* The device memory the backend holds now (GiB): what was free when it opened less what is. */
static double held_gib(const long_run *L)
{
    size_t f = device_free();
    return f && L->free_at_open > f ? (double)(L->free_at_open - f) / GIB : 0;
}

/* A prompt of `size` tokens from a fresh session as one prefill call runs it: the caches reserved
 * for the whole prompt first (so the indexer scores over the same cache as there), then a call a
 * chunk on the plan's chunk grid, the last asking for the last row's logits (which must be
 * finite); the time limit and the progress lines fall between chunks. *held: the device memory
 * the backend held at the end, the session's caches still there (GiB). */
static int long_size(const long_run *L, int size, lp_result *r, double *held)
{
    engine_backend *be = L->be;
    cuda_backend *cb = be->impl;
    glm_error err = {0};
    memset(r, 0, sizeof *r);
    r->size = size;
    r->chunk = cb->chunk;
    cuda_state *s = be->ops->state_new(be->impl, &err);
    if (s)
        be->ops->state_set_cancel(s, &never_canceled);
    if (!s || cuda_state_reserve(s, size, &err)) {
        printf("FAIL: a session for %d tokens: %s\n", size, err.message);
        if (s)
            be->ops->state_free(s);
        return -1;
    }
    cudaDeviceSynchronize();
    double t0 = bench_now_s(), mark = 0;
    int chunks = 0, mark_done = 0, rc = 0;
    while (r->done < size) {
        int piece = cb->chunk - r->done % cb->chunk, last;
        if (piece > size - r->done)
            piece = size - r->done;
        last = r->done + piece == size;
        float *out = last ? L->logits : NULL;
        if (be->ops->prefill(be->impl, s, L->tok + r->done, piece, out, 0, &err)) {
            printf("FAIL: prefill of %d tokens at position %d: %s\n", size, r->done, err.message);
            rc = -1;
            break;
        }
        r->done += piece;
        r->seconds = bench_now_s() - t0;
        chunks++;
        if (L->every && (chunks % L->every == 0 || last)) {
            char line[512];
            lp_progress_line(size, r->done, r->seconds, r->done - mark_done, r->seconds - mark,
                             held_gib(L), L->plan_gib, line, sizeof line);
            printf("%s\n", line);
            mark = r->seconds;
            mark_done = r->done;
        }
        if (lp_stop(r->seconds, L->limit_s, r->done, size)) {
            r->partial = 1;
            break;
        }
    }
    *held = held_gib(L);
    be->ops->state_free(s);
    if (rc)
        return -1;
    const glm_config *c = &cb->m->cfg;
    r->tflops = r->seconds > 0 ? prompt_flops(c, r->done, cb->chunk) / r->seconds / 1e12 : 0;
    for (int v = 0; !r->partial && v < c->vocab_size; v++)
        if (!isfinite(L->logits[v])) {
            printf("FAIL: prefill of %d tokens: the last row's logit %d is %f\n", size, v,
                   (double)L->logits[v]);
            return -1;
        }
    return 0;
}

/* The backend's memory at the end of a size against its plan (the 1 GiB reserve lies beyond). */
static void print_held(const long_run *L, int size, double held)
{
    printf("device memory the backend held at the end of %d tokens: %.2f GiB; its plan %.2f GiB "
           "(+ 1 GiB reserve): %s\n", size, held, L->plan_gib,
           held <= L->plan_gib + 1.0 ? "within the plan" : "OVER THE PLAN (WARNING)");
}

/* The 8k reference (after an untimed 8k prefill: first launches) and each size of a, with the
 * results' lines and the BENCHMARKS.md rows; 0, or -1 after a FAIL line. */
static int long_sizes(long_run *L, const lp_args *a, int largest, double cub, const char *name)
{
    const glm_config *c = &((cuda_backend *)L->be->impl)->m->cfg;
    int32_t *tok = malloc((size_t)largest * sizeof *tok);
    float *logits = malloc((size_t)c->vocab_size * sizeof *logits);
    if (!tok || !logits) {
        printf("FAIL: out of host memory for %d tokens\n", largest);
        free(tok);
        free(logits);
        return -1;
    }
    for (int i = 0; i < largest; i++)
        tok[i] = (int32_t)((i * 7919u) % 150000u);
    L->tok = tok;
    L->logits = logits;
    lp_result ref, r[LP_MAX_SIZES];
    double held = 0;
    char line[1024];
    int rc = long_size(L, LP_REFERENCE, &ref, &held) || long_size(L, LP_REFERENCE, &ref, &held);
    double ref_rate = lp_rate(&ref);
    if (!rc)
        printf("reference: prefill %d tokens (chunks of %d): %.3f s = %.0f tok/s, %.1f TFLOP/s\n",
               LP_REFERENCE, ref.chunk, ref.seconds, ref_rate, ref.tflops);
    L->limit_s = a->limit_s;
    L->every = a->every;
    int n_done = 0;
    for (int i = 0; i < a->n_sizes && !rc; i++) {
        printf("\n-- prefill %d tokens\n", a->sizes[i]);
        if ((rc = long_size(L, a->sizes[i], &r[i], &held)) != 0)
            break;
        lp_result_line(&r[i], ref_rate, cub, a->limit_s, line, sizeof line);
        printf("%s\n", line);
        print_held(L, a->sizes[i], held);
        n_done++;
    }
    printf("\n-- bench/BENCHMARKS.md rows (figure | value | ceiling | ratio; machine: %s)\n", name);
    for (int i = 0; i < n_done; i++) {
        lp_bench_row(&r[i], ref_rate, cub, line, sizeof line);
        printf("%s\n", line);
    }
    free(tok);
    free(logits);
    return rc ? -1 : 0;
}

/* The settings glmchat takes from the environment (GLMCHAT_CUDA_DENSE, GLMCHAT_CUDA_KV ...),
 * read once a program (gpu_env_params: their strings live until it exits); 1 after a FAIL line
 * naming the bad variable. */
static int env_params(glm_engine_params *params, glm_error *err)
{
    if (!gpu_env_params(params, err))
        return 0;
    printf("FAIL: %s\n", err->message);
    return 1;
}

/* --long LAYERS SIZES [LIMIT_S [EVERY]]: the model's build, cuBLAS's ceiling (before the backend
 * opens, so its buffers are gone when the plan measures the room), the backend opened with the
 * context of the largest size exactly, an untimed 8k prefill, the 8k reference, then each size. */
static int long_main(int argc, char **argv)
{
    lp_args a;
    char msg[512];
    if (lp_parse(argc, argv, BENCH_WINDOW, GLM_MAX_LAYERS, &a, msg, sizeof msg)) {
        printf("FAIL: --long: %s\n", msg);
        return 2;
    }
    glm_engine_params params;
    glm_error err = {0};
    if (env_params(&params, &err))
        return 1;
    int largest = LP_REFERENCE;
    for (int i = 0; i < a.n_sizes; i++)
        largest = a.sizes[i] > largest ? a.sizes[i] : largest;
    if (params.context > 0 && params.context < largest) {
        printf("FAIL: --long: the context set (GLMCHAT_CUDA_CONTEXT=%d) is below the largest size, "
               "%d tokens: unset it (the bench takes the largest size) or raise it\n",
               params.context, largest);
        return 2;
    }
    if (!params.context) /* the caches of the largest prompt and no more */
        params.context = largest;
    glm_model m;
    memset(&m, 0, sizeof m);
    double t0 = bench_now_s();
    build_model(&m, a.layers);
    const glm_config *c = &m.cfg;
    char name[128] = "";
    kern_device_describe(0, name, sizeof name);
    printf("== bench_cuda_engine --long: %s, %d layers of the real shapes (%d KDA : %d DSA), sizes",
           name, a.layers, glm_config_count(c, GLM_ATTN_KDA), glm_config_count(c, GLM_ATTN_DSA));
    for (int i = 0; i < a.n_sizes; i++)
        printf("%s%d", i ? "," : " ", a.sizes[i]);
    printf(", each stopped after the chunk that passes %.0f s, progress every %d chunks\n",
           a.limit_s, a.every);
    double cub = cublas_tflops(8192, 8192, 8192);
    printf("cuBLAS bf16 GEMM 8192^3: %.0f TFLOP/s\n", cub);
    engine_backend be;
    backend_settings bs;
    size_t free_at_open = device_free();
    if (gpu_settings(&m, &params, &bs, &err) || backend_open_cuda_with(&m, &bs, &be, &err)) {
        printf("FAIL: open for a context of %d tokens: %s\n", params.context, err.message);
        return 1;
    }
    const cuda_plan *plan = backend_cuda_plan(&be);
    char line[1024];
    cuda_plan_describe(plan, line, sizeof line);
    size_t free_now = device_free();
    long_run L = {&be, NULL, NULL, LP_MAX_LIMIT_S, 0, free_at_open, plan->total / GIB};
    printf("plan: %s; free before the backend opened %.2f GiB, after %.2f GiB; built and uploaded "
           "in %.1f s\n", line, free_at_open / GIB, free_now / GIB, bench_now_s() - t0);
    int rc = long_sizes(&L, &a, largest, cub, name);
    backend_close(&be);
    return rc ? 1 : 0;
}

/* The kernel launches of each decode layer (T = 1), counted as the kernel nodes of a graph
 * captured from that layer alone (the step's graph holds the same launches: a layer's last HC
 * update includes the next layer's first HC step); per layer type, with one layer's kernels by
 * name, and the whole step's (embedding to LM head). Side-stream kernels (the HC mix, the shared
 * expert) are counted too: they run beside the critical path. Returns 0, or -1 when a capture
 * failed (said, with FAIL). */
/* A kernel's name from its mangled one: the last identifier of its nested name (no namespace,
 * no template arguments), into buf; the mangled name where it is not of that form. */
static const char *kernel_name(const char *m, char *buf, size_t n)
{
    if (strncmp(m, "_Z", 2) != 0)
        return m;
    const char *p = m + 2 + (m[2] == 'N'), *last = NULL;
    long len = 0;
    while (*p >= '0' && *p <= '9') {
        char *end;
        long l = strtol(p, &end, 10);
        if (l <= 0 || (size_t)l > strlen(end))
            break;
        last = end;
        len = l;
        p = end + l;
    }
    if (!last)
        return m;
    snprintf(buf, n, "%.*s", (int)len, last);
    return buf;
}

static int count_nodes(cudaGraph_t g, int *kernels, char *names, size_t cap)
{
    size_t n = 0;
    cudaGraphNode_t *nodes = NULL;
    if (cudaGraphGetNodes(g, NULL, &n) != cudaSuccess ||
        !(nodes = calloc(n ? n : 1, sizeof *nodes)) ||
        cudaGraphGetNodes(g, nodes, &n) != cudaSuccess) {
        free(nodes);
        return -1;
    }
    *kernels = 0;
    if (names)
        names[0] = 0;
    for (size_t i = 0; i < n; i++) {
        enum cudaGraphNodeType type;
        struct cudaKernelNodeParams p;
        const char *name = NULL;
        if (cudaGraphNodeGetType(nodes[i], &type) != cudaSuccess || type != cudaGraphNodeTypeKernel)
            continue;
        ++*kernels;
        if (!names || cudaGraphKernelNodeGetParams(nodes[i], &p) != cudaSuccess ||
            cudaFuncGetName(&name, p.func) != cudaSuccess || !name)
            continue;
        char shortened[128];
        size_t used = strlen(names);
        snprintf(names + used, cap - used, "%s%s", used ? ", " : "",
                 kernel_name(name, shortened, sizeof shortened));
    }
    free(nodes);
    return 0;
}

static int print_launches(cuda_state *s)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    cudaStream_t st = be->stream;
    const char *tname[3] = {"KDA + MoE", "DSA + MoE", "KDA + dense"};
    int shown[3] = {0}, per[3] = {0}, cnt[3] = {0}, sum = 0;
    static char names[8192];
    printf("\n-- decode launches, 1 row (kernel nodes of each layer captured alone)\n");
    for (int li = 0; li < c->num_layers; li++) {
        int type = c->attn[li] == GLM_ATTN_DSA ? 1 : 0, k = 0;
        if (!c->moe[li])
            type = 2;
        cudaGraph_t g = NULL;
        glm_error err = {0};
        if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
            printf("FAIL: launch count: the capture did not start\n");
            return -1;
        }
        int rc = cuda_forward_layer(s, li, 1, &err);
        cudaError_t e = cudaStreamEndCapture(st, &g);
        if (rc || e != cudaSuccess || count_nodes(g, &k, shown[type] ? NULL : names, sizeof names)) {
            printf("FAIL: launch count of layer %d: %s\n", li, rc ? err.message : "capture");
            if (g)
                cudaGraphDestroy(g);
            cudaGetLastError();
            return -1;
        }
        cudaGraphDestroy(g);
        if (!shown[type]) {
            printf("layer %2d (%s): %d kernels: %s\n", li, tname[type], k, names);
            shown[type] = 1;
        }
        if (cnt[type] && per[type] != k)
            printf("layer %2d (%s): %d kernels (layer type's first: %d)\n", li, tname[type], k,
                   per[type]);
        if (!cnt[type])
            per[type] = k;
        cnt[type]++;
        sum += k;
    }
    cudaGraph_t g = NULL;
    glm_error err = {0};
    int k = 0, rc = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) != cudaSuccess;
    rc = rc || cuda_forward(s, 1, 0, 1, &err);
    rc = cudaStreamEndCapture(st, &g) != cudaSuccess || rc || count_nodes(g, &k, NULL, 0);
    if (g)
        cudaGraphDestroy(g);
    cudaGetLastError();
    for (int t = 0; t < 3; t++)
        if (cnt[t])
            printf("launches a layer: %s %d (x%d)\n", tname[t], per[t], cnt[t]);
    if (rc) {
        printf("FAIL: launch count of the whole step: %s\n", err.status ? err.message : "capture");
        return -1;
    }
    printf("launches a step: %d (layers %d, embedding + final norm + LM head %d)\n", k, sum,
           k - sum);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines out as they come: a run cut short keeps them */
    if (argc > 1 && strcmp(argv[1], "--long") == 0)
        return long_main(argc - 1, argv + 1);
    int layers = argc > 1 ? atoi(argv[1]) : 16;
    glm_engine_params params;
    glm_error err = {0};
    if (env_params(&params, &err))
        return 1;
    int q4 = params.dense == GLM_DENSE_Q4;
    /* prefill sizes and chunks: comma-separated lists, each size timed from an empty session */
    int sizes[8], n_sizes, chunks[8], n_chunks, prefill_n = 0, chunk_n = 0;
    char msg[512];
    if ((n_sizes = lp_parse_sizes(argc > 2 ? argv[2] : "8192", BENCH_WINDOW, sizes, 8, msg,
                                  sizeof msg)) < 0) {
        printf("FAIL: prefill sizes: %s\n", msg);
        return 1;
    }
    if ((n_chunks = parse_list(argc > 3 ? argv[3] : "0", chunks, 8, 0, GLM_CUDA_CHUNK_LIMIT,
                               "prefill chunks (rows; 0: the plan's)")) < 0)
        return 1;
    for (int i = 0; i < n_sizes; i++)
        prefill_n = sizes[i] > prefill_n ? sizes[i] : prefill_n;
    for (int i = 0; i < n_chunks; i++)
        chunk_n = chunks[i] > chunk_n ? chunks[i] : chunk_n;
    /* decode positions: the step at each (synthetic caches), the windows at the first */
    int positions[MAX_POSITIONS], n_positions;
    const char *pos_arg = argc > 4 ? argv[4] : "1024,65536,262144";
    if ((n_positions = parse_list(pos_arg, positions, MAX_POSITIONS, 1, 1 << 24,
                                  "decode positions (tokens)")) <= 0)
        return 1;
    int ctx0 = 1024, steps = 40;
    if (!params.context) /* the largest size and one more chunk after it */
        params.context = prefill_n + (chunk_n > CUDA_CHUNK_CAP ? chunk_n : CUDA_CHUNK_CAP) + 2048;
    static const char *const kv_names[] = {"fp8", "fp8", "bf16", "f32"};
    glm_model m;
    memset(&m, 0, sizeof m);
    double t0 = bench_now_s();
    build_model(&m, layers);
    const glm_config *c = &m.cfg;
    char name[128] = "";
    kern_device_describe(0, name, sizeof name);
    printf("== bench_cuda_engine: %s, %d layers of the real shapes (hidden %d, %d KDA : %d DSA, "
           "layer 0 dense, %d experts EXL3 4-bit, top-%d), cache %s, dense linears %s\n", name,
           layers, c->hidden_size, glm_config_count(c, GLM_ATTN_KDA),
           glm_config_count(c, GLM_ATTN_DSA), c->n_routed_experts, c->num_experts_per_tok,
           kv_names[params.kv_cache], q4 ? "q4 (requantized at load)" : "bf16");
    double bw = copy_bandwidth();
    printf("device-to-device copy: %.0f GB/s (read + write)\n", bw / 1e9);
    engine_backend be;
    backend_settings bs;
    if (gpu_settings(&m, &params, &bs, &err) || backend_open_cuda_with(&m, &bs, &be, &err)) {
        printf("FAIL: open: %s\n", err.message);
        return 1;
    }
    char plan[512];
    cuda_plan_describe(backend_cuda_plan(&be), plan, sizeof plan);
    printf("plan: %s; built and uploaded in %.1f s\n", plan, bench_now_s() - t0);
    cuda_state *s = be.ops->state_new(be.impl, &err);
    int32_t *tok = malloc((size_t)(prefill_n + ctx0) * sizeof *tok);
    for (int i = 0; i < prefill_n + ctx0; i++)
        tok[i] = (int32_t)((i * 7919u) % 150000u);
    float *logits = malloc((size_t)c->vocab_size * sizeof *logits);
    if (!s || be.ops->prefill(be.impl, s, tok, ctx0, logits, 0, &err)) {
        printf("FAIL: prefill: %s\n", err.message);
        return 1;
    }
    /* decode through the graph */
    for (int i = 0; i < 3; i++)
        be.ops->prefill(be.impl, s, &tok[i], 1, logits, 0, &err);
    double d0 = bench_now_s();
    for (int i = 0; i < steps; i++)
        if (be.ops->prefill(be.impl, s, &tok[i], 1, logits, 0, &err)) {
            printf("FAIL: decode: %s\n", err.message);
            return 1;
        }
    double step_us = (bench_now_s() - d0) / steps * 1e6;
    /* the same steps with plain stream-ordered launches (a graph captured without dependent
     * launches), then dependent launches again as they were */
    int pdl = kern_pdl();
    double plain_us = 0;
    for (int pass = 0; pass < 2; pass++) {
        kern_set_pdl(pass == 0 ? 0 : pdl);
        eng_graph_free(s->graph);
        s->graph = NULL;
        for (int i = 0; i < 3; i++)
            be.ops->prefill(be.impl, s, &tok[i], 1, logits, 0, &err);
        if (pass == 1)
            break;
        double p0 = bench_now_s();
        for (int i = 0; i < steps; i++)
            if (be.ops->prefill(be.impl, s, &tok[i], 1, logits, 0, &err)) {
                printf("FAIL: decode (plain launches): %s\n", err.message);
                return 1;
            }
        plain_us = (bench_now_s() - p0) / steps * 1e6;
    }
    if (getenv("BENCH_NCU")) { /* one eager step and one graph step for a profiler, then stop */
        printf("decode step (graph): %.1f us; profiling one eager and one graph step\n", step_us);
        backend_cuda_set_graph(&be, 0);
        cudaDeviceSynchronize();
        cudaProfilerStart();
        int rc = be.ops->prefill(be.impl, s, &tok[0], 1, logits, 0, &err);
        backend_cuda_set_graph(&be, 1);
        rc = rc || be.ops->prefill(be.impl, s, &tok[1], 1, logits, 0, &err);
        cudaDeviceSynchronize();
        cudaProfilerStop();
        if (rc)
            printf("FAIL: profiled step: %s\n", err.message);
        return rc ? 1 : 0;
    }
    backend_cuda_set_graph(&be, 0); /* the same steps launched one kernel at a time */
    d0 = bench_now_s();
    for (int i = 0; i < steps / 2; i++)
        if (be.ops->prefill(be.impl, s, &tok[i], 1, logits, 0, &err)) {
            printf("FAIL: eager decode: %s\n", err.message);
            return 1;
        }
    double eager_us = (bench_now_s() - d0) / (steps / 2) * 1e6;
    backend_cuda_set_graph(&be, 1);
    /* per layer, eager, with events */
    float *us = calloc((size_t)layers, sizeof *us), head_us = 0;
    double sum_us[4] = {0}, sum_bytes[4] = {0};
    int cnt[4] = {0};
    for (int rep = 0; rep < 3; rep++)
        if (cuda_time_layers(s, tok[rep], us, &head_us, &err)) {
            printf("FAIL: timing: %s\n", err.message);
            return 1;
        }
    /* op profile of one more eager step: GPU time between consecutive ops, summed by op */
    cuda_backend *cb = be.impl;
    cb->prof.on = 1;
    cb->prof.n = 0;
    if (cuda_time_layers(s, tok[5], us, &head_us, &err)) {
        printf("FAIL: profile: %s\n", err.message);
        return 1;
    }
    cb->prof.on = 0;
    op_profile decode;
    if (collect_profile(cb, &decode))
        return 1;
    print_profile(&decode, "decode op profile (one eager step; us summed over the step; the "
                           "op groups' floors are in the projection, printed last)");
    /* the same step as the graph runs it: a graph step first, so that the step's own graph is
     * current beside the profiled one */
    graph_profile in_graph;
    int graph_profiled = be.ops->prefill(be.impl, s, &tok[6], 1, logits, 0, &err) == GLM_OK &&
                         profile_in_graph(s, &in_graph, &err) == 0;
    if (graph_profiled)
        print_graph_profile(&in_graph);
    else /* the eager projection still follows; the run fails */
        printf("FAIL: the in-graph decode op profile: %s\n", err.message);
    int n = s->n;
    glm_traffic_params run = bench_traffic(&be, n);
    glm_traffic_table step_t, layer_t;
    if (glm_traffic_step(c, &run, &step_t, &err) != GLM_OK) {
        printf("FAIL: traffic: %s\n", err.message);
        return 1;
    }
    for (int li = 0; li < layers; li++) {
        int type = c->attn[li] == GLM_ATTN_DSA ? 1 : 0;
        if (!c->moe[li])
            type = 2;
        sum_us[type] += us[li];
        glm_traffic_layer(c, &run, li, &layer_t);
        sum_bytes[type] += glm_traffic_bytes(&layer_t);
        cnt[type]++;
    }
    double head_bytes = step_t.op[GLM_OP_FINAL_NORM].bytes + step_t.op[GLM_OP_LM_HEAD].bytes;
    double total_bytes = glm_traffic_bytes(&step_t);
    const char *tname[3] = {"KDA + MoE", "DSA + MoE", "KDA + dense"};
    printf("\n-- decode, 1 row, context %d (us; floor = model/traffic.c's bytes / copy bandwidth)\n", n);
    printf("%-14s %6s %10s %10s %10s %8s\n", "layer type", "count", "us/layer", "MB/layer",
           "floor us", "of floor");
    for (int t = 0; t < 3; t++) {
        if (!cnt[t])
            continue;
        double u = sum_us[t] / cnt[t], b = sum_bytes[t] / cnt[t], fl = b / bw * 1e6;
        printf("%-14s %6d %10.1f %10.1f %10.1f %7.0f%%\n", tname[t], cnt[t], u, b / 1e6, fl,
               100 * fl / u);
    }
    double hfl = head_bytes / bw * 1e6;
    printf("%-14s %6d %10.1f %10.1f %10.1f %7.0f%%\n", "norm + head", 1, head_us, head_bytes / 1e6,
           hfl, 100 * hfl / head_us);
    double floor_us = total_bytes / bw * 1e6;
    printf("whole step (graph): %.1f us = %.1f tok/s; floor %.1f us; %.0f%% of the floor "
           "(without the graph: %.1f us)\n", step_us, 1e6 / step_us, floor_us,
           100 * floor_us / step_us, eager_us);
    printf("whole step (graph) with plain launches: %.1f us; with dependent launches%s: %.1f us "
           "(%.3f of the plain)\n", plain_us, pdl ? "" : " (off: cuda_pdl = off, GLMCHAT_CUDA_PDL=0)", step_us,
           step_us / plain_us);
    print_launches(s); /* (a failed count is said and the bench goes on) */
    int failed = bench_positions(&be, positions, n_positions, tok, logits, bw, &err) != 0;
    if (failed) /* the prefill's tables still follow */
        printf("FAIL: decode at positions %s: %s\n", pos_arg, err.message);
    if (bench_prefill(&m, &params, &be, &s, sizes, n_sizes, chunks, n_chunks, bw))
        return 1;
    int sms = gpu_sms("projection");
    if (sms < 0)
        return 1;
    /* the ops' kernels alone (no launch gaps, no event nodes) spread over the graph step: the one
     * bench/BENCHMARKS.md uses; the in-graph and eager profiles for comparison */
    op_profile alone;
    char why[256] = "";
    int have_alone = graph_profiled && op_profile_alone(&in_graph.prof, in_graph.alone_us,
                                                        in_graph.op_kernels, &alone, why,
                                                        sizeof why) == 0;
    if (graph_profiled && !have_alone)
        printf("FAIL: the projection from the ops' kernels alone: %s\n", why);
    if (have_alone)
        print_projection(sms, &alone, "the main stream's ops' kernels each replayed alone (the one "
                         "bench/BENCHMARKS.md uses)", c, &run, step_us, bw);
    op_profile chained;
    int have_chained = have_alone && op_profile_alone(&in_graph.prof, in_graph.chain_us,
                                                      in_graph.op_kernels, &chained, why,
                                                      sizeof why) == 0;
    if (have_chained)
        print_projection(sms, &chained, "the same kernels each timed as copies one after another "
                         "in one graph (for comparison: no graph launch in each kernel's time)",
                         c, &run, step_us, bw);
    else if (have_alone)
        printf("FAIL: the projection from the ops' kernels chained: %s\n", why);
    failed |= have_alone && !have_chained;
    if (graph_profiled)
        print_projection(sms, &in_graph.prof, "the in-graph decode op profile (for comparison: "
                         "its event nodes cost each op a few us)", c, &run, step_us, bw);
    print_projection(sms, &decode, "the eager decode op profile (for comparison)", c, &run,
                     step_us, bw);
    failed |= graph_profiled && !have_alone;
    failed |= !graph_profiled;
    failed |= bench_mtp(&be, &m, tok, ctx0, logits, step_us); /* last: it changes the model */
    be.ops->state_free(s);
    backend_close(&be);
    return failed;
}
