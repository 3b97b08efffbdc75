/* prefill_projection.h: a prefill chunk projected onto another machine (two DGX Sparks) group by
 * group, from each op group's FLOPs and bytes and the times measured here; formulas in the .c. */
#ifndef GLMCHAT_ENGINE_MODEL_PREFILL_PROJECTION_H
#define GLMCHAT_ENGINE_MODEL_PREFILL_PROJECTION_H

#include "model/config.h"

/* The op groups of a prefill chunk (the CUDA backend's prefill labels map onto them). */
typedef enum glm_prefill_group {
    GLM_PF_EXPERTS,   /* the routed experts (EXL3 grouped by expert, or dense) */
    GLM_PF_DENSE,     /* every other weight product: attention, KDA, indexer, shared expert, router,
                       * HC mixing, dense MLP, LM head */
    GLM_PF_KDA,       /* the KDA conv, norms, gates, delta rule and gated norm */
    GLM_PF_ATTENTION, /* the latent attention with its absorb and expand, the indexer's scores */
    GLM_PF_REST,      /* norms, HC mixes and updates, routing, SwiGLU, sums, copies */
    GLM_PF_GROUPS
} glm_prefill_group;

extern const char *const glm_prefill_group_names[GLM_PF_GROUPS];

/* The group of a prefill profile label (engine/cuda/forward.c's op names); GLM_PF_REST for any
 * label no group names. */
glm_prefill_group glm_prefill_group_of(const char *label);

/* How the weights are stored, for the bytes a chunk reads, and how many tensor products the
 * kernels issue for each useful one (they split an f32 operand into 16-bit parts to keep its
 * precision; a part of 0 counts as 1: no split). */
typedef struct glm_prefill_format {
    double dense_bytes;  /* bytes a dense weight (2: bf16, 0.5 + scales: q4) */
    int expert_bits;     /* the routed experts' EXL3 bits */
    double cache_bytes;  /* bytes a latent or indexer value in the cache (1: fp8) */
    double dense_parts;  /* the dense weight products (router, shared expert and MLPs included;
                          * not the f32 HC mixing products, which run on the FMA pipes) */
    double absorb_parts; /* the absorbed query and the value expansion */
    double attend_parts; /* the latent attention's scores and weighted sums */
    double index_parts;  /* the indexer's pooled scores */
} glm_prefill_format;

/* FLOPs, tensor work and device bytes of each group for one chunk of `rows` rows whose first
 * position is pos, on one rank holding config c (a two-rank config as cuda_plan_rank_config
 * halves it); the LM head is left out (it runs on one row of the last chunk). flops: the
 * model's (what MFU counts); tensor: the products the kernels issue, each useful FLOP times its
 * parts (the FLOPs on the FMA pipes once), which bounds a tensor-bound machine. GLM_PF_REST gets
 * 0 of all three: its ops are projected from their measured time (glm_project_prefill_group's
 * rest_scale). */
void glm_prefill_costs(const glm_config *c, int rows, double pos, const glm_prefill_format *f,
                       double flops[GLM_PF_GROUPS], double tensor[GLM_PF_GROUPS],
                       double bytes[GLM_PF_GROUPS]);

/* The machine a chunk is projected onto. */
typedef struct glm_prefill_target {
    double flops_per_s;      /* dense bf16 (fp16) tensor rate with f32 accumulation */
    int sms;                 /* multiprocessors (integer and scalar work scales with them) */
    double bytes_per_s;      /* memory bandwidth */
    double link_bytes_per_s; /* the rank exchange's link */
    double exchange_us;      /* the fixed cost of one exchange */
} glm_prefill_target;

/* Two DGX Sparks: GB10 273 GB/s; 62.5 TFLOP/s bf16 dense (NVIDIA publishes 1 PFLOP of FP4 with
 * sparsity; /work/shared/research gives no bf16 figure, so: halved for dense, a quarter of that
 * for bf16, halved again for f32 accumulation on this GeForce-class tensor core - an
 * assumption the bench prints); one RDMA rail 12 GB/s (ib_write_bw ~96 Gb/s a rail,
 * research/comms.md) and 11 us an exchange. The rdma transport stripes a payload over every
 * HCA it is given, so a pair cabled and addressed on both twins moves about twice that
 * (~190 Gb/s by ib_write_bw): GLM_PREFILL_RAILS_BOTH times the link. */
#define GLM_PREFILL_SPARKS ((glm_prefill_target){62.5e12, 48, 273e9, 12e9, 11.0})
#define GLM_PREFILL_RAILS_BOTH 2

/* The machine the chunk ran on: its measured rates and its multiprocessors. */
typedef struct glm_prefill_here {
    double flops_per_s, bytes_per_s; /* cuBLAS bf16 and copy bandwidth, measured in the run */
    int sms;
} glm_prefill_here;

/* One group's projection, per chunk, in microseconds, from the tensor work each machine issues
 * for it (glm_prefill_costs' tensor: here_flops and target_flops) and its bytes (rest_scale: for a group of no counted
 * FLOPs or bytes, GLM_PF_REST, the target's calls of its ops over here's: the bench passes its
 * layers over here's, most of those ops (norms, HC, routing) running whole on every rank; the
 * halved SwiGLU of the dense MLPs is a small part):
 *   here   = max(here FLOPs / here rate, here bytes / here bandwidth)     its floor here
 *   floor  = max(target FLOPs / target rate, target bytes / target bandwidth)
 *   work   = max(target FLOPs / here rate, target bytes / here bandwidth) / here: the target's
 *            work over here's, both at here's rates
 *   at_eff = floor x measured / here: the same fraction of its floor as it ran here, all of the
 *            time as if bound by the tensor cores or memory, which the target has 14x and 11x
 *            less of (the pessimistic reading); where here is 0, measured x rest_scale x here
 *            bandwidth / target bandwidth
 *   by_sm  = max(floor, measured x work x here SMs / target SMs): all of the time as if bound by
 *            the multiprocessors' integer and scalar pipes (2.75x fewer: the optimistic reading;
 *            a kernel bound by the trellis decode here, as the grouped EXL3 experts are, moves so);
 *            where here is 0, measured x rest_scale x here SMs / target SMs
 * Where here's tensor rate and bandwidth exceed the target's by more than its SMs do (an H100 or
 * H200 against a GB10: 14x and 11x against 2.75x), a group's time there lies between by_sm and
 * at_eff as far as its time here splits between the two kinds of work. */
void glm_project_prefill_group(double measured_us, double here_flops, double here_bytes,
                               const glm_prefill_here *h, double target_flops, double target_bytes,
                               double rest_scale, const glm_prefill_target *t, double *floor_us,
                               double *at_eff_us, double *by_sm_us);

/* The rank exchanges of a chunk: two a layer (after the attention block and the FFN), each
 * rows x hidden f32 partial sums over the link plus its fixed cost, and one more a layer of a
 * float (the ranks' cancel flags summed: backend.h). */
double glm_prefill_exchange_us(const glm_prefill_target *t, int layers, int rows, int hidden);

/* The same exchanges where the chunk runs as two halves of half_rows rows each whose phases
 * interleave (the CUDA backend's layers_in_halves: the attention of half 0, of half 1, the FFN of
 * half 0, ...; each half's partial sums go over the link while the other half's next phase runs),
 * the time they leave the GPU idle, with compute_us the two halves' work (every phase taken as
 * compute_us / (4 x layers)): each of the first 4 x layers - 1 exchanges waits max(0, e - phase)
 * where e is one half's exchange (half_rows x hidden f32 plus the fixed cost), the last waits all
 * of e, and the cancel flags' exchanges are counted whole as glm_prefill_exchange_us does. With
 * phases of unequal work (attention against FFN, KDA against DSA layers) the wait is at least
 * this: the sum of max(0, e - phase) over the real phases, of which the even split is the least;
 * the two copies an exchange makes on the GPU (the partial out, the sum in) are not counted. */
double glm_prefill_exchange_halves_us(const glm_prefill_target *t, int layers, int half_rows,
                                      int hidden, double compute_us);

#endif
