/* pretokenize.c: PCRE2-JIT splitter equal to HF's Oniguruma Split(Isolated) pre-tokenizer.
 * Translation rewrites the class shorthands whose Unicode meaning differs between the engines. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/text/pretokenize.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

/* Oniguruma's Unicode \s is White_Space: U+0009-000D, U+0085 and the Z categories. */
#define WS_SET "\\t-\\r\\x{85}\\p{Z}"
#define DIGIT_SET "\\p{Nd}"
#define WORD_SET "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"

struct pt_splitter {
    pcre2_code *code;
    int jit;
};

glm_status pt_translate(const char *pattern, tbuf *out, glm_error *err)
{
    int in_class = 0;
    for (const char *p = pattern; *p; p++) {
        glm_status st = GLM_OK;
        if (*p == '\\' && p[1]) {
            char c = p[1];
            const char *set = c == 's' || c == 'S' ? WS_SET : c == 'd' || c == 'D' ? DIGIT_SET
                              : c == 'w' || c == 'W' ? WORD_SET : NULL;
            int negated = c == 'S' || c == 'D' || c == 'W';
            if (!set) {
                st = tbuf_append(out, p, 2);
            } else if (in_class && negated) {
                return glm_error_set(err, GLM_ERR_UNSUPPORTED,
                                     "pre-tokenizer pattern: \\%c inside a character class is not supported", c);
            } else if (in_class) {
                st = tbuf_puts(out, set);
            } else {
                if (tbuf_puts(out, negated ? "[^" : "[") != GLM_OK || tbuf_puts(out, set) != GLM_OK)
                    st = GLM_ERR_NOMEM;
                else
                    st = tbuf_putc(out, ']');
            }
            p++;
        } else {
            if (*p == '[' && !in_class)
                in_class = 1;
            else if (*p == ']' && in_class)
                in_class = 0;
            st = tbuf_putc(out, *p);
        }
        if (st != GLM_OK)
            return glm_error_set(err, GLM_ERR_NOMEM, "pre-tokenizer pattern: out of memory");
    }
    return GLM_OK;
}

pt_splitter *pt_new(const char *pattern, glm_error *err)
{
    tbuf pat = {0};
    if (pt_translate(pattern, &pat, err) != GLM_OK) {
        tbuf_free(&pat);
        return NULL;
    }
    pt_splitter *sp = calloc(1, sizeof *sp);
    if (!sp) {
        tbuf_free(&pat);
        glm_error_set(err, GLM_ERR_NOMEM, "pre-tokenizer: out of memory");
        return NULL;
    }
    int code;
    PCRE2_SIZE off;
    sp->code = pcre2_compile((PCRE2_SPTR)(pat.p ? pat.p : ""), pat.len, PCRE2_UTF | PCRE2_NO_UTF_CHECK,
                             &code, &off, NULL);
    tbuf_free(&pat);
    if (!sp->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        glm_error_set(err, GLM_ERR_UNSUPPORTED, "pre-tokenizer pattern %s: PCRE2 refuses it at offset %zu: %s",
                      pattern, (size_t)off, (const char *)msg);
        free(sp);
        return NULL;
    }
    sp->jit = pcre2_jit_compile(sp->code, PCRE2_JIT_COMPLETE) == 0;
    return sp;
}

void pt_free(pt_splitter *sp)
{
    if (!sp)
        return;
    pcre2_code_free(sp->code);
    free(sp);
}

static int run_match(const pt_splitter *sp, const char *text, size_t len, size_t at, pcre2_match_data *md,
                     pcre2_match_context **mctx, pcre2_jit_stack **stack)
{
    for (;;) {
        int rc = sp->jit ? pcre2_jit_match(sp->code, (PCRE2_SPTR)text, len, at, 0, md, *mctx)
                         : pcre2_match(sp->code, (PCRE2_SPTR)text, len, at, PCRE2_NO_UTF_CHECK, md, *mctx);
        if (rc != PCRE2_ERROR_JIT_STACKLIMIT || *stack)
            return rc;
        /* a very long run needs more than the default 32 KiB JIT stack */
        *mctx = pcre2_match_context_create(NULL);
        *stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
        if (!*mctx || !*stack)
            return PCRE2_ERROR_NOMEMORY;
        pcre2_jit_stack_assign(*mctx, NULL, *stack);
    }
}

glm_status pt_split(const pt_splitter *sp, const char *text, size_t len, pt_piece_fn fn, void *user,
                    glm_error *err)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(sp->code, NULL);
    if (!md)
        return glm_error_set(err, GLM_ERR_NOMEM, "pre-tokenizer: out of memory");
    pcre2_match_context *mctx = NULL;
    pcre2_jit_stack *stack = NULL;
    glm_status st = GLM_OK;
    size_t at = 0, gap = 0; /* gap: start of text not yet given out */
    while (at < len && st == GLM_OK) {
        int rc = run_match(sp, text, len, at, md, &mctx, &stack);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            st = glm_error_set(err, GLM_ERR_BACKEND, "pre-tokenizer: PCRE2 match failed (code %d)", rc);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        if (e == s) { /* an empty match: step one character on, as Oniguruma's iteration does */
            at = s + 1;
            while (at < len && ((unsigned char)text[at] & 0xC0) == 0x80)
                at++;
            continue;
        }
        if (s > gap)
            st = fn(text + gap, s - gap, user);
        if (st == GLM_OK)
            st = fn(text + s, e - s, user);
        gap = at = e;
    }
    if (st == GLM_OK && gap < len)
        st = fn(text + gap, len - gap, user);
    pcre2_match_data_free(md);
    pcre2_match_context_free(mctx);
    pcre2_jit_stack_free(stack);
    return st;
}
