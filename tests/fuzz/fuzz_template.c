/* fuzz_template.c: libFuzzer target for what `glmchat render` reads: the JSON reader, its Python-style
 * writer (a dump must parse back to the same dump) and the chat template on any request. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/json.h"
#include "engine/text/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    glm_error err = {0};
    jv *v = jv_parse((const char *)data, size, &err);
    if (!v)
        return 0;
    tbuf a = {0}, b = {0}, prompt = {0};
    if (jv_dump_py(v, &a) != GLM_OK)
        abort();
    jv *again = jv_parse(a.p, a.len, &err);
    if (!again || jv_dump_py(again, &b) != GLM_OK || a.len != b.len || memcmp(a.p, b.p, a.len) != 0)
        abort(); /* the writer's output reads back to itself */
    glm_status st = tmpl_render_json(v, &prompt, &err);
    if (st != GLM_OK && st != GLM_ERR_ARG)
        abort();
    jv_free(again);
    jv_free(v);
    tbuf_free(&a);
    tbuf_free(&b);
    tbuf_free(&prompt);
    return 0;
}
