/* chat_engine.h: the chat's reply source backed by the engine (glm.h): opens the model with the
 * configured backend and ranks, one session per chat, generate and cancel. */
#ifndef GLMCHAT_APP_CHAT_ENGINE_H
#define GLMCHAT_APP_CHAT_ENGINE_H

#include <stddef.h>

#include "app/chat.h"
#include "app/config.h"
#include "app/engine_log.h"

typedef struct chat_engine chat_engine;

/* Opens cfg's model (cfg->model_dir; NULL is an error naming the ways to give one); the
 * engine's lines (its notes, and with verbose its plan) go to log, which must outlive the
 * engine. NULL with err on failure. */
chat_engine *chat_engine_open(const app_config *cfg, app_log *log, char *err, size_t errlen);
void chat_engine_close(chat_engine *ce);
chat_source chat_engine_source(chat_engine *ce);

/* The backend cfg runs on, as the engine resolves it: cfg->backend, else "cuda" where a GPU is
 * found, else "cpu" (what the status line shows; never "auto"). */
const char *chat_engine_backend_name(const app_config *cfg);

#endif
