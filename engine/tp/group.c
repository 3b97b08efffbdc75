/* group.c: a head's links to its workers, or a worker's link to its head, as one group: rank-order
 * all-gathers (the link's own for two ranks, a star through the head for more) and step fan-out. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tp/group.h"
#include "tp/nccl.h"

#define GROUP_PEERS_MAX 2048

struct tp_group {
    tp_rank *links[TP_MAX_RANKS]; /* head: links[k-1] joins worker k; worker: links[0] its head */
    int n_links;
    int index, world;
    int owns;                     /* head: the links are the group's to close */
    int reconnects;               /* head, more than one worker: the group's reconnects */
    float *scratch;
    size_t scratch_n;
    tp_transport *nccl;           /* --transport nccl: every collective goes through it */
    uint64_t nccl_seq;
    int timeout_ms;
    char peers[GROUP_PEERS_MAX];  /* for messages */
};

int tp_group_count_peers(const char *peers)
{
    if (!peers || !*peers)
        return 0;
    int n = 1;
    for (const char *p = peers; *p; p++)
        n += *p == ',';
    return n;
}

/* The i-th address of a comma list, without the spaces around it. */
static void nth_peer(const char *peers, int i, char *out, size_t cap)
{
    const char *p = peers;
    for (; i > 0 && p; i--) {
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    out[0] = '\0';
    if (!p)
        return;
    while (*p == ' ' || *p == '\t')
        p++;
    size_t n = strcspn(p, ",");
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    if (n >= cap)
        n = cap - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}

static glm_status check_peers(const char *peers, int n, glm_error *err)
{
    if (n < 1)
        return glm_error_set(err, GLM_ERR_ARG, "no worker address given (--peer HOST:PORT)");
    if (n > (int)TP_MAX_RANKS - 1)
        return glm_error_set(err, GLM_ERR_ARG, "--peer '%s' names %d workers; a split has at most %u "
                             "ranks, the head and %u workers", peers, n, TP_MAX_RANKS, TP_MAX_RANKS - 1);
    char a[256], b[256];
    for (int i = 0; i < n; i++) {
        nth_peer(peers, i, a, sizeof a);
        if (!a[0])
            return glm_error_set(err, GLM_ERR_ARG, "--peer '%s': address %d is empty; give HOST:PORT "
                                 "addresses separated by commas", peers, i + 1);
        for (int j = 0; j < i; j++) {
            nth_peer(peers, j, b, sizeof b);
            if (strcmp(a, b) == 0)
                return glm_error_set(err, GLM_ERR_ARG, "--peer '%s' names the worker %s twice; each "
                                     "rank needs a worker of its own", peers, a);
        }
    }
    return GLM_OK;
}

static tp_group *group_new(glm_error *err)
{
    tp_group *g = calloc(1, sizeof *g);
    if (!g)
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory for the ranks' group");
    return g;
}

/* --transport nccl: the refusals (build, backend) before any worker is reached, then rank 0's
 * communicator id into opts for the links' bootstraps to send. */
static glm_status make_nccl_id(tp_rank_options *opts, const tp_identity *id, glm_error *err)
{
    if (!opts->transport || strcmp(opts->transport, "nccl") != 0)
        return GLM_OK;
    glm_status st = tp_transport_refusal(opts->transport, id->backend, err);
    if (st != GLM_OK)
        return st;
#ifdef HAVE_NCCL
    st = tp_nccl_unique_id(opts->nccl_id, err);
    opts->nccl_id_set = st == GLM_OK;
#endif
    return st;
}

#ifdef HAVE_NCCL
/* A link failing stops a wait on the communicator at once, not at its deadline. */
static int group_failed(void *user)
{
    tp_group *g = user;
    for (int k = 0; k < g->n_links; k++)
        if (tp_rank_health(g->links[k], NULL) != GLM_OK)
            return 1;
    return 0;
}
#endif

/* Every rank joins the one communicator once the head has linked all workers (each worker's
 * join waits for the others within TP_NCCL_INIT_MS). */
static glm_status join_nccl(tp_group *g, const uint8_t *id, glm_error *err)
{
    glm_error local;
    if (!err)
        err = &local;
#ifdef HAVE_NCCL
    g->nccl = tp_nccl_transport_new(id, g->index, g->world, TP_NCCL_INIT_MS, err);
    if (!g->nccl)
        return err->status;
    g->nccl->aborted = group_failed;
    g->nccl->abort_user = g;
    return GLM_OK;
#else
    (void)g;
    (void)id;
    return tp_transport_refusal("nccl", 2, err);
#endif
}

tp_group *tp_group_connect(const char *peers, const tp_identity *id, const tp_rank_options *opts,
                           glm_error *err)
{
    glm_error local;
    if (!err)
        err = &local;
    int n = tp_group_count_peers(peers);
    if (check_peers(peers, n, err) != GLM_OK)
        return NULL;
    if (n > 1 && opts && opts->transport && strcmp(opts->transport, "rdma") == 0) {
        glm_error_set(err, GLM_ERR_ARG, "--transport rdma joins two ranks only (a head and one worker); "
                      "with %d workers (--peer %s) use --transport tcp", n, peers);
        return NULL;
    }
    tp_rank_options with_id = {0};
    if (opts)
        with_id = *opts;
    if (make_nccl_id(&with_id, id, err) != GLM_OK)
        return NULL;
    opts = opts ? &with_id : NULL;
    tp_group *g = group_new(err);
    if (!g)
        return NULL;
    g->owns = 1;
    g->world = n + 1;
    g->timeout_ms = opts && opts->timeout_ms > 0 ? opts->timeout_ms : TP_DEFAULT_TIMEOUT_MS;
    for (int k = 1; k <= n; k++) {
        char addr[256];
        nth_peer(peers, k - 1, addr, sizeof addr);
        size_t used = strlen(g->peers);
        snprintf(g->peers + used, sizeof g->peers - used, "%s%s", k > 1 ? ", " : "", addr);
        g->links[k - 1] = tp_head_connect_rank(addr, k, g->world, id, opts, err);
        if (!g->links[k - 1]) {
            if (n > 1) {
                glm_error why = *err;
                glm_error_set(err, why.status, "worker %d of %d (rank %d): %s", k, n, k, why.message);
            }
            tp_group_close(g);
            return NULL;
        }
        g->n_links = k;
    }
    if (opts && opts->nccl_id_set && join_nccl(g, opts->nccl_id, err) != GLM_OK) {
        tp_group_close(g);
        return NULL;
    }
    return g;
}

tp_group *tp_group_of_worker(tp_rank *link, glm_error *err)
{
    tp_group *g = group_new(err);
    if (!g)
        return NULL;
    g->links[0] = link;
    g->n_links = 1;
    g->index = tp_rank_index(link);
    g->world = tp_rank_world(link);
    g->timeout_ms = tp_rank_timeout_ms(link);
    snprintf(g->peers, sizeof g->peers, "%s", tp_rank_peer(link));
    const uint8_t *id = tp_rank_nccl_id(link);
    if (id && join_nccl(g, id, err) != GLM_OK) {
        tp_group_close(g);
        return NULL;
    }
    return g;
}

int tp_group_rank(const tp_group *g)
{
    return g->index;
}

int tp_group_world(const tp_group *g)
{
    return g->world;
}

const char *tp_group_peer(const tp_group *g)
{
    return g->peers;
}

/* Head: a link failed; every other worker is told, so none waits on an exchange that will not
 * come, and the whole group is failed until it reconnects. */
static glm_status fail_all(tp_group *g, int failed_link, glm_error *err)
{
    char text[TP_TEXT_MAX + 1];
    if (err->status == GLM_ERR_CANCELED) /* the user's cancel ended a wait for a late worker */
        snprintf(text, sizeof text, "the head's reply was canceled while worker %d (rank %d, at "
                 "%.100s) was late, so every rank stops: %.700s", failed_link + 1, failed_link + 1,
                 tp_rank_peer(g->links[failed_link]), err->message);
    else
        snprintf(text, sizeof text, "the head lost worker %d (rank %d, at %.100s), so every rank "
                 "stops: %.700s", failed_link + 1, failed_link + 1,
                 tp_rank_peer(g->links[failed_link]), err->message);
    for (int k = 0; k < g->n_links; k++)
        if (k != failed_link && tp_rank_health(g->links[k], NULL) == GLM_OK)
            tp_rank_report(g->links[k], text);
    return err->status;
}

/* The star: each worker's n floats to the head (phase 1), all world*n to each worker (phase 2). */
static glm_status star_gather(tp_group *g, const float *mine, float *gathered, size_t n, glm_error *err)
{
    glm_error local;
    if (!err)
        err = &local;
    size_t all = (size_t)g->world * n;
    if (g->index > 0) {
        tp_rank *head = g->links[0];
        glm_status st = tp_rank_exchange(head, mine, n, NULL, 0, err);
        return st == GLM_OK ? tp_rank_exchange(head, NULL, 0, gathered, all, err) : st;
    }
    if (gathered != mine)
        memmove(gathered, mine, n * sizeof *gathered);
    for (int k = 0; k < g->n_links; k++)
        if (tp_rank_exchange(g->links[k], NULL, 0, gathered + (size_t)(k + 1) * n, n, err) != GLM_OK)
            return fail_all(g, k, err);
    for (int k = 0; k < g->n_links; k++)
        if (tp_rank_exchange(g->links[k], gathered, all, NULL, 0, err) != GLM_OK)
            return fail_all(g, k, err);
    return GLM_OK;
}

glm_status tp_group_all_gather(tp_group *g, const float *mine, float *gathered, size_t n, glm_error *err)
{
    if (g->nccl)
        return tp_all_gather(g->nccl, mine, gathered, n, ++g->nccl_seq, g->timeout_ms, err);
    if (g->world == 2)
        return tp_rank_all_gather(g->links[0], mine, gathered, n, err);
    return star_gather(g, mine, gathered, n, err);
}

int tp_group_device_collectives(const tp_group *g)
{
    return g->nccl != NULL;
}

glm_status tp_group_all_gather_device(tp_group *g, const float *d_mine, float *d_all, size_t n,
                                      void *stream, glm_error *err)
{
#ifdef HAVE_NCCL
    if (g->nccl)
        return tp_nccl_all_gather_device(g->nccl, d_mine, d_all, n, stream, g->timeout_ms, err);
#else
    (void)d_mine;
    (void)d_all;
    (void)n;
    (void)stream;
#endif
    return glm_error_set(err, GLM_ERR_UNSUPPORTED, "device all-gathers need --transport nccl (the "
                         "%d ranks here use another)", g->world);
}

glm_status tp_group_device_wait(tp_group *g, void *stream, glm_error *err)
{
#ifdef HAVE_NCCL
    if (g->nccl)
        return tp_nccl_wait_stream(g->nccl, stream, g->timeout_ms, err);
#else
    (void)stream;
#endif
    return glm_error_set(err, GLM_ERR_UNSUPPORTED, "device all-gathers need --transport nccl (the "
                         "%d ranks here use another)", g->world);
}

glm_status tp_group_all_reduce(tp_group *g, float *buf, size_t n, glm_error *err)
{
    if (g->world == 2 && !g->nccl)
        return tp_rank_all_reduce(g->links[0], buf, n, err);
    size_t need = (size_t)g->world * n;
    if (g->scratch_n < need) {
        float *grown = realloc(g->scratch, need * sizeof *grown);
        if (!grown)
            return glm_error_set(err, GLM_ERR_NOMEM, "out of memory for a %zu-float exchange", n);
        g->scratch = grown;
        g->scratch_n = need;
    }
    glm_status st = tp_group_all_gather(g, buf, g->scratch, n, err);
    if (st != GLM_OK)
        return st;
    /* rank order on every rank: ((p0 + p1) + p2) + ..., so all hold the same bits */
    memcpy(buf, g->scratch, n * sizeof *buf);
    for (int r = 1; r < g->world; r++) {
        const float *p = g->scratch + (size_t)r * n;
        for (size_t i = 0; i < n; i++)
            buf[i] += p[i];
    }
    return GLM_OK;
}

/* The first failed link (its failure in err), or -1 when all are healthy. */
static int first_failed(tp_group *g, glm_error *err)
{
    for (int k = 0; k < g->n_links; k++)
        if (tp_rank_health(g->links[k], err) != GLM_OK)
            return k;
    return -1;
}

glm_status tp_group_health(tp_group *g, glm_error *err)
{
    glm_error local;
    if (!err)
        err = &local;
    return first_failed(g, err) < 0 ? GLM_OK : err->status;
}

int tp_group_reconnects(const tp_group *g)
{
    return g->world == 2 ? tp_rank_reconnects(g->links[0]) : g->reconnects;
}

/* Head, more than one worker: every link dropped first (each worker sees its session end), then
 * each joined again in rank order. */
static glm_status reconnect_all(tp_group *g, glm_error *err)
{
    for (int k = 0; k < g->n_links; k++)
        tp_head_drop(g->links[k]);
    for (int k = 0; k < g->n_links; k++) {
        if (tp_head_reconnect(g->links[k], err) != GLM_OK) {
            for (int j = 0; j < k; j++) /* the group stays failed: none keeps a half session */
                tp_head_drop(g->links[j]);
            return err->status;
        }
    }
    g->reconnects++;
    return GLM_OK;
}

void tp_group_set_cancel(tp_group *g, int (*canceled)(void *user), void *user)
{
    for (int k = 0; k < g->n_links; k++)
        tp_rank_set_cancel(g->links[k], canceled, user);
}

void tp_group_set_note(tp_group *g, void (*note)(void *user, const tp_late_wait *w), void *user)
{
    for (int k = 0; k < g->n_links; k++)
        tp_rank_set_note(g->links[k], note, user);
}

void tp_group_step_end(tp_group *g)
{
    for (int k = 0; k < g->n_links; k++)
        tp_rank_step_end(g->links[k]);
}

glm_status tp_group_send_step(tp_group *g, uint32_t slot, tp_step_cmd cmd, uint32_t pos,
                              const uint32_t *tokens, uint32_t n_tokens, glm_error *err)
{
    glm_error local;
    if (!err)
        err = &local;
    if (g->index != 0)
        return glm_error_set(err, GLM_ERR_ARG, "only rank 0 sends steps");
    if (g->nccl && first_failed(g, err) >= 0) {
        glm_error why = *err;
        return glm_error_set(err, why.status, "%s; the nccl communicator cannot take a rank back "
                             "once one failed: start every rank again", why.message);
    }
    if (g->world == 2)
        return tp_head_send_step(g->links[0], slot, cmd, pos, tokens, n_tokens, err);
    int fresh_start = pos == 0 && tp_step_is_forward(cmd);
    int failed = first_failed(g, err);
    if (failed >= 0 && !fresh_start) /* the others hear of it now, not at their next exchange */
        return fail_all(g, failed, err);
    if (failed >= 0 && reconnect_all(g, err) != GLM_OK)
        return err->status;
    glm_status st;
    for (int k = 0; k < g->n_links; k++) {
        st = tp_head_send_step(g->links[k], slot, cmd, pos, tokens, n_tokens, err);
        if (st == GLM_ERR_ARG)
            return st;
        if (st != GLM_OK)
            return fail_all(g, k, err);
    }
    return GLM_OK;
}

void tp_group_close(tp_group *g)
{
    if (!g)
        return;
    for (int k = 0; g->owns && k < g->n_links; k++)
        tp_rank_close(g->links[k]);
    tp_transport_free(g->nccl);
    free(g->scratch);
    free(g);
}
