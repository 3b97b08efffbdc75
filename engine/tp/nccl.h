/* nccl.h: the nccl data transport: one NCCL communicator among every rank of a split (one GPU a
 * process), its unique id made by rank 0 and carried to the workers by the NCCL_ID message. */
#ifndef GLMCHAT_TP_NCCL_H
#define GLMCHAT_TP_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include "glm.h"
#include "tp/protocol.h"
#include "tp/transport.h"

/* How long the ranks wait for each other to join the communicator: every worker joins once the
 * head has linked them all, one after the other. */
#define TP_NCCL_INIT_MS 60000

/* Everything below exists only in builds with HAVE_NCCL (a CUDA build whose toolkit has nccl.h);
 * elsewhere `--transport nccl` is refused before any of it is needed (tp_transport_refusal). */
#ifdef HAVE_NCCL

/* Rank 0: a fresh unique id. libnccl.so.2 is loaded on first use, so a CUDA build still starts on
 * a machine without NCCL: there this returns GLM_ERR_UNSUPPORTED with a sentence saying so. */
glm_status tp_nccl_unique_id(uint8_t id[TP_NCCL_ID_BYTES], glm_error *err);

/* Joins the communicator of world ranks as rank (on the current GPU), giving up after timeout_ms
 * (the communicator is made non-blocking and polled, so a rank that never comes is an error, not
 * a hang). The transport's all_gather gathers world ranks' n floats (host memory, staged through
 * the device) in rank order; exchange is NULL (no star is needed). */
tp_transport *tp_nccl_transport_new(const uint8_t id[TP_NCCL_ID_BYTES], int rank, int world,
                                    int timeout_ms, glm_error *err);

/* The same all-gather on device memory, queued on stream (a cudaStream_t) and not waited for:
 * d_gathered[0 .. world*n) = rank 0's n floats, rank 1's, ... One ncclAllGather on one stream,
 * so a decode graph may capture it (the call returns once NCCL has taken it, within
 * timeout_ms). t must be a tp_nccl_transport_new transport. */
glm_status tp_nccl_all_gather_device(tp_transport *t, const float *d_mine, float *d_gathered,
                                     size_t n, void *stream, int timeout_ms, glm_error *err);

/* Waits for stream's work (device gathers among it) for at most timeout_ms, giving up at once
 * when t's abort hook reports a failed rank; on giving up the communicator is aborted, which
 * ends gathers still waiting for a peer, and the transport fails every later call. */
glm_status tp_nccl_wait_stream(tp_transport *t, void *stream, int timeout_ms, glm_error *err);

int tp_nccl_world(const tp_transport *t);

#endif

#endif
