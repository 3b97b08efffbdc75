/* cancel_later.h: for tests that cancel a session's feed midway: glm_cancel from another thread
 * after a delay, and the monotonic clock that times the feed it cuts. */
#ifndef GLMCHAT_TESTS_COMMON_CANCEL_LATER_H
#define GLMCHAT_TESTS_COMMON_CANCEL_LATER_H

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "glm.h"

/* Seconds on the monotonic clock. */
static inline double test_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

typedef struct test_canceler {
    glm_session *s;
    double after_s;
    pthread_t th;
} test_canceler;

static inline void *test_canceler_run(void *arg)
{
    test_canceler *c = arg;
    usleep((useconds_t)(c->after_s * 1e6));
    glm_cancel(c->s);
    return NULL;
}

/* A thread that cancels s after_s seconds from now: 0, or the pthread_create error. */
static inline int test_cancel_after(test_canceler *c, glm_session *s, double after_s)
{
    c->s = s;
    c->after_s = after_s;
    return pthread_create(&c->th, NULL, test_canceler_run, c);
}

/* Waits for that thread: 0, or the pthread_join error. */
static inline int test_cancel_join(test_canceler *c)
{
    return pthread_join(c->th, NULL);
}

#endif
