/* op_profile.h: an op profile from the times of marks recorded between ops on two streams (the
 * CUDA decode step's main and side streams): per-op sums, the side stream's ops kept apart. */
#ifndef GLMCHAT_BENCH_OP_PROFILE_H
#define GLMCHAT_BENCH_OP_PROFILE_H

#include <stddef.h>

#include "model/projection.h"

enum { OP_PROFILE_MAX = 128 };

/* One mark, in the order recorded: the op it ends (label; NULL: a starting point that ends no op,
 * such as the step's start or where a fork lets the side stream go), its stream (side: 0 the
 * main stream, 1 the side stream) and its time in microseconds from any fixed origin. */
typedef struct op_mark {
    const char *label;
    int side;
    double t_us;
} op_mark;

/* Per label (first seen first): op[k].us is the time it holds the main stream, the step's
 * critical path; side_us[k] its own time on the side stream, overlapping the main stream's ops
 * and so in no total; calls[k] its marks. total_us: the main stream's ops summed (the step from
 * its first mark to its last when only the first main mark is a starting point); side_us_total:
 * the side stream's ops summed. */
typedef struct op_profile {
    glm_label_time op[OP_PROFILE_MAX];
    double side_us[OP_PROFILE_MAX];
    int calls[OP_PROFILE_MAX], n;
    double total_us, side_us_total;
} op_profile;

/* Builds p from marks m[0..n): a labelled mark is charged the time since the previous mark on its
 * own stream (a main-stream op: from the end of the one before it, so waits for the side stream
 * at a join go to the op after the join; a side-stream op: from the previous side op's end or the
 * fork's starting point, whichever came last in the list). Returns 0, or -1 with why set (a
 * labelled mark with no earlier mark on its stream, or more than OP_PROFILE_MAX labels). */
int op_profile_build(const op_mark *m, int n, op_profile *p, char *why, size_t why_size);

/* The main stream's ops of p with their kernels' own times instead (alone[k]: op k's kernels,
 * each replayed alone, summed over its calls; kernels[k]: how many): out holds p's labels and
 * calls, op[k].us = alone[k] for an op on the main stream with kernels, p's time for one without
 * (a copy), 0 for the side stream's ops (they overlap the main stream: out leaves them to their
 * bytes), side_us as p's; total_us their sum. Returns 0, or -1 with why set when a main-stream
 * op's kernels were not all timed (alone[k] < 0). */
int op_profile_alone(const op_profile *p, const double *alone, const int *kernels, op_profile *out,
                     char *why, size_t why_size);

#endif
