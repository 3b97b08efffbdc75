/* snapshot.h: a CPU conversation state saved to and loaded from one flat byte string (the
 * snapshot ops of backend.h): KDA conv windows and states, DSA latent rows, indexer caches. */
#ifndef GLMCHAT_ENGINE_CPU_SNAPSHOT_H
#define GLMCHAT_ENGINE_CPU_SNAPSHOT_H

#include <stddef.h>

#include "cpu/forward.h"

size_t cpu_snapshot_size(const cpu_state *s);
/* buf: exactly cpu_snapshot_size(s) bytes. */
glm_status cpu_snapshot_save(const cpu_state *s, void *buf, size_t n, glm_error *err);
/* Replaces s by the snapshot (made by a state of the same model), which is checked first: on an
 * error s is unchanged. The loaded length is marked (cpu_state_truncate can come back to it). */
glm_status cpu_snapshot_load(cpu_state *s, const void *buf, size_t n, glm_error *err);

#endif
