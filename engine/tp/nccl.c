/* nccl.c: the nccl data transport (nccl.h): libnccl loaded on first use, a non-blocking
 * communicator polled against deadlines, and rank-order all-gathers on host or device memory. */
#include "tp/nccl.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <nccl.h>

_Static_assert(sizeof(ncclUniqueId) == TP_NCCL_ID_BYTES, "NCCL_ID carries a whole ncclUniqueId");

#define NCCL_LIBRARY "libnccl.so.2"

/* The few entry points glmchat uses, found in libnccl.so.2 at run time: a CUDA build linked to
 * libnccl would not start at all on a machine without it, even with one GPU and no ranks. */
typedef struct nccl_api {
    ncclResult_t (*get_unique_id)(ncclUniqueId *id);
    ncclResult_t (*init_rank_config)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                     ncclConfig_t *config);
    ncclResult_t (*async_error)(ncclComm_t comm, ncclResult_t *async);
    ncclResult_t (*all_gather)(const void *send, void *recv, size_t count, ncclDataType_t type,
                               ncclComm_t comm, cudaStream_t stream);
    ncclResult_t (*abort)(ncclComm_t comm);
    ncclResult_t (*destroy)(ncclComm_t comm);
    const char *(*error_string)(ncclResult_t r);
} nccl_api;

static nccl_api api;
static int api_state; /* 0 not tried, 1 loaded, -1 failed (api_why says why) */
static char api_why[512];
static pthread_mutex_t api_lock = PTHREAD_MUTEX_INITIALIZER;

static int load_symbol(void *lib, const char *name, void **out)
{
    *out = dlsym(lib, name);
    if (*out)
        return 0;
    snprintf(api_why, sizeof api_why, "%s has no %s (NCCL 2.14 or newer is needed)", NCCL_LIBRARY, name);
    return -1;
}

static int load_api_locked(void)
{
    void *lib = dlopen(NCCL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(api_why, sizeof api_why, "NCCL is not installed here (%s); install NCCL 2.14 or "
                 "newer (libnccl2) or use --transport tcp", why ? why : NCCL_LIBRARY " not found");
        return -1;
    }
    struct { const char *name; void **slot; } syms[] = {
        {"ncclGetUniqueId", (void **)&api.get_unique_id},
        {"ncclCommInitRankConfig", (void **)&api.init_rank_config},
        {"ncclCommGetAsyncError", (void **)&api.async_error},
        {"ncclAllGather", (void **)&api.all_gather},
        {"ncclCommAbort", (void **)&api.abort},
        {"ncclCommDestroy", (void **)&api.destroy},
        {"ncclGetErrorString", (void **)&api.error_string},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (load_symbol(lib, syms[i].name, syms[i].slot)) {
            dlclose(lib);
            return -1;
        }
    return 0; /* the library stays loaded for the process's life */
}

static glm_status load_api(glm_error *err)
{
    pthread_mutex_lock(&api_lock);
    if (api_state == 0)
        api_state = load_api_locked() == 0 ? 1 : -1;
    int state = api_state;
    pthread_mutex_unlock(&api_lock);
    if (state == 1)
        return GLM_OK;
    return glm_error_set(err, GLM_ERR_UNSUPPORTED, "--transport nccl: %s", api_why);
}

static glm_status nccl_fail(glm_error *err, const char *what, ncclResult_t r)
{
    return glm_error_set(err, GLM_ERR_PEER, "--transport nccl: %s failed: %s", what,
                         api.error_string ? api.error_string(r) : "unknown NCCL error");
}

glm_status tp_nccl_unique_id(uint8_t id[TP_NCCL_ID_BYTES], glm_error *err)
{
    glm_status st = load_api(err);
    if (st != GLM_OK)
        return st;
    ncclUniqueId u;
    ncclResult_t r = api.get_unique_id(&u);
    if (r != ncclSuccess)
        return nccl_fail(err, "making the communicator's unique id", r);
    memcpy(id, u.internal, TP_NCCL_ID_BYTES);
    return GLM_OK;
}

/* ---- the transport ------------------------------------------------------------------------ */

typedef struct tp_nccl {
    tp_transport base;
    ncclComm_t comm;
    int world;
    cudaStream_t stream;
    float *d_buf;        /* staging for host all-gathers: world*n gathered, then n mine */
    size_t d_floats;
    int broken;          /* aborted after a failed wait: every later call is refused */
} tp_nccl;

static void nap_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls the communicator until its queued work is accepted (non-blocking mode answers
 * ncclInProgress meanwhile), the deadline passes, or the heartbeat reports the peer gone. */
static glm_status wait_comm(tp_nccl *c, int64_t deadline_ms, const char *what, glm_error *err)
{
    for (;;) {
        ncclResult_t async = ncclSuccess;
        ncclResult_t r = api.async_error(c->comm, &async);
        if (r != ncclSuccess)
            return nccl_fail(err, what, r);
        if (async == ncclSuccess)
            return GLM_OK;
        if (async != ncclInProgress)
            return nccl_fail(err, what, async);
        if (c->base.aborted && c->base.aborted(c->base.abort_user))
            return glm_error_set(err, GLM_ERR_PEER, "--transport nccl: %s stopped: a rank failed", what);
        if (tp_now_ms() >= deadline_ms)
            return glm_error_set(err, GLM_ERR_PEER, "--transport nccl: %s did not finish in time; "
                                 "every rank must run it (is a worker stopped?)", what);
        nap_ms(1);
    }
}

/* Waits for stream's work (gathers and copies), bounded as wait_comm. */
static glm_status wait_stream(tp_nccl *c, cudaStream_t stream, int64_t deadline_ms, glm_error *err)
{
    for (;;) {
        cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaSuccess)
            return GLM_OK;
        if (e != cudaErrorNotReady)
            return glm_error_set(err, GLM_ERR_IO, "--transport nccl: the gather's stream failed: %s",
                                 cudaGetErrorString(e));
        glm_status st = wait_comm(c, deadline_ms, "an all-gather", err);
        if (st != GLM_OK)
            return st;
        if (tp_now_ms() >= deadline_ms)
            return glm_error_set(err, GLM_ERR_PEER, "--transport nccl: an all-gather did not finish "
                                 "in time; every rank must run it (is a worker stopped?)");
        nap_ms(0);
    }
}

static glm_status grow(tp_nccl *c, size_t floats, glm_error *err)
{
    if (floats <= c->d_floats)
        return GLM_OK;
    cudaFree(c->d_buf);
    c->d_buf = NULL;
    c->d_floats = 0;
    cudaError_t e = cudaMalloc((void **)&c->d_buf, floats * sizeof(float));
    if (e != cudaSuccess)
        return glm_error_set(err, GLM_ERR_NOMEM, "--transport nccl: no device memory for a %zu-float "
                             "exchange: %s", floats, cudaGetErrorString(e));
    c->d_floats = floats;
    return GLM_OK;
}

static glm_status enqueue_gather(tp_nccl *c, const float *d_mine, float *d_gathered, size_t n,
                                 cudaStream_t stream, glm_error *err)
{
    ncclResult_t r = api.all_gather(d_mine, d_gathered, n, ncclFloat32, c->comm, stream);
    if (r != ncclSuccess && r != ncclInProgress)
        return nccl_fail(err, "an all-gather", r);
    return GLM_OK;
}

/* Host floats: mine to the device, the gather (rank order is NCCL's: rank r's floats at r*n),
 * the whole back; every rank ends with the same bits, since nothing is summed here. seq is not
 * sent: NCCL runs the collectives of one communicator in the order they were queued. */
static glm_status nccl_all_gather(tp_transport *t, const float *mine, float *gathered,
                                  size_t stride, size_t n, uint64_t seq, int64_t deadline_ms,
                                  glm_error *err)
{
    (void)seq;
    tp_nccl *c = (tp_nccl *)t;
    if (stride != n) /* NCCL packs the ranks' floats; the rank pieces that need a stride are rdma's */
        return glm_error_set(err, GLM_ERR_ARG, "--transport nccl gathers packed ranks only (a stride "
                             "of %zu floats for %zu)", stride, n);
    if (c->broken)
        return glm_error_set(err, GLM_ERR_PEER, "--transport nccl: the communicator was aborted "
                             "after a failure; start every rank again");
    size_t all = (size_t)c->world * n;
    glm_status st = grow(c, all + n, err);
    if (st != GLM_OK)
        return st;
    float *d_mine = c->d_buf + all;
    cudaError_t e = cudaMemcpyAsync(d_mine, mine, n * sizeof(float), cudaMemcpyHostToDevice, c->stream);
    if (e != cudaSuccess)
        return glm_error_set(err, GLM_ERR_IO, "--transport nccl: copying %zu floats to the GPU: %s", n,
                             cudaGetErrorString(e));
    st = enqueue_gather(c, d_mine, c->d_buf, n, c->stream, err);
    if (st == GLM_OK)
        st = wait_comm(c, deadline_ms, "an all-gather", err);
    if (st != GLM_OK)
        return st;
    e = cudaMemcpyAsync(gathered, c->d_buf, all * sizeof(float), cudaMemcpyDeviceToHost, c->stream);
    if (e != cudaSuccess)
        return glm_error_set(err, GLM_ERR_IO, "--transport nccl: copying %zu floats from the GPU: %s",
                             all, cudaGetErrorString(e));
    return wait_stream(c, c->stream, deadline_ms, err);
}

glm_status tp_nccl_wait_stream(tp_transport *t, void *stream, int timeout_ms, glm_error *err)
{
    tp_nccl *c = (tp_nccl *)t;
    if (c->broken)
        return glm_error_set(err, GLM_ERR_PEER, "--transport nccl: the communicator was aborted "
                             "after a failure; start every rank again");
    glm_status st = wait_stream(c, (cudaStream_t)stream, tp_now_ms() + timeout_ms, err);
    if (st != GLM_OK && c->comm) {
        /* the kernels of a gather whose peer is gone would wait forever: abort ends them */
        api.abort(c->comm);
        c->comm = NULL;
        c->broken = 1;
    }
    return st;
}

glm_status tp_nccl_all_gather_device(tp_transport *t, const float *d_mine, float *d_gathered,
                                     size_t n, void *stream, int timeout_ms, glm_error *err)
{
    if (!t || strcmp(t->ops->name, "nccl") != 0)
        return glm_error_set(err, GLM_ERR_ARG, "a device all-gather needs the nccl transport");
    if (n == 0)
        return glm_error_set(err, GLM_ERR_ARG, "an all-gather needs n > 0 floats");
    tp_nccl *c = (tp_nccl *)t;
    if (c->broken)
        return glm_error_set(err, GLM_ERR_PEER, "--transport nccl: the communicator was aborted "
                             "after a failure; start every rank again");
    glm_status st = enqueue_gather(c, d_mine, d_gathered, n, (cudaStream_t)stream, err);
    /* a non-blocking communicator must have taken one call before the next is made */
    return st == GLM_OK ? wait_comm(c, tp_now_ms() + timeout_ms, "queueing an all-gather", err) : st;
}

int tp_nccl_world(const tp_transport *t)
{
    return ((const tp_nccl *)t)->world;
}

static void nccl_free(tp_transport *t)
{
    tp_nccl *c = (tp_nccl *)t;
    if (c->comm) {
        /* a failed or unfinished communicator cannot be destroyed cleanly: abort it */
        ncclResult_t async = ncclSuccess;
        int healthy = api.async_error(c->comm, &async) == ncclSuccess && async == ncclSuccess &&
                      (!c->stream || cudaStreamQuery(c->stream) == cudaSuccess);
        if (healthy)
            api.destroy(c->comm);
        else
            api.abort(c->comm);
    }
    cudaFree(c->d_buf);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
}

static const tp_transport_ops nccl_ops = {
    .name = "nccl",
    .all_gather = nccl_all_gather,
    .free = nccl_free,
    .exchange = NULL,
};

tp_transport *tp_nccl_transport_new(const uint8_t id[TP_NCCL_ID_BYTES], int rank, int world,
                                    int timeout_ms, glm_error *err)
{
    if (world < 2 || world > (int)TP_MAX_RANKS || rank < 0 || rank >= world) {
        glm_error_set(err, GLM_ERR_ARG, "--transport nccl: rank %d of %d is not a rank of a split of "
                      "2 to %u", rank, world, TP_MAX_RANKS);
        return NULL;
    }
    if (load_api(err) != GLM_OK)
        return NULL;
    tp_nccl *c = calloc(1, sizeof *c);
    if (!c) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory for the nccl transport");
        return NULL;
    }
    c->base.ops = &nccl_ops;
    c->base.rank = rank;
    c->world = world;
    snprintf(c->base.peer, sizeof c->base.peer, "the %d ranks' communicator", world);
    cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        glm_error_set(err, GLM_ERR_IO, "--transport nccl: creating a stream: %s", cudaGetErrorString(e));
        c->stream = NULL;
        nccl_free(&c->base);
        return NULL;
    }
    ncclUniqueId u;
    memcpy(u.internal, id, TP_NCCL_ID_BYTES);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = api.init_rank_config(&c->comm, world, u, rank, &config);
    glm_status st = r == ncclSuccess || r == ncclInProgress
                        ? wait_comm(c, tp_now_ms() + timeout_ms, "joining the communicator", err)
                        : nccl_fail(err, "joining the communicator", r);
    if (st != GLM_OK) {
        nccl_free(&c->base);
        return NULL;
    }
    return &c->base;
}
