/* chat_memory.h: the keys of reasoning memory: a SHA-256 signature of the conversation before an
 * assistant step (roles, text, tool calls without their ids) and the step's call ids.
 *
 * GLM's template renders the reasoning of every assistant step after the last user message;
 * a step shown without it (`<think></think>`) is not what the model wrote, so the chat stores
 * each tool-calling step's reasoning under these keys and puts it back where a step lacks it
 * (research/seed.md 4.6). Reasoning itself is not part of the signature, so a step with and
 * without its reasoning has the same key. */
#ifndef GLMCHAT_APP_CHAT_MEMORY_H
#define GLMCHAT_APP_CHAT_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "engine/glm.h"

#define CHAT_SIGNATURE_LEN 64 /* hex digits */

/* The signature of messages[0..n) followed by the step `step` (its tool calls count, its
 * content and reasoning do not), as 64 hex digits and a NUL. */
void chat_signature(const glm_message *messages, int n, const glm_message *step,
                    char out[CHAT_SIGNATURE_LEN + 1]);

/* "id1,id2,..." of the step's calls into out (NUL-terminated). 0, or -1 when it does not fit. */
int chat_call_ids(const glm_message *step, char *out, size_t outlen);

#endif
