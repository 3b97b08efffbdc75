/* config.c: reads glmchat's config file (`key = value` lines, [mcp.NAME] sections),
 * GLMCHAT_* environment overrides and global flags into one app_config (format in config.h). */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/config.h"
#include "base/errbuf.h"
#include "base/setting.h"
#include "base/suggest.h"

#define CONFIG_MAX_FILE (1 << 20)
#define CONFIG_MAX_MCP 64

typedef enum key_type { KT_STRING, KT_CHOICE, KT_INT, KT_FLOAT, KT_BOOL, KT_U64 } key_type;

typedef struct key_spec {
    const char *name;
    key_type type;
    const char *choices; /* KT_CHOICE: '|'-separated */
    double min, max;     /* KT_INT, KT_FLOAT */
    const char *old_env; /* an older variable read when GLMCHAT_<KEY> is unset, or NULL */
    int flags;           /* KF_* */
} key_spec;

/* KF_ENGINE: a setting of glm_engine_params that the commands reading no config file (worker,
 * logits, bench) take from their flags and GLMCHAT_<KEY> as well (config_engine_settings).
 * KF_DEV: a developer's switch (marked "dev" in config.h), for comparing kernels. */
enum { KF_ENGINE = 1, KF_DEV = 2 };

static const key_spec top_keys[] = {
    {"model", KT_STRING, NULL, 0, 0, NULL, 0},
    {"backend", KT_CHOICE, "cpu|cuda", 0, 0, NULL, 0},
    {"peer", KT_STRING, NULL, 0, 0, NULL, 0},
    {"transport", KT_CHOICE, "rdma|tcp|nccl", 0, 0, NULL, 0},
    {"worker_key_file", KT_STRING, NULL, 0, 0, NULL, 0},
    {"threads", KT_INT, NULL, 0, 4096, NULL, 0},
    {"temperature", KT_FLOAT, NULL, 0, 10, NULL, 0},
    {"top_p", KT_FLOAT, NULL, 0, 1, NULL, 0},
    {"top_k", KT_INT, NULL, 0, 1000000, NULL, 0},
    {"min_p", KT_FLOAT, NULL, 0, 1, NULL, 0},
    {"seed", KT_U64, NULL, 0, 0, NULL, 0},
    {"max_tokens", KT_INT, NULL, 0, 100000000, NULL, 0},
    {"think", KT_BOOL, NULL, 0, 0, NULL, 0},
    {"clear_thinking", KT_BOOL, NULL, 0, 0, NULL, 0},
    {"effort", KT_CHOICE, "low|high|max", 0, 0, NULL, 0},
    {"system_prompt", KT_STRING, NULL, 0, 0, NULL, 0},
    {"tools", KT_BOOL, NULL, 0, 0, NULL, 0},
    {"tool_timeout", KT_INT, NULL, 1, 3600, NULL, 0},
    {"workspace", KT_STRING, NULL, 0, 0, NULL, 0},
    {"approval", KT_CHOICE, "ask|auto|deny", 0, 0, NULL, 0},
    {"always_allow", KT_STRING, NULL, 0, 0, NULL, 0},
    {"draft", KT_CHOICE, GLM_DRAFT_CHOICES, 0, 0, NULL, KF_ENGINE},
    {"prompt_cache_dir", KT_STRING, NULL, 0, 0, NULL, KF_ENGINE},
    {"prompt_cache_mb", KT_INT, NULL, 0, GLM_MAX_CACHE_MB, NULL, KF_ENGINE},
    {"prompt_cache_disk_mb", KT_INT, NULL, 0, GLM_MAX_CACHE_MB, NULL, KF_ENGINE},
    {"context", KT_INT, NULL, 1, GLM_MAX_CONTEXT, "GLMCHAT_CUDA_CONTEXT", KF_ENGINE},
    {"kv_cache", KT_CHOICE, GLM_KV_CACHE_CHOICES, 0, 0, "GLMCHAT_CUDA_KV", KF_ENGINE},
    {"dense", KT_CHOICE, GLM_DENSE_CHOICES, 0, 0, "GLMCHAT_CUDA_DENSE", KF_ENGINE},
    {"rdma_hca", KT_STRING, NULL, 0, 0, NULL, KF_ENGINE},
    {"rdma_gid_index", KT_INT, NULL, 0, 255, NULL, KF_ENGINE},
    {"verbose", KT_BOOL, NULL, 0, 0, "GLMCHAT_CUDA_VERBOSE", KF_ENGINE | KF_DEV},
    {"cuda_kv_index", KT_CHOICE, GLM_KV_CACHE_CHOICES, 0, 0, NULL, KF_ENGINE | KF_DEV},
    {"cuda_graph", KT_BOOL, NULL, 0, 0, NULL, KF_ENGINE | KF_DEV},
    {"cuda_pdl", KT_BOOL, NULL, 0, 0, NULL, KF_ENGINE | KF_DEV},
    {"cuda_gemm", KT_CHOICE, GLM_CUDA_GEMM_CHOICES, 0, 0, NULL, KF_ENGINE | KF_DEV},
    {"cuda_chunk", KT_INT, NULL, 0, GLM_CUDA_CHUNK_LIMIT, NULL, KF_ENGINE | KF_DEV},
};
#define N_TOP_KEYS (sizeof top_keys / sizeof top_keys[0])

void config_init(app_config *c)
{
    memset(c, 0, sizeof *c);
    c->sampling.temperature = -1.0f; /* the model's own (generation_config.json) */
    c->sampling.top_p = -1.0f;
    c->sampling.top_k = -1;
    c->think = 1;
    c->effort = GLM_EFFORT_MAX;
    c->tools_enabled = 1;
    c->tool_timeout_s = 30;
    c->prompt_cache_mb = -1;
    c->prompt_cache_disk_mb = -1;
    c->rdma_gid_index = -1;
}

static void free_strv(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

static void mcp_free(config_mcp_server *m)
{
    free(m->name);
    free_strv(m->argv);
    free_strv(m->env);
    free(m->cwd);
}

void config_free(app_config *c)
{
    free(c->model_dir);
    free(c->backend);
    free(c->peer);
    free(c->transport);
    free(c->worker_key_file);
    free(c->system_prompt);
    free(c->workspace);
    free(c->always_allow);
    free(c->prompt_cache_dir);
    free(c->rdma_hca);
    for (int i = 0; i < c->n_mcp; i++)
        mcp_free(&c->mcp[i]);
    free(c->mcp);
    memset(c, 0, sizeof *c);
}

const char *config_effort_name(glm_effort e)
{
    switch (e) {
    case GLM_EFFORT_LOW: return "low";
    case GLM_EFFORT_HIGH: return "high";
    case GLM_EFFORT_MAX: return "max";
    }
    return "max";
}

/* ---- value parsing ---------------------------------------------------------------------- */

static int set_string(char **slot, const char *v, char *err, size_t errlen)
{
    char *copy = strdup(v);
    if (!copy)
        return errbuf_fail(err, errlen, "out of memory");
    free(*slot);
    *slot = copy;
    return 0;
}

static const key_spec *find_top_key(const char *key)
{
    for (size_t i = 0; i < N_TOP_KEYS; i++)
        if (strcmp(top_keys[i].name, key) == 0)
            return &top_keys[i];
    return NULL;
}

static void list_top_keys(char *buf, size_t n)
{
    size_t off = 0;
    buf[0] = 0;
    for (size_t i = 0; i < N_TOP_KEYS && off < n; i++) {
        int w = snprintf(buf + off, n - off, "%s%s", i ? ", " : "", top_keys[i].name);
        if (w < 0)
            break;
        off += (size_t)w;
    }
}

static void describe_expected(const key_spec *k, char *buf, size_t n)
{
    switch (k->type) {
    case KT_CHOICE: setting_describe_choices(k->choices, buf, n); return;
    case KT_INT: snprintf(buf, n, "a whole number from %.0f to %.0f", k->min, k->max); return;
    case KT_FLOAT: snprintf(buf, n, "a number from %g to %g", k->min, k->max); return;
    case KT_BOOL: snprintf(buf, n, "on or off"); return;
    case KT_U64: snprintf(buf, n, "a whole number from 0 to 18446744073709551615"); return;
    case KT_STRING: snprintf(buf, n, "a non-empty value"); return;
    }
}

/* Stores a validated value of top-level key k into c. */
static int store_top(app_config *c, const key_spec *k, const char *v, char *err, size_t errlen)
{
    const char *name = k->name;
    if (k->type == KT_STRING && !*v && strcmp(name, "system_prompt") != 0 && strcmp(name, "always_allow") != 0)
        return 1;
    if (strcmp(name, "model") == 0)
        return set_string(&c->model_dir, v, err, errlen);
    if (strcmp(name, "peer") == 0)
        return set_string(&c->peer, v, err, errlen);
    if (strcmp(name, "worker_key_file") == 0)
        return set_string(&c->worker_key_file, v, err, errlen);
    if (strcmp(name, "workspace") == 0)
        return set_string(&c->workspace, v, err, errlen);
    if (strcmp(name, "always_allow") == 0)
        return set_string(&c->always_allow, v, err, errlen);
    if (strcmp(name, "system_prompt") == 0)
        return set_string(&c->system_prompt, v, err, errlen);
    if (strcmp(name, "prompt_cache_dir") == 0)
        return set_string(&c->prompt_cache_dir, v, err, errlen);
    if (strcmp(name, "rdma_hca") == 0)
        return set_string(&c->rdma_hca, v, err, errlen);

    if (k->type == KT_CHOICE) {
        int i;
        if (setting_choice(name, v, k->choices, &i, NULL, 0))
            return 1;
        if (strcmp(name, "backend") == 0)
            return set_string(&c->backend, v, err, errlen);
        if (strcmp(name, "transport") == 0)
            return set_string(&c->transport, v, err, errlen);
        if (strcmp(name, "effort") == 0) {
            static const glm_effort efforts[] = {GLM_EFFORT_LOW, GLM_EFFORT_HIGH, GLM_EFFORT_MAX};
            c->effort = efforts[i];
            return 0;
        }
        static const glm_kv_cache kv[] = {GLM_KV_CACHE_FP8, GLM_KV_CACHE_BF16, GLM_KV_CACHE_F32};
        if (strcmp(name, "draft") == 0) {
            static const glm_draft drafts[] = {GLM_DRAFT_OFF, GLM_DRAFT_COPY, GLM_DRAFT_MTP};
            c->draft = drafts[i];
            return 0;
        }
        if (strcmp(name, "kv_cache") == 0) {
            c->kv_cache = kv[i];
            return 0;
        }
        if (strcmp(name, "cuda_kv_index") == 0) {
            c->cuda.kv_index = kv[i];
            return 0;
        }
        if (strcmp(name, "cuda_gemm") == 0) {
            static const glm_cuda_gemm gemms[] = {GLM_CUDA_GEMM_FIXED, GLM_CUDA_GEMM_SHOW,
                                                  GLM_CUDA_GEMM_NOSPLIT, GLM_CUDA_GEMM_CUBLAS,
                                                  GLM_CUDA_GEMM_THREE, GLM_CUDA_GEMM_ONEPART};
            c->cuda.gemm = gemms[i];
            return 0;
        }
        if (strcmp(name, "dense") == 0) {
            static const glm_dense_format dense[] = {GLM_DENSE_BF16, GLM_DENSE_Q4};
            c->dense = dense[i];
            return 0;
        }
        c->approval = (config_approval)i; /* approval: ask|auto|deny in enum order */
        return 0;
    }
    if (k->type == KT_BOOL) {
        int b;
        if (setting_bool(name, v, &b, NULL, 0))
            return 1;
        if (strcmp(name, "think") == 0)
            c->think = b;
        else if (strcmp(name, "clear_thinking") == 0)
            c->clear_thinking = b;
        else if (strcmp(name, "verbose") == 0)
            c->verbose = b;
        else if (strcmp(name, "cuda_graph") == 0)
            c->cuda.graph_off = !b;
        else if (strcmp(name, "cuda_pdl") == 0)
            c->cuda.pdl_off = !b;
        else
            c->tools_enabled = b;
        return 0;
    }
    if (k->type == KT_INT) {
        long long x;
        if (setting_int(name, v, (long long)k->min, (long long)k->max, &x, NULL, 0))
            return 1;
        if (strcmp(name, "threads") == 0)
            c->threads = (int)x;
        else if (strcmp(name, "top_k") == 0)
            c->sampling.top_k = (int)x;
        else if (strcmp(name, "max_tokens") == 0)
            c->sampling.max_tokens = (int)x;
        else if (strcmp(name, "prompt_cache_mb") == 0)
            c->prompt_cache_mb = (int)x;
        else if (strcmp(name, "prompt_cache_disk_mb") == 0)
            c->prompt_cache_disk_mb = (int)x;
        else if (strcmp(name, "context") == 0)
            c->context = (int)x;
        else if (strcmp(name, "rdma_gid_index") == 0)
            c->rdma_gid_index = (int)x;
        else if (strcmp(name, "cuda_chunk") == 0)
            c->cuda.chunk = (int)x;
        else
            c->tool_timeout_s = (int)x;
        return 0;
    }
    if (k->type == KT_FLOAT) {
        double x;
        if (setting_double(name, v, k->min, k->max, &x, NULL, 0))
            return 1;
        if (strcmp(name, "temperature") == 0)
            c->sampling.temperature = (float)x;
        else if (strcmp(name, "top_p") == 0)
            c->sampling.top_p = (float)x;
        else
            c->sampling.min_p = (float)x;
        return 0;
    }
    uint64_t s;
    if (setting_u64(name, v, &s, NULL, 0))
        return 1;
    c->sampling.seed = s;
    c->seed_set = 1;
    return 0;
}

/* Sets a top-level key; on failure msg says why, without naming where the value came from. */
static int set_top(app_config *c, const char *key, const char *value, char *msg, size_t msglen)
{
    const key_spec *k = find_top_key(key);
    if (!k) {
        char known[1024];
        list_top_keys(known, sizeof known);
        const char *names[N_TOP_KEYS];
        for (size_t i = 0; i < N_TOP_KEYS; i++)
            names[i] = top_keys[i].name;
        const char *meant = suggest_closest(key, names, N_TOP_KEYS);
        if (meant)
            return errbuf_fail(msg, msglen, "unknown key '%s' (did you mean '%s'?); the keys are: %s", key,
                               meant, known);
        return errbuf_fail(msg, msglen, "unknown key '%s'; the keys are: %s", key, known);
    }
    int r = store_top(c, k, value, msg, msglen);
    if (r < 0)
        return -1;
    if (r > 0) {
        char want[160];
        describe_expected(k, want, sizeof want);
        return errbuf_fail(msg, msglen, "'%s' takes %s, not '%.200s'", key, want, value);
    }
    return 0;
}

int config_set(app_config *c, const char *key, const char *value, const char *where, char *err,
               size_t errlen)
{
    char msg[800];
    if (set_top(c, key, value, msg, sizeof msg) == 0)
        return 0;
    return errbuf_fail(err, errlen, "%s: %s", where, msg);
}

/* ---- lines, values, words --------------------------------------------------------------- */

/* The length of a bare value without its comment: a '#' that starts the value or follows a blank
 * begins one (so `C#` keeps its '#'), and the blanks before it go too. */
static size_t bare_value_length(const char *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (v[i] != '#' || (i > 0 && v[i - 1] != ' ' && v[i - 1] != '\t'))
            continue;
        while (i > 0 && (v[i - 1] == ' ' || v[i - 1] == '\t'))
            i--;
        return i;
    }
    return n;
}

/* Decodes a value: bare (trimmed already; a blank then '#' starts a comment) or "quoted" with
 * escapes. Returns a new string or NULL with a message. */
static char *decode_value(const char *v, size_t n, char *why, size_t whylen)
{
    char *out = malloc(n + 1);
    if (!out) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    if (n == 0 || v[0] != '"') {
        n = bare_value_length(v, n);
        memcpy(out, v, n);
        out[n] = 0;
        return out;
    }
    size_t o = 0, i = 1;
    for (; i < n && v[i] != '"'; i++) {
        if (v[i] != '\\') {
            out[o++] = v[i];
            continue;
        }
        if (++i >= n)
            break;
        switch (v[i]) {
        case 'n': out[o++] = '\n'; break;
        case 't': out[o++] = '\t'; break;
        case 'r': out[o++] = '\r'; break;
        case '\\': out[o++] = '\\'; break;
        case '"': out[o++] = '"'; break;
        default:
            snprintf(why, whylen, "unknown escape '\\%c' in a quoted value (use \\n \\t \\r \\\\ \\\")",
                     isprint((unsigned char)v[i]) ? v[i] : '?');
            free(out);
            return NULL;
        }
    }
    if (i >= n) {
        snprintf(why, whylen, "the quoted value has no closing '\"'");
        free(out);
        return NULL;
    }
    for (i++; i < n; i++) {
        if (v[i] == '#' || v[i] == ';')
            break;
        if (!isspace((unsigned char)v[i])) {
            snprintf(why, whylen, "text after the closing '\"' of a quoted value");
            free(out);
            return NULL;
        }
    }
    out[o] = 0;
    if (memchr(v, 0, n)) {
        snprintf(why, whylen, "a NUL byte in the value");
        free(out);
        return NULL;
    }
    return out;
}

static int strv_push(char ***v, int *n, char *s)
{
    char **grown = realloc(*v, (size_t)(*n + 2) * sizeof **v);
    if (!grown)
        return -1;
    *v = grown;
    grown[(*n)++] = s;
    grown[*n] = NULL;
    return 0;
}

/* Splits a command line into words: blanks separate, "..." and '...' quote, \ escapes
 * (outside single quotes). NULL-terminated array in *out; 0 or -1 with why. */
static int split_words(const char *s, char ***out, char *why, size_t whylen)
{
    char **words = NULL;
    int n = 0;
    size_t len = strlen(s);
    char *buf = malloc(len + 1);
    if (!buf) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    size_t i = 0;
    while (i < len) {
        while (i < len && isspace((unsigned char)s[i]))
            i++;
        if (i >= len)
            break;
        size_t o = 0;
        char quote = 0;
        for (; i < len; i++) {
            char ch = s[i];
            if (quote) {
                if (ch == quote) {
                    quote = 0;
                } else if (ch == '\\' && quote == '"' && i + 1 < len) {
                    buf[o++] = s[++i];
                } else {
                    buf[o++] = ch;
                }
            } else if (ch == '"' || ch == '\'') {
                quote = ch;
            } else if (ch == '\\' && i + 1 < len) {
                buf[o++] = s[++i];
            } else if (isspace((unsigned char)ch)) {
                break;
            } else {
                buf[o++] = ch;
            }
        }
        if (quote) {
            snprintf(why, whylen, "the command has an unclosed %c quote", quote);
            goto fail;
        }
        buf[o] = 0;
        char *w = strdup(buf);
        if (!w || strv_push(&words, &n, w)) {
            free(w);
            snprintf(why, whylen, "out of memory");
            goto fail;
        }
    }
    free(buf);
    if (n == 0) {
        snprintf(why, whylen, "the command is empty; give the server's program and its arguments");
        free_strv(words);
        return -1;
    }
    *out = words;
    return 0;
fail:
    free(buf);
    free_strv(words);
    return -1;
}

static int valid_name(const char *s, size_t n, int allow_dash_digits)
{
    if (n == 0 || n > 32)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (islower(ch) || ch == '_')
            continue;
        if (allow_dash_digits && (isalnum(ch) || ch == '-'))
            continue;
        return 0;
    }
    return 1;
}

static int valid_env_name(const char *s)
{
    if (!*s || isdigit((unsigned char)*s))
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_')
            return 0;
    return 1;
}

/* ---- sections --------------------------------------------------------------------------- */

typedef enum section_kind { SEC_TOP, SEC_MCP } section_kind;

typedef struct parse_state {
    app_config *c;
    const char *name;
    int line;
    section_kind section;
    config_mcp_server *mcp; /* SEC_MCP: the server being read */
    char *err;
    size_t errlen;
} parse_state;

static int perr(parse_state *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(parse_state *ps, const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return errbuf_fail(ps->err, ps->errlen, "%s:%d: %s", ps->name, ps->line, msg);
}

static int check_mcp_complete(parse_state *ps)
{
    config_mcp_server *m = ps->mcp;
    if (!m || m->argv)
        return 0;
    return errbuf_fail(ps->err, ps->errlen, "%s:%d: [mcp.%s] has no 'command'; add `command = PROGRAM ARGS...`",
                ps->name, m->line, m->name);
}

static int begin_section(parse_state *ps, const char *s, size_t n)
{
    if (check_mcp_complete(ps))
        return -1;
    ps->mcp = NULL;
    if (n == 4 && memcmp(s, "keys", 4) == 0) /* no key is rebound: say so, not ignore it */
        return perr(ps, "[keys] is not supported: the TUI's keys are fixed (its /help lists them); "
                        "remove the section");
    if (n > 4 && memcmp(s, "mcp.", 4) == 0) {
        const char *nm = s + 4;
        size_t nl = n - 4;
        if (!valid_name(nm, nl, 1))
            return perr(ps, "the MCP server name '%.*s' must be 1-32 of A-Z a-z 0-9 _ -", (int)nl, nm);
        for (int i = 0; i < ps->c->n_mcp; i++)
            if (strlen(ps->c->mcp[i].name) == nl && memcmp(ps->c->mcp[i].name, nm, nl) == 0)
                return perr(ps, "[mcp.%.*s] is defined twice (first at line %d)", (int)nl, nm,
                            ps->c->mcp[i].line);
        if (ps->c->n_mcp >= CONFIG_MAX_MCP)
            return perr(ps, "more than %d MCP servers", CONFIG_MAX_MCP);
        config_mcp_server *grown = realloc(ps->c->mcp, (size_t)(ps->c->n_mcp + 1) * sizeof *grown);
        if (!grown)
            return perr(ps, "out of memory");
        ps->c->mcp = grown;
        config_mcp_server *m = &grown[ps->c->n_mcp];
        memset(m, 0, sizeof *m);
        m->name = strndup(nm, nl);
        if (!m->name)
            return perr(ps, "out of memory");
        m->timeout_s = ps->c->tool_timeout_s;
        m->enabled = 1;
        m->line = ps->line;
        ps->c->n_mcp++;
        ps->mcp = m;
        ps->section = SEC_MCP;
        return 0;
    }
    return perr(ps, "unknown section [%.*s]; the only section is [mcp.NAME]", (int)n, s);
}

static int set_mcp_key(parse_state *ps, const char *key, const char *v)
{
    config_mcp_server *m = ps->mcp;
    char why[300];
    if (strcmp(key, "command") == 0) {
        char **argv;
        if (split_words(v, &argv, why, sizeof why))
            return perr(ps, "'command' of [mcp.%s]: %s", m->name, why);
        free_strv(m->argv);
        m->argv = argv;
        return 0;
    }
    if (strncmp(key, "env.", 4) == 0) {
        if (!valid_env_name(key + 4))
            return perr(ps, "'%s': an environment variable name is letters, digits and _", key);
        size_t n = strlen(key + 4) + strlen(v) + 2;
        char *kv = malloc(n);
        if (!kv)
            return perr(ps, "out of memory");
        snprintf(kv, n, "%s=%s", key + 4, v);
        if (strv_push(&m->env, &m->n_env, kv)) {
            free(kv);
            return perr(ps, "out of memory");
        }
        return 0;
    }
    if (strcmp(key, "cwd") == 0) {
        if (!*v)
            return perr(ps, "'cwd' of [mcp.%s] is empty; give a directory or drop the line", m->name);
        free(m->cwd);
        m->cwd = strdup(v);
        return m->cwd ? 0 : perr(ps, "out of memory");
    }
    if (strcmp(key, "timeout") == 0) {
        long long x;
        if (setting_int("timeout", v, 1, 3600, &x, NULL, 0))
            return perr(ps, "'timeout' of [mcp.%s] takes seconds from 1 to 3600, not '%s'", m->name, v);
        m->timeout_s = (int)x;
        return 0;
    }
    if (strcmp(key, "trust") == 0 || strcmp(key, "enabled") == 0) {
        int b;
        if (setting_bool(key, v, &b, NULL, 0))
            return perr(ps, "'%s' of [mcp.%s] takes yes or no, not '%s'", key, m->name, v);
        if (key[0] == 't')
            m->trusted = b;
        else
            m->enabled = b;
        return 0;
    }
    return perr(ps, "unknown key '%s' in [mcp.%s]; the keys are: command, env.VAR, cwd, timeout, "
                    "trust, enabled",
                key, m->name);
}

static int parse_line(parse_state *ps, const char *s, size_t n)
{
    while (n && isspace((unsigned char)*s)) {
        s++;
        n--;
    }
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    if (n == 0 || s[0] == '#' || s[0] == ';')
        return 0;
    if (memchr(s, 0, n))
        return perr(ps, "a NUL byte; the config file is text");
    if (s[0] == '[') {
        if (s[n - 1] != ']')
            return perr(ps, "a section header needs a closing ']'");
        return begin_section(ps, s + 1, n - 2);
    }
    const char *eq = memchr(s, '=', n);
    if (!eq)
        return perr(ps, "expected `key = value`, a [section] or a # comment");
    size_t kn = (size_t)(eq - s);
    while (kn && isspace((unsigned char)s[kn - 1]))
        kn--;
    if (kn == 0)
        return perr(ps, "a line starts with '='; put the key before it");
    char key[128];
    if (kn >= sizeof key)
        return perr(ps, "the key '%.40s...' is too long", s);
    memcpy(key, s, kn);
    key[kn] = 0;
    const char *v = eq + 1;
    size_t vn = n - (size_t)(v - s);
    while (vn && isspace((unsigned char)*v)) {
        v++;
        vn--;
    }
    char why[300];
    char *value = decode_value(v, vn, why, sizeof why);
    if (!value)
        return perr(ps, "'%s': %s", key, why);
    int r;
    if (ps->section == SEC_MCP) {
        r = set_mcp_key(ps, key, value);
    } else {
        char msg[800];
        r = set_top(ps->c, key, value, msg, sizeof msg);
        if (r)
            perr(ps, "%s", msg);
    }
    free(value);
    return r;
}

int config_parse(app_config *c, const char *name, const char *text, size_t len, char *err,
                 size_t errlen)
{
    parse_state ps = {.c = c, .name = name, .line = 0, .section = SEC_TOP, .err = err, .errlen = errlen};
    size_t i = 0;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        i = 3; /* a UTF-8 byte-order mark some editors write */
    while (i < len) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len;
        ps.line++;
        if (parse_line(&ps, text + i, end - i))
            return -1;
        i = end + 1;
    }
    ps.line++;
    return check_mcp_complete(&ps);
}

int config_load_file(app_config *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT)
            return 0;
        return errbuf_fail(err, errlen, "cannot read the config file %s: %s", path, strerror(errno));
    }
    char *buf = malloc(CONFIG_MAX_FILE + 1);
    if (!buf) {
        fclose(f);
        return errbuf_fail(err, errlen, "out of memory reading %s", path);
    }
    size_t n = fread(buf, 1, CONFIG_MAX_FILE + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return errbuf_fail(err, errlen, "cannot read the config file %s (is it a directory?)", path);
    }
    if (n > CONFIG_MAX_FILE) {
        free(buf);
        return errbuf_fail(err, errlen, "the config file %s is over %d bytes; is it the right file?", path,
                    CONFIG_MAX_FILE);
    }
    int r = config_parse(c, path, buf, n, err, errlen);
    free(buf);
    return r;
}

/* GLMCHAT_<KEY>'s value, else the older variable's; NULL when neither is set and non-empty
 * (empty means unset, as for the XDG variables). *where: the variable read, in var's storage
 * or the key's. */
static const char *key_env(const key_spec *k, char var[64], const char **where)
{
    size_t o = strlen(strcpy(var, "GLMCHAT_"));
    for (const char *s = k->name; *s && o + 1 < 64; s++)
        var[o++] = (char)toupper((unsigned char)*s);
    var[o] = 0;
    const char *v = getenv(var);
    *where = var;
    if ((!v || !*v) && k->old_env) {
        *where = k->old_env;
        v = getenv(k->old_env);
    }
    return v && *v ? v : NULL;
}

int config_apply_env(app_config *c, char *err, size_t errlen)
{
    for (size_t i = 0; i < N_TOP_KEYS; i++) {
        char var[64];
        const char *where, *v = key_env(&top_keys[i], var, &where);
        if (v && config_set(c, top_keys[i].name, v, where, err, errlen))
            return -1;
    }
    return 0;
}

void config_engine_params(const app_config *c, glm_engine_params *p)
{
    p->draft = c->draft;
    p->prompt_cache_dir = c->prompt_cache_dir;
    p->prompt_cache_bytes = c->prompt_cache_mb < 0    ? 0
                            : c->prompt_cache_mb == 0 ? -1
                                                      : (int64_t)c->prompt_cache_mb << 20;
    p->prompt_cache_disk_bytes = c->prompt_cache_disk_mb < 0    ? 0
                                 : c->prompt_cache_disk_mb == 0 ? -1
                                                                : (int64_t)c->prompt_cache_disk_mb << 20;
    p->context = c->context;
    p->kv_cache = c->kv_cache;
    p->dense = c->dense;
    p->rdma_hca = c->rdma_hca;
    p->rdma_gid_given = c->rdma_gid_index >= 0;
    p->rdma_gid_index = c->rdma_gid_index >= 0 ? c->rdma_gid_index : 0;
    p->verbose = c->verbose;
    p->cuda = c->cuda;
}

/* The flag of g that sets key (those config_apply_globals reads for the engine), or NULL. */
static const char *engine_flag(const cli_globals *g, const char *key)
{
    if (!g)
        return NULL;
    if (strcmp(key, "context") == 0)
        return g->context;
    if (strcmp(key, "kv_cache") == 0)
        return g->kv_cache;
    if (strcmp(key, "dense") == 0)
        return g->dense;
    return NULL;
}

int config_engine_settings(app_config *c, const cli_globals *g, char *err, size_t errlen)
{
    config_init(c);
    /* a key given by its flag does not read its variable: the flag wins, as it always has here */
    for (size_t i = 0; i < N_TOP_KEYS; i++) {
        const key_spec *k = &top_keys[i];
        if (!(k->flags & KF_ENGINE) || engine_flag(g, k->name))
            continue;
        char var[64];
        const char *where, *v = key_env(k, var, &where);
        if (v && config_set(c, k->name, v, where, err, errlen))
            return -1;
    }
    return config_apply_globals(c, g, err, errlen);
}

int config_command_params(app_config *c, const cli_globals *g, glm_engine_params *p, char *err,
                          size_t errlen)
{
    *p = glm_engine_default_params();
    if (config_engine_settings(c, g, err, errlen))
        return -1;
    config_engine_params(c, p);
    return 0;
}

int config_key_is_dev(const char *key)
{
    const key_spec *k = find_top_key(key);
    return k && (k->flags & KF_DEV);
}

int config_apply_globals(app_config *c, const cli_globals *g, char *err, size_t errlen)
{
    if (!g)
        return 0;
    if (g->model_dir && config_set(c, "model", g->model_dir, "--model", err, errlen))
        return -1;
    if (g->backend && config_set(c, "backend", g->backend, "--backend", err, errlen))
        return -1;
    if (g->peer && config_set(c, "peer", g->peer, "--peer", err, errlen))
        return -1;
    if (g->transport && config_set(c, "transport", g->transport, "--transport", err, errlen))
        return -1;
    if (g->key_file && config_set(c, "worker_key_file", g->key_file, "--key-file", err, errlen))
        return -1;
    if (g->context && config_set(c, "context", g->context, "--context", err, errlen))
        return -1;
    if (g->kv_cache && config_set(c, "kv_cache", g->kv_cache, "--kv-cache", err, errlen))
        return -1;
    if (g->dense && config_set(c, "dense", g->dense, "--dense", err, errlen))
        return -1;
    return 0;
}

int config_load(app_config *c, const char *path, const cli_globals *g, char *err, size_t errlen)
{
    config_init(c);
    if (path && config_load_file(c, path, err, errlen))
        return -1;
    if (config_apply_env(c, err, errlen))
        return -1;
    return config_apply_globals(c, g, err, errlen);
}

const config_mcp_server *config_find_mcp(const app_config *c, const char *name)
{
    for (int i = 0; i < c->n_mcp; i++)
        if (strcmp(c->mcp[i].name, name) == 0)
            return &c->mcp[i];
    return NULL;
}
