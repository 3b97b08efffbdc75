/* chat_engine.c: a chat_source over glm_engine/glm_session: the model named by the config,
 * its backend, peer, threads and engine settings (config_engine_params); the engine's notes
 * come through the log callback; glm_cancel (async-signal-safe) for Ctrl-C. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/chat_engine.h"
#include "app/demo_model.h"
#include "engine/glm.h"

struct chat_engine {
    glm_engine *engine;
    glm_session *session;
    char *model_name;
};

static glm_backend backend_of(const char *name)
{
    if (!name)
        return GLM_BACKEND_AUTO;
    return strcmp(name, "cuda") == 0 ? GLM_BACKEND_CUDA : GLM_BACKEND_CPU;
}

chat_engine *chat_engine_open(const app_config *cfg, app_log *log, char *err, size_t errlen)
{
    /* No --model, GLMCHAT_MODEL or `model =`: the embedded demo model. */
    const char *model_dir = cfg->model_dir ? cfg->model_dir : demo_model_dir();
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/model.safetensors", model_dir);
    if (!cfg->model_dir && access(probe, R_OK) != 0) {
        snprintf(err, errlen, "no model to chat with: the embedded demo model is not at %s (run make, "
                              "or give --model DIR, `model = DIR` in the config file, or GLMCHAT_MODEL)",
                 model_dir);
        return NULL;
    }
    chat_engine *ce = calloc(1, sizeof *ce);
    if (!ce) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    glm_engine_params p = glm_engine_default_params();
    p.model_dir = model_dir;
    p.backend = backend_of(cfg->backend);
    p.peer = cfg->peer;
    p.transport = cfg->transport;
    p.peer_key_file = cfg->worker_key_file;
    p.n_threads = cfg->threads;
    config_engine_params(cfg, &p);
    p.log = app_log_engine;
    p.log_user = log;
    glm_error gerr = {0};
    ce->engine = glm_engine_open(&p, &gerr);
    if (ce->engine)
        ce->session = glm_session_new(ce->engine, &gerr);
    const char *slash = strrchr(model_dir, '/');
    ce->model_name = strdup(slash && slash[1] ? slash + 1 : model_dir);
    if (!ce->engine || !ce->session || !ce->model_name) {
        snprintf(err, errlen, "cannot open the model %s: %s", model_dir,
                 gerr.message[0] ? gerr.message : "out of memory");
        chat_engine_close(ce);
        return NULL;
    }
    return ce;
}

void chat_engine_close(chat_engine *ce)
{
    if (!ce)
        return;
    glm_session_free(ce->session);
    glm_engine_close(ce->engine);
    free(ce->model_name);
    free(ce);
}

static glm_status engine_generate(void *self, const glm_request *r, glm_event_fn on_event, void *user,
                                  glm_error *err)
{
    chat_engine *ce = self;
    return glm_generate(ce->session, r, on_event, user, err);
}

static glm_status engine_measure(void *self, const glm_request *r, int *prompt_tokens, int *context,
                                 glm_error *err)
{
    chat_engine *ce = self;
    *context = glm_engine_context(ce->engine);
    return glm_count_prompt(ce->session, r, prompt_tokens, err);
}

static void engine_cancel(void *self)
{
    chat_engine *ce = self;
    glm_cancel(ce->session);
}

chat_source chat_engine_source(chat_engine *ce)
{
    chat_source s = {.generate = engine_generate, .cancel = engine_cancel, .measure = engine_measure, .self = ce, .model_name = ce->model_name,
                     .context_window = glm_engine_context(ce->engine)};
    return s;
}

const char *chat_engine_backend_name(const app_config *cfg)
{
    if (cfg->backend)
        return cfg->backend;
    return glm_cuda_available() ? "cuda" : "cpu";
}
