/* config.h: glmchat's settings: defaults, the config file, GLMCHAT_* environment overrides and
 * command-line flags, applied in that order (flags > env > config file > defaults).
 *
 * The file ($XDG_CONFIG_HOME/glmchat/config) is plain text, one `key = value` per line:
 *
 *     # comments start a line with '#' or ';'; blank lines are ignored
 *     model = /models/glm-5.3-flash
 *     temperature = 0.6   # a comment may follow a value
 *     system_prompt = "You are terse.\nAnswer in English."
 *
 * A bare value is the rest of the line, trimmed, up to a '#' after a blank (a comment; a '#'
 * inside a word, as in C#, is kept); a value in "quotes" takes the escapes \n \t \r \\ \"
 * and keeps every '#' inside the quotes, and may be followed by a # comment. Top-level keys come
 * before the first section.
 *
 *     [mcp.files]
 *     command = /usr/bin/my-mcp-server --root "/srv/my files"
 *     env.API_TOKEN = abc123
 *     timeout = 20
 *     trust = yes
 *
 * Top-level keys (type, default):
 *   model PATH (none: the embedded demo model)   backend cpu|cuda (auto)   peer HOST:PORT[,HOST:PORT...]
 *   transport rdma|tcp|nccl   worker_key_file PATH (none; --key-file)   threads N (0: one per core)
 *   temperature 0..10, top_p 0..1 (1 = off), top_k N (0 = off): unset, the model's own from its
 *   generation_config.json (do_sample false there: greedy)   min_p 0..1 (0)
 *   seed N (none: a fresh seed per reply)   max_tokens N (0: the model's generation_config.json
 *   max_new_tokens, else 32768; every budget is cut to what the context has left)
 *   think on|off (on)   effort low|high|max (max)   system_prompt TEXT (none)
 *   clear_thinking on|off (off: earlier turns' reasoning is sent back to the model, as the public
 *   recipe serves it, which keeps prompt reuse exact; on: dropped, as the checkpoint's template
 *   does with clear_thinking)
 *   tools on|off (on: built-in tools offered in the TUI; scripted mode also needs --allow-tools)
 *   tool_timeout SECONDS 1..3600 (30)   workspace DIR (the current directory; file tools are
 *   confined to it)   approval ask|auto|deny (ask: risky tools ask: once, this conversation,
 *   always for this tool)   always_allow NAME, NAME... (risky tools that never ask; glmchat
 *   rewrites this line when the user answers "always" or revokes it with /tools ask NAME)
 *   draft off|copy|mtp (off; drafted replies equal undrafted ones)
 *   prompt_cache_mb N (an eighth of RAM; 0: off)
 *   prompt_cache_dir DIR (none: kept states stay in memory)
 *   prompt_cache_disk_mb N (4096; the files in prompt_cache_dir stay within it, the least
 *   recently used deleted first; 0: none written)
 *   context N 1..1073741824 (the most tokens a conversation state may hold, prompt and reply,
 *   on either backend; unset: the model's max_position_embeddings)
 *   kv_cache fp8|bf16|f32 (the DSA caches' format; unset: fp8 on CUDA, f32 on the CPU, which
 *   emulates fp8 and bf16 value for value)
 *   dense bf16|q4 (the dense linears as stored, or requantized at load to 4 bits with an fp16
 *   scale per 32 inputs, on either backend; unset: bf16)
 *   rdma_hca NAME,NAME... (two ranks over RDMA: the devices to use; unset: every device whose
 *   port is ACTIVE with a RoCE v2 IPv4 GID)   rdma_gid_index 0..255 (unset: that GID scanned for)
 * Developers' switches (dev: for comparing kernels and reading plans; the engine's results do
 * not depend on them unless said):
 *   verbose on|off (dev; off: on, the engine logs its settings and, on CUDA, the memory plan)
 *   cuda_kv_index fp8|bf16|f32 (dev; the CUDA indexer caches' format; unset: kv_cache's; part
 *   of the two-rank handshake, and changes the results)
 *   cuda_graph on|off (dev; on: decode through a captured CUDA graph)
 *   cuda_pdl on|off (dev; on: kernels go out as programmatic dependent launches)
 *   cuda_gemm fixed|show|nosplit|cublas|three|onepart (dev; unset: onepart on CUDA, the CPU
 *   backend's exact products on the CPU; onepart: one cuBLASLt algorithm a weight shape, BF16
 *   weights against one power-of-two-scaled fp16 part of each input, lossy (under the fp8
 *   cache's loss), emulated by the CPU backend when named; fixed: the same algorithms over two
 *   fp16 parts of each input, exact; show: fixed, each choice logged; nosplit: fixed without
 *   split-K; cublas: cuBLAS's own choice over three bf16 parts, whose row bits depend on the
 *   chunk, for comparison only; three: fixed, every BF16 weight over three bf16 parts of each
 *   input, the form only an LM head takes otherwise)
 *   cuda_chunk 0..16384 (dev; the CUDA prefill chunk's rows, a power of two from 128; 0 or unset:
 *   the memory plan's choice, the most its room allows up to 16384; part of the two-rank
 *   handshake; the results do not depend on it)
 * [mcp.NAME] keys: command (required; words split on blanks, "..." or '...' quote, \ escapes),
 *   env.VAR (added to the server's environment), cwd DIR, timeout SECONDS 1..3600 (30),
 *   trust yes|no (no: every call asks for approval), enabled yes|no (yes).
 *   NAME is 1-32 of [A-Za-z0-9_-]; the model sees the server's tools as NAME__TOOL.
 * There is no [keys] section: the TUI's keys are fixed, and the section is refused by name.
 * Booleans accept on/off, yes/no, true/false, 1/0. A key given twice: the last one counts.
 * Unknown keys, sections and bad values are errors naming FILE:LINE and the key.
 *
 * Environment: GLMCHAT_<KEY> in upper case overrides each top-level key (GLMCHAT_MODEL,
 * GLMCHAT_TEMPERATURE, GLMCHAT_MAX_TOKENS, GLMCHAT_CUDA_GEMM ...); a bad value is an error
 * naming the variable. The older names GLMCHAT_CUDA_CONTEXT, GLMCHAT_CUDA_KV,
 * GLMCHAT_CUDA_DENSE and GLMCHAT_CUDA_VERBOSE are read for context, kv_cache, dense and verbose
 * when GLMCHAT_CONTEXT, GLMCHAT_KV_CACHE, GLMCHAT_DENSE and GLMCHAT_VERBOSE are unset. Only
 * this file reads them: the engine and its kernels read no variable (glm_engine_params). */
#ifndef GLMCHAT_APP_CONFIG_H
#define GLMCHAT_APP_CONFIG_H

#include <stddef.h>

#include "app/cli.h"
#include "engine/glm.h"

typedef enum config_approval {
    CONFIG_APPROVAL_ASK = 0, /* risky tools ask the user */
    CONFIG_APPROVAL_AUTO,    /* risky tools run without asking */
    CONFIG_APPROVAL_DENY,    /* risky tools are refused */
} config_approval;

typedef struct config_mcp_server {
    char *name;
    char **argv;     /* NULL-terminated; argv[0] is the program */
    char **env;      /* "VAR=VALUE", NULL-terminated; added to glmchat's environment */
    int n_env;
    char *cwd;       /* NULL: glmchat's working directory */
    int timeout_s;
    int trusted;     /* 1: calls need no approval */
    int enabled;
    int line;        /* where the section starts, for messages */
} config_mcp_server;

typedef struct app_config {
    char *model_dir;
    char *backend;   /* "cpu", "cuda" or NULL (auto) */
    char *peer;
    char *transport;
    char *worker_key_file; /* the key shared with the worker (--key-file) */
    int threads;
    glm_sampling sampling;
    int seed_set;    /* 0: pick a fresh seed for each reply */
    int think;
    int clear_thinking; /* 1: earlier turns' reasoning is not sent back (glm_request.clear_thinking) */
    glm_effort effort;
    char *system_prompt;
    int tools_enabled;
    int tool_timeout_s;
    char *workspace;
    config_approval approval;
    char *always_allow; /* tool names, separated by commas or blanks; NULL none */
    glm_draft draft;       /* glm_engine_params.draft: GLM_DRAFT_DEFAULT unset (off) */
    char *prompt_cache_dir; /* kept prompt states also on disk here; NULL: memory only */
    int prompt_cache_mb;   /* memory for kept prompt states; -1 unset (the engine's default), 0 off */
    int prompt_cache_disk_mb; /* disk for them in prompt_cache_dir; -1 unset (the engine's), 0 none */
    int context;           /* glm_engine_params.context: 0 unset (the engine's default) */
    glm_kv_cache kv_cache; /* glm_engine_params.kv_cache: GLM_KV_CACHE_DEFAULT unset */
    glm_dense_format dense; /* glm_engine_params.dense: GLM_DENSE_DEFAULT unset */
    char *rdma_hca;        /* glm_engine_params.rdma_hca: NULL every usable device */
    int rdma_gid_index;    /* -1 unset (scan for the RoCE v2 IPv4 entry) */
    int verbose;           /* glm_engine_params.verbose */
    glm_cuda_params cuda;  /* glm_engine_params.cuda: the dev keys cuda_* */
    config_mcp_server *mcp;
    int n_mcp;
} app_config;

/* Fills c with the defaults. Never fails; config_free releases what later calls add. */
void config_init(app_config *c);
void config_free(app_config *c);

/* Parses a config text (len bytes, need not be NUL-terminated) named `name` in messages.
 * 0, or -1 with "NAME:LINE: ..." in err; c keeps what was read before the error. */
int config_parse(app_config *c, const char *name, const char *text, size_t len, char *err,
                 size_t errlen);

/* Reads and parses the file at path. A missing file is not an error (0, defaults kept). */
int config_load_file(app_config *c, const char *path, char *err, size_t errlen);

/* Applies GLMCHAT_<KEY> variables from the environment. 0, or -1 naming the variable. */
int config_apply_env(app_config *c, char *err, size_t errlen);

/* Applies the global flags (--model, --backend, --peer, --transport, --key-file, --context,
 * --kv-cache, --dense) where given. */
int config_apply_globals(app_config *c, const cli_globals *g, char *err, size_t errlen);

/* The engine settings of c (draft, prompt cache, context, kv_cache, dense, rdma_*, verbose,
 * cuda_*) into p; p's model, backend, peer, transport, key file and threads are left as they
 * are. The one place app_config becomes glm_engine_params. */
void config_engine_params(const app_config *c, glm_engine_params *p);

/* For the commands that read no config file (worker, logits, bench): defaults, then the
 * GLMCHAT_<KEY> variables of the engine's keys (those config_engine_params reads; a key whose
 * flag g gives does not read its variable), then g's flags, into c (config_free it after). 0,
 * or -1 naming the flag or variable and its bad value. */
int config_engine_settings(app_config *c, const cli_globals *g, char *err, size_t errlen);
/* The engine params of a command that reads no config file (bench, logits, worker):
 * glm_engine_default_params() with config_engine_settings' keys applied; c keeps the strings p
 * points to (config_free it once the engine is closed, also when this fails). The caller sets
 * the model, backend, threads and log. 0, or -1 with the message in err. */
int config_command_params(app_config *c, const cli_globals *g, glm_engine_params *p, char *err,
                          size_t errlen);

/* 1 when key is a developer's switch (marked dev in the list above). */
int config_key_is_dev(const char *key);

/* Sets one top-level key from text, as the file would (for flags and slash commands).
 * `where` names the source in messages ("--think", "GLMCHAT_SEED"). 0 or -1. */
int config_set(app_config *c, const char *key, const char *value, const char *where, char *err,
               size_t errlen);

/* Defaults, file at path, environment, then g: the whole chain. 0 or -1 with err. */
int config_load(app_config *c, const char *path, const cli_globals *g, char *err, size_t errlen);

const config_mcp_server *config_find_mcp(const app_config *c, const char *name);
const char *config_effort_name(glm_effort e);

#endif
