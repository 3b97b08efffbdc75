/* template_check.c: finds a model directory's chat template and compares its SHA-256 with the
 * revisions glmchat's native renderer equals, for a notice when it is another one. */
#include "engine/text/template_check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/text/json.h"
#include "base/sha256.h"

/* The GLM-5.3-Flash template as two public repacks publish it (tests/fixtures/text/README.md):
 * the same text but for the generation prompt's thinking switch, which glmchat applies itself. */
const tmpl_revision tmpl_revisions[] = {
    {"16f863c26a10e11a278442878083a726c587617a685a357e667f6ef50e1dd401", 11084,
     "GLM-5.3-Flash (NVFP4 recipe copy, 4859b6ae)"},
    {"3406cc91800b56c06439e65aaea1929e6bc803cdb62f7f995f25ab082efd3408", 10720,
     "GLM-5.3-Flash (NVIDIA repack copy, 957c19e5)"},
};
const int tmpl_n_revisions = (int)(sizeof tmpl_revisions / sizeof tmpl_revisions[0]);

/* Templates are a few kilobytes; tokenizer_config.json may carry a vocabulary, so allow more. */
#define TEMPLATE_FILE_MAX ((size_t)64 << 20)

/* The whole file, NUL-terminated; NULL with *missing set when it does not exist. */
static char *read_file(const char *path, size_t *len, int *missing, glm_error *err)
{
    *missing = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) {
            *missing = 1;
            return NULL;
        }
        glm_error_set(err, GLM_ERR_IO, "%s: cannot open it (%s)", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || (size_t)st.st_size > TEMPLATE_FILE_MAX) {
        fclose(f);
        glm_error_set(err, GLM_ERR_FORMAT, "%s: cannot size it, or it is over 64 MiB", path);
        return NULL;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    int bad = !buf || got != (size_t)st.st_size || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        glm_error_set(err, GLM_ERR_IO, "%s: cannot read it", path);
        return NULL;
    }
    buf[got] = 0;
    *len = got;
    return buf;
}

static void identify(tmpl_check *out, const char *text, size_t len)
{
    out->found = 1;
    out->bytes = len;
    sha256_hex(text, len, out->sha256);
    out->revision = NULL;
    for (int i = 0; i < tmpl_n_revisions; i++)
        if (strcmp(out->sha256, tmpl_revisions[i].sha256) == 0)
            out->revision = tmpl_revisions[i].name;
}

/* tokenizer_config.json's chat_template: a string, or a list of {name, template} whose "default"
 * entry is the chat template. */
static const jv *config_template(const jv *root)
{
    const jv *t = jv_get(root, "chat_template");
    if (t && t->type == JV_STRING)
        return t;
    for (size_t i = 0; t && t->type == JV_ARRAY && i < t->n; i++) {
        const jv *e = t->items[i];
        const jv *body = jv_get(e, "template");
        if (jv_is_str(jv_get(e, "name"), "default") && body && body->type == JV_STRING)
            return body;
    }
    return NULL;
}

static glm_status check_tokenizer_config(const char *dir, tmpl_check *out, glm_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    size_t len = 0;
    int missing;
    char *text = read_file(path, &len, &missing, err);
    if (!text)
        return missing ? GLM_OK : err->status;
    glm_error inner = {0};
    jv *root = jv_parse(text, len, &inner);
    free(text);
    if (!root)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: not valid JSON (%s)", path, inner.message);
    const jv *t = config_template(root);
    if (t) {
        identify(out, t->str, t->len);
        snprintf(out->source, sizeof out->source, "%s (chat_template)", path);
    }
    jv_free(root);
    return GLM_OK;
}

glm_status tmpl_check_dir(const char *dir, tmpl_check *out, glm_error *err)
{
    memset(out, 0, sizeof *out);
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    size_t len = 0;
    int missing;
    char *text = read_file(path, &len, &missing, err);
    if (text) {
        identify(out, text, len);
        snprintf(out->source, sizeof out->source, "%s", path);
        free(text);
        return GLM_OK;
    }
    return missing ? check_tokenizer_config(dir, out, err) : err->status;
}

int tmpl_check_notice(const tmpl_check *c, char *buf, size_t n)
{
    if (!c->found || c->revision)
        return 0;
    snprintf(buf, n, "the model's chat template %s (sha256 %s, %zu bytes) is not a revision glmchat "
             "implements; glmchat renders its own GLM-5.3-Flash template instead (sha256 %.16s...), so "
             "prompts may differ from what that file renders (glmchat render shows the prompt)",
             c->source, c->sha256, c->bytes, tmpl_revisions[0].sha256);
    return 1;
}
