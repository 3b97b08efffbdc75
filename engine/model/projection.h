/* projection.h: a decode step projected onto another machine (two DGX Sparks) op by op, from the
 * per-op times measured here and the per-op bytes of model/traffic.c; formulas in projection.c. */
#ifndef GLMCHAT_ENGINE_MODEL_PROJECTION_H
#define GLMCHAT_ENGINE_MODEL_PROJECTION_H

#include "model/traffic.h"

/* The machine a step is projected onto. */
typedef struct glm_target {
    double bytes_per_s; /* its memory bandwidth */
    int sms;            /* its streaming multiprocessors */
    int exchanges;      /* rank exchanges a step (after each attention block and each FFN) */
    double exchange_us; /* the time of one */
} glm_target;

/* Two DGX Sparks (GB10: 273 GB/s, 48 SMs) over RDMA: 45 layers x 2 exchanges of ~11 us. */
#define GLM_TARGET_SPARKS ((glm_target){273e9, 48, 90, 11.0})

/* One op (or group of ops measured under one label set) of the step. */
typedef struct glm_projection_op {
    const char *name;
    double calls;          /* calls in the projected step */
    double target_bytes;   /* bytes a call moves on a target rank */
    double measured_bytes; /* bytes a call moved in the measured run */
    double measured_us;    /* a call's measured time */
} glm_projection_op;

/* Per call, in microseconds: lower = max(target bytes / target bandwidth, measured time); upper =
 * the same with the measured time's non-memory part (measured time - measured bytes / measured
 * bandwidth, at least 0) scaled by measured_sms / target sms. */
void glm_project_op(const glm_projection_op *op, double measured_bytes_per_s, int measured_sms,
                    const glm_target *t, double *lower_us, double *upper_us);

/* The step: the ops' bounds times their calls, summed, plus the target's exchanges. */
void glm_project_step(const glm_projection_op *ops, int n, double measured_bytes_per_s,
                      int measured_sms, const glm_target *t, double *lower_us, double *upper_us);

/* ---- from a decode op profile (the CUDA backend's labels) ---------------------------------- */

/* A profile's label and the GPU time summed over its calls in the measured step. */
typedef struct glm_label_time {
    const char *label;
    double us;
} glm_label_time;

/* The groups the projection reports: each the decode path's labels (engine/cuda/forward.c)
 * whose time it takes, the traffic ops whose bytes it takes, and the op whose call count scales
 * it from the measured model to the projected one. */
typedef struct glm_projection_group {
    const char *name;
    const char *const *labels;  /* NULL-terminated */
    unsigned long ops;          /* bit (1 << op) per glm_traffic_op */
    glm_traffic_op calls_of;
} glm_projection_group;

extern const glm_projection_group glm_decode_groups[];
extern const int glm_decode_group_count;

/* One glm_projection_op per group (out: glm_decode_group_count + 1 of them; the last gathers
 * labels no group knows, at 0 bytes and their measured time, for a step as measured): time per
 * call = the group's labels' time x time_scale / its calls in `measured`; calls = its calls in
 * `target`. unknown (optional, up to max_unknown) receives the labels no group knows; returns
 * their count. */
int glm_projection_from_profile(const glm_label_time *times, int n_times, double time_scale,
                                const glm_traffic_table *measured, const glm_traffic_table *target,
                                glm_projection_op *out, const char **unknown, int max_unknown);

#endif
