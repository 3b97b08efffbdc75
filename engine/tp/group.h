/* group.h: the ranks of one split as a session sees them: a head joined to its N-1 workers (one
 * tp_rank link each), or a worker's one link to its head, with rank-order collectives over them. */
#ifndef GLMCHAT_TP_GROUP_H
#define GLMCHAT_TP_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "glm.h"
#include "tp/rank.h"

typedef struct tp_group tp_group;

/* Rank 0: connects to the workers at peers, "HOST:PORT" or several joined by commas (spaces
 * around them are ignored), in order: the first is rank 1, the next rank 2, ... Each connection
 * is tp_head_connect_rank's. An empty, repeated or surplus address (more than TP_MAX_RANKS - 1)
 * is refused naming it; one worker failing closes those already joined. */
tp_group *tp_group_connect(const char *peers, const tp_identity *id, const tp_rank_options *opts,
                           glm_error *err);

/* How many addresses peers holds (commas + 1; 0 for NULL or ""). */
int tp_group_count_peers(const char *peers);

/* A worker: its link to the head as a group (its rank and world as the head said). The group
 * does not own the link: tp_group_close frees the group only. */
tp_group *tp_group_of_worker(tp_rank *link, glm_error *err);

int tp_group_rank(const tp_group *g);
int tp_group_world(const tp_group *g);

/* gathered[0 .. world*n) = rank 0's n floats, rank 1's, ... Two ranks: the link's all-gather.
 * More: a star through the head: each worker sends its n floats to the head, which sends every
 * worker all world*n; every rank ends with the same bits. All ranks call it alike. */
glm_status tp_group_all_gather(tp_group *g, const float *mine, float *gathered, size_t n, glm_error *err);

/* 1 when the group's collectives run over one communicator on the GPUs (--transport nccl):
 * then the two calls below work; else they return GLM_ERR_UNSUPPORTED. */
int tp_group_device_collectives(const tp_group *g);
/* tp_group_all_gather on device memory, queued on stream (tp_nccl_all_gather_device). */
glm_status tp_group_all_gather_device(tp_group *g, const float *d_mine, float *d_all, size_t n,
                                      void *stream, glm_error *err);
/* Waits for stream (which holds device gathers) within the group's timeout, giving up at once
 * when a link fails; a gather that cannot finish is aborted (tp_nccl_wait_stream). */
glm_status tp_group_device_wait(tp_group *g, void *stream, glm_error *err);

/* Gathers, then sums in rank order 0, 1, ..., world-1 into buf: identical bits on every rank. */
glm_status tp_group_all_reduce(tp_group *g, float *buf, size_t n, glm_error *err);

/* Rank 0: tp_head_send_step to every worker in rank order. With more than one worker, a failed
 * group (any link) reconnects all its workers first when the step is a forward from position
 * 0, and a link failing while the step goes out fails them all, so no worker waits on the others. */
glm_status tp_group_send_step(tp_group *g, uint32_t slot, tp_step_cmd cmd, uint32_t pos,
                              const uint32_t *tokens, uint32_t n_tokens, glm_error *err);

/* This rank's forward step is over, done or failed (tp_rank_step_end on every link): the head
 * after its backend's step, so that a worker waiting for an exchange the head will not make
 * stops waiting at its timeout. */
void tp_group_step_end(tp_group *g);
/* Rank 0: tp_rank_set_cancel / tp_rank_set_note on every link. */
void tp_group_set_cancel(tp_group *g, int (*canceled)(void *user), void *user);
void tp_group_set_note(tp_group *g, void (*note)(void *user, const tp_late_wait *w), void *user);

/* GLM_OK while every link is healthy; else the first failure. */
glm_status tp_group_health(tp_group *g, glm_error *err);
int tp_group_reconnects(const tp_group *g); /* rank 0: the group's reconnects so far */
/* The worker's address (one worker), the workers' addresses joined by ", ", or the head's. */
const char *tp_group_peer(const tp_group *g);

/* Rank 0: closes every link (tp_rank_close); a worker's group: frees the group only. */
void tp_group_close(tp_group *g);

#endif
