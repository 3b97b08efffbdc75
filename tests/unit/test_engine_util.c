/* test_engine_util.c: scratch model directories and tensor rewriting for the engine tests,
 * built on the engine's own safetensors reader and writer. */
#include "test_engine_util.h"

#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

const char *tu_fixture(const char *name)
{
    static char path[PATH_MAX];
    const char *src = getenv("GLMCHAT_SRCDIR");
    snprintf(path, sizeof path, "%s/tests/fixtures/models/%s", src ? src : ".", name);
    ck_assert_msg(access(path, R_OK) == 0, "fixture %s is missing", path);
    return path;
}

char *tu_tmpdir(void)
{
    const char *t = getenv("TMPDIR");
    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s/glmchat-engine-XXXXXX", t && *t ? t : "/tmp");
    char *d = mkdtemp(tmpl);
    ck_assert_ptr_nonnull(d);
    return strdup(d);
}

void tu_rmtree(const char *dir)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

int tu_copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb"), *out = in ? fopen(dst, "wb") : NULL;
    if (!in || !out) {
        if (in)
            fclose(in);
        return -1;
    }
    char buf[1 << 16];
    size_t n;
    int rc = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            rc = -1;
    fclose(in);
    if (fclose(out) != 0)
        rc = -1;
    return rc;
}

int tu_copy_model(const char *src_dir, const char *dst_dir)
{
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors"};
    for (int i = 0; i < 3; i++) {
        char a[PATH_MAX], b[PATH_MAX];
        snprintf(a, sizeof a, "%s/%s", src_dir, files[i]);
        snprintf(b, sizeof b, "%s/%s", dst_dir, files[i]);
        if (access(a, R_OK) == 0 && tu_copy_file(a, b) != 0)
            return -1;
    }
    return 0;
}

int tu_edit_config(const char *dir, const char *find, const char *repl)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    static char buf[1 << 20], out[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *at = strstr(buf, find);
    if (!at)
        return -1;
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - buf), buf, repl, at + strlen(find));
    f = fopen(path, "wb");
    if (!f)
        return -1;
    fputs(out, f);
    return fclose(f);
}

int tu_load_tensors(const char *path, tu_tensor **out, int *n)
{
    glm_error err = {0};
    st_model *m = st_open_file(path, &err);
    if (!m)
        return -1;
    int count = (int)st_count(m);
    tu_tensor *t = calloc((size_t)count, sizeof *t);
    for (int i = 0; t && i < count; i++) {
        const st_tensor *s = st_at(m, (size_t)i);
        snprintf(t[i].name, sizeof t[i].name, "%s", s->name);
        t[i].dtype = s->dtype;
        t[i].ndim = s->ndim;
        memcpy(t[i].shape, s->shape, sizeof s->shape);
        t[i].nbytes = s->nbytes;
        t[i].data = malloc(s->nbytes ? s->nbytes : 1);
        memcpy(t[i].data, s->data, s->nbytes);
    }
    st_close(m);
    *out = t;
    *n = count;
    return t ? 0 : -1;
}

static int write_some(const char *path, const tu_tensor *t, int n, int shard, int shards)
{
    glm_error err = {0};
    st_writer *w = st_writer_new(path, &err);
    if (!w)
        return -1;
    int rc = st_writer_metadata(w, "format", "pt", &err);
    for (int i = 0; !rc && i < n; i++)
        if (i % shards == shard)
            rc = st_writer_declare(w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape, &err);
    if (!rc)
        rc = st_writer_begin(w, &err);
    for (int i = 0; !rc && i < n; i++)
        if (i % shards == shard)
            rc = st_writer_write(w, t[i].data, t[i].nbytes, &err);
    if (rc) {
        st_writer_abort(w);
        return -1;
    }
    return st_writer_close(w, &err) ? -1 : 0;
}

int tu_write_tensors(const char *path, const tu_tensor *t, int n)
{
    return write_some(path, t, n, 0, 1);
}

int tu_write_sharded(const char *dir, const tu_tensor *t, int n, int shards)
{
    cJSON *root = cJSON_CreateObject(), *map = cJSON_CreateObject();
    char path[PATH_MAX], file[64];
    for (int i = 0; i < n; i++) {
        snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", i % shards + 1, shards);
        cJSON_AddStringToObject(map, t[i].name, file);
    }
    cJSON_AddItemToObject(root, "weight_map", map);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f || !text) {
        free(text);
        if (f)
            fclose(f);
        return -1;
    }
    fputs(text, f);
    free(text);
    if (fclose(f) != 0)
        return -1;
    for (int s = 0; s < shards; s++) {
        snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, s + 1, shards);
        if (write_some(path, t, n, s, shards))
            return -1;
    }
    return 0;
}

void tu_free_tensors(tu_tensor *t, int n)
{
    for (int i = 0; t && i < n; i++)
        free(t[i].data);
    free(t);
}

tu_tensor *tu_find(tu_tensor *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return &t[i];
    return NULL;
}

int tu_load_reference(const char *dir, tu_reference *r)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    memset(r, 0, sizeof *r);
    glm_error err = {0};
    st_model *m = st_open_file(path, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    const st_tensor *ids = st_find(m, "input_ids"), *full = st_find(m, "logits_full"),
                    *cached = st_find(m, "logits_cached");
    ck_assert(ids && full && cached && ids->dtype == ST_I32 && full->dtype == ST_F32);
    r->n = (int)ids->shape[0];
    r->vocab = (int)full->shape[1];
    const char *p = st_metadata(m, "prefill");
    r->prefill = p ? atoi(p) : 61; /* tiny-A: rows 0-60 came from one 61-token prefill */
    r->ids = malloc(ids->nbytes);
    r->full = malloc(full->nbytes);
    r->cached = malloc(cached->nbytes);
    memcpy(r->ids, ids->data, ids->nbytes);
    memcpy(r->full, full->data, full->nbytes);
    memcpy(r->cached, cached->data, cached->nbytes);
    st_close(m);
    return 0;
}

void tu_free_reference(tu_reference *r)
{
    free(r->ids);
    free(r->full);
    free(r->cached);
}


int tu_collect_reply(const glm_event *ev, void *reply)
{
    tu_reply *c = reply;
    if ((ev->type == GLM_EV_CONTENT_DELTA || ev->type == GLM_EV_REASONING_DELTA) &&
        c->len + ev->len < sizeof c->text) {
        memcpy(c->text + c->len, ev->text, ev->len);
        c->len += ev->len;
    }
    if (ev->type == GLM_EV_DONE)
        c->done = ev->stats;
    if (ev->type == GLM_EV_PROMPT) {
        if (c->n_prompt < 64)
            c->prompt_done[c->n_prompt] = ev->prompt_done;
        c->n_prompt++;
        c->prompt_total = ev->prompt_total;
        c->prompt_after_text += c->len > 0;
    }
    return 0;
}
