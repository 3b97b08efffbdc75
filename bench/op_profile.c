/* op_profile.c: per-op sums from the mark times of an op profile on two streams (op_profile.h);
 * pure C, so that a CPU test checks the attribution by hand. */
#include "bench/op_profile.h"

#include <stdio.h>
#include <string.h>

/* The index of label in p, added when new; -1 when p is full. */
static int slot_of(op_profile *p, const char *label)
{
    for (int k = 0; k < p->n; k++)
        if (strcmp(p->op[k].label, label) == 0)
            return k;
    if (p->n >= OP_PROFILE_MAX)
        return -1;
    p->op[p->n].label = label;
    return p->n++;
}

int op_profile_build(const op_mark *m, int n, op_profile *p, char *why, size_t why_size)
{
    memset(p, 0, sizeof *p);
    int have[2] = {0, 0};
    double last[2] = {0, 0};
    for (int i = 0; i < n; i++) {
        int side = m[i].side ? 1 : 0;
        if (m[i].label) {
            if (!have[side]) {
                snprintf(why, why_size, "mark %d ('%s') on the %s stream has no earlier mark on "
                         "that stream to time it from", i, m[i].label, side ? "side" : "main");
                return -1;
            }
            int k = slot_of(p, m[i].label);
            if (k < 0) {
                snprintf(why, why_size, "more than %d op labels (OP_PROFILE_MAX in "
                         "bench/op_profile.h); '%s' is one too many", OP_PROFILE_MAX, m[i].label);
                return -1;
            }
            double us = m[i].t_us - last[side];
            p->calls[k]++;
            if (side) {
                p->side_us[k] += us;
                p->side_us_total += us;
            } else {
                p->op[k].us += us;
                p->total_us += us;
            }
        }
        have[side] = 1;
        last[side] = m[i].t_us;
    }
    return 0;
}

int op_profile_alone(const op_profile *p, const double *alone, const int *kernels, op_profile *out,
                     char *why, size_t why_size)
{
    *out = *p;
    out->total_us = 0;
    for (int k = 0; k < p->n; k++) {
        if (p->op[k].us <= 0) { /* the side stream's, or an op of no time */
            out->op[k].us = 0;
            continue;
        }
        if (kernels[k] > 0 && alone[k] < 0) {
            snprintf(why, why_size, "'%s' on the main stream has kernels that were not timed "
                     "alone", p->op[k].label);
            return -1;
        }
        out->op[k].us = kernels[k] > 0 ? alone[k] : p->op[k].us;
        out->total_us += out->op[k].us;
    }
    return 0;
}
