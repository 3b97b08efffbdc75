/* op_marks.h: the CUDA backend's op-profile marks read back as op_marks (each mark's time from
 * the first), shared by bench_cuda_engine and test_cuda_engine. */
#ifndef GLMCHAT_BENCH_OP_MARKS_H
#define GLMCHAT_BENCH_OP_MARKS_H

#include "bench/op_profile.h"
#include "cuda/cuda_internal.h"
#include "kernels/engine.h"

/* Marks 0..cb->prof.n - 1 into m (t_us from mark 0; eng_event_ms waits for each): 0, or -1
 * where a mark's time could not be read. */
static inline int op_marks_read(const cuda_backend *cb, op_mark *m)
{
    for (int i = 0; i < cb->prof.n; i++) {
        float ms = 0;
        if (i > 0 && eng_event_ms(cb->prof.ev[0], cb->prof.ev[i], &ms))
            return -1;
        m[i] = (op_mark){cb->prof.what[i], cb->prof.side[i], ms * 1000.0};
    }
    return 0;
}

#endif
