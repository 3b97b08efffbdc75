/* tokenizer.c: loads a Hugging Face tokenizer.json (byte-level BPE) and encodes/decodes as HF does.
 * Pipeline: added tokens (leftmost-longest) -> Split regex (pretokenize.c) -> bytes -> BPE merges. */
#include "engine/text/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/text/json.h"
#include "engine/text/pretokenize.h"
#include "base/utf8.h"

typedef struct tok_span {
    uint32_t off, len; /* into the arena; len 0 with off UINT32_MAX: no such id */
} tok_span;

typedef struct tok_slot { /* vocabulary hash: raw bytes -> id */
    uint64_t hash;
    uint32_t off, len;
    int32_t id;
} tok_slot;

typedef struct tok_merge_slot { /* (left id, right id) -> rank, new id */
    uint64_t key;
    uint32_t rank;
    int32_t id;
} tok_merge_slot;

typedef struct tok_added {
    uint32_t off, len;
    int32_t id;
} tok_added;

struct tok_tokenizer {
    tbuf arena;            /* every token's bytes */
    tok_span *bytes_of;    /* id -> decoded bytes (HF's ByteLevel decoder rule) */
    int32_t n_ids;         /* 1 + largest id */
    tok_slot *vocab;       /* open addressing, power-of-two size */
    size_t vocab_mask;
    tok_merge_slot *merges;
    size_t merges_mask;
    int32_t byte_id[256];  /* id of each single byte, -1 if absent */
    tok_added *added;
    size_t n_added;
    unsigned char added_first[256]; /* 1 where an added token starts with that byte */
    int ignore_merges;
    pt_splitter *split;
};

/* ---- the byte-level alphabet (GPT-2): printable Latin-1 stands for itself, the rest from U+0100 ---- */

static void byte_alphabet(uint32_t cp_of[256])
{
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp_of[b] = keep ? (uint32_t)b : next++;
    }
}

/* Maps a byte-level string to raw bytes; 0 when a character is outside the alphabet. */
static int bytelevel_to_bytes(const char *s, size_t n, const int16_t *byte_of_cp, tbuf *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t bad;
        int k = utf8_seq(u + i, n - i, &bad);
        if (k <= 0)
            return 0;
        uint32_t cp = utf8_decode(u + i, k);
        if (cp >= 324 || byte_of_cp[cp] < 0)
            return 0;
        if (tbuf_putc(out, (char)byte_of_cp[cp]) != GLM_OK)
            return -1;
        i += (size_t)k;
    }
    return 1;
}

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    uint64_t w = 0;
    memcpy(&w, s + i, n - i);
    h = (h ^ w) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    return h | 1; /* 0 marks an empty slot */
}

static uint64_t hash_pair(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    return k;
}

static size_t table_size(size_t n)
{
    size_t s = 16;
    while (s < n * 2)
        s *= 2;
    return s;
}

static int32_t vocab_find(const tok_tokenizer *t, const char *s, size_t n)
{
    uint64_t h = hash_bytes(s, n);
    for (size_t i = h & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
        const tok_slot *sl = &t->vocab[i];
        if (!sl->hash)
            return -1;
        if (sl->hash == h && sl->len == n && memcmp(t->arena.p + sl->off, s, n) == 0)
            return sl->id;
    }
}

/* Returns the id the bytes had before (-1: none). */
static int32_t vocab_insert(tok_tokenizer *t, uint32_t off, uint32_t len, int32_t id)
{
    uint64_t h = hash_bytes(t->arena.p + off, len);
    for (size_t i = h & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
        tok_slot *sl = &t->vocab[i];
        if (!sl->hash) {
            *sl = (tok_slot){h, off, len, id};
            return -1;
        }
        if (sl->hash == h && sl->len == len && memcmp(t->arena.p + sl->off, t->arena.p + off, len) == 0) {
            int32_t before = sl->id;
            sl->id = id; /* the last one wins, as a JSON map would */
            return before;
        }
    }
}

static const tok_merge_slot *merge_find(const tok_tokenizer *t, int32_t a, int32_t b)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (size_t i = hash_pair(key) & t->merges_mask;; i = (i + 1) & t->merges_mask) {
        const tok_merge_slot *sl = &t->merges[i];
        if (sl->id < 0)
            return NULL;
        if (sl->key == key)
            return sl;
    }
}

static void merge_insert(tok_tokenizer *t, int32_t a, int32_t b, uint32_t rank, int32_t id)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (size_t i = hash_pair(key) & t->merges_mask;; i = (i + 1) & t->merges_mask) {
        tok_merge_slot *sl = &t->merges[i];
        if (sl->id < 0 || sl->key == key) { /* a repeated pair: the later rank wins, as in HF */
            *sl = (tok_merge_slot){key, rank, id};
            return;
        }
    }
}

/* ---- loading ---- */

static int str_is(const jv *v, const char *s)
{
    return jv_is_str(v, s);
}

static int null_or_empty(const jv *v)
{
    return !v || v->type == JV_NULL || (v->type == JV_STRING && v->len == 0);
}

static glm_status check_pipeline(const jv *root, const char *what, const char **pattern, glm_error *err)
{
    const jv *norm = jv_get(root, "normalizer");
    if (norm && norm->type != JV_NULL)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED,
                             "%s: a normalizer is set; glmchat supports GLM's tokenizer, which has none", what);
    const jv *dec = jv_get(root, "decoder");
    if (!dec || !str_is(jv_get(dec, "type"), "ByteLevel"))
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "%s: the decoder must be ByteLevel", what);
    const jv *pre = jv_get(root, "pre_tokenizer");
    const jv *seq = pre ? jv_get(pre, "pretokenizers") : NULL;
    if (!pre || !str_is(jv_get(pre, "type"), "Sequence") || !seq || seq->type != JV_ARRAY || seq->n != 2)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED,
                             "%s: the pre_tokenizer must be a Sequence of Split and ByteLevel (GLM's)", what);
    const jv *split = seq->items[0], *bl = seq->items[1];
    const jv *pat = jv_get(jv_get(split, "pattern"), "Regex");
    if (!str_is(jv_get(split, "type"), "Split") || !pat || pat->type != JV_STRING ||
        !str_is(jv_get(split, "behavior"), "Isolated") || jv_truthy(jv_get(split, "invert")))
        return glm_error_set(err, GLM_ERR_UNSUPPORTED,
                             "%s: the first pre-tokenizer must be Split on a Regex, Isolated, not inverted", what);
    if (!str_is(jv_get(bl, "type"), "ByteLevel") || jv_truthy(jv_get(bl, "add_prefix_space")) ||
        jv_truthy(jv_get(bl, "use_regex")))
        return glm_error_set(err, GLM_ERR_UNSUPPORTED,
                             "%s: the second pre-tokenizer must be ByteLevel without prefix space or regex", what);
    *pattern = pat->str;
    const jv *model = jv_get(root, "model");
    if (!model || !str_is(jv_get(model, "type"), "BPE"))
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "%s: model.type must be BPE", what);
    if (jv_truthy(jv_get(model, "byte_fallback")) || !null_or_empty(jv_get(model, "continuing_subword_prefix")) ||
        !null_or_empty(jv_get(model, "end_of_word_suffix")) ||
        (jv_get(model, "dropout") && jv_get(model, "dropout")->type != JV_NULL))
        return glm_error_set(err, GLM_ERR_UNSUPPORTED,
                             "%s: BPE options byte_fallback, dropout and subword affixes are not supported", what);
    return GLM_OK;
}

static glm_status set_token_bytes(tok_tokenizer *t, int32_t id, const char *s, size_t n, const int16_t *byte_of_cp,
                                  uint32_t *off, uint32_t *len)
{
    size_t start = t->arena.len;
    int r = bytelevel_to_bytes(s, n, byte_of_cp, &t->arena);
    if (r < 0)
        return GLM_ERR_NOMEM;
    if (r == 0) { /* outside the alphabet: HF's decoder keeps the token's own UTF-8 */
        t->arena.len = start;
        if (tbuf_append(&t->arena, s, n) != GLM_OK)
            return GLM_ERR_NOMEM;
    }
    *off = (uint32_t)start;
    *len = (uint32_t)(t->arena.len - start);
    t->bytes_of[id] = (tok_span){*off, *len};
    return r == 1 ? GLM_OK : GLM_ERR_ARG; /* GLM_ERR_ARG: decodable but never produced by encode */
}

/* Where model.vocab and model.merges begin in the text (SIZE_MAX: absent): they are read in
 * place, one entry at a time, never as trees. Everything else in the file is small. */
typedef struct tok_doc {
    const char *text;
    size_t len;
    jv *root;
    size_t vocab_at, merges_at;
    size_t n_merges; /* elements of model.merges, counted as it was checked */
} tok_doc;

/* Calls fn on each "key": value of the vocabulary object; stops at the first failure. */
typedef glm_status (*vocab_entry_fn)(tok_tokenizer *t, const tbuf *key, const jv *id, void *user);

static glm_status each_vocab_entry(tok_tokenizer *t, const tok_doc *d, vocab_entry_fn fn, void *user,
                                   glm_error *err)
{
    jv_cursor c;
    jv_cursor_init(&c, d->text, d->len, err);
    c.i = d->vocab_at;
    tbuf key = {0};
    glm_status st = GLM_OK;
    int more = jv_cursor_enter(&c, JV_OBJECT);
    while (more == 1 && st == GLM_OK) {
        jv *id = NULL;
        st = jv_cursor_key(&c, &key);
        if (st == GLM_OK && !(id = jv_cursor_value(&c)))
            st = err && err->status ? err->status : GLM_ERR_FORMAT;
        if (st == GLM_OK)
            st = fn(t, &key, id, user);
        jv_free(id);
        if (st == GLM_OK)
            more = jv_cursor_next(&c, JV_OBJECT);
    }
    if (st == GLM_OK && more < 0)
        st = err && err->status ? err->status : GLM_ERR_FORMAT;
    tbuf_free(&key);
    return st;
}

typedef struct vocab_count {
    const char *what;
    glm_error *err;
    int32_t max_id;
    size_t n;
} vocab_count;

static glm_status count_entry(tok_tokenizer *t, const tbuf *key, const jv *v, void *user)
{
    (void)t;
    vocab_count *vc = user;
    if (v->type != JV_INT || v->num < 0 || v->num > 16777216)
        return glm_error_set(vc->err, GLM_ERR_FORMAT, "%s: model.vocab[\"%s\"] is not an id in 0..2^24",
                             vc->what, key->p ? key->p : "");
    if ((int32_t)v->num > vc->max_id)
        vc->max_id = (int32_t)v->num;
    vc->n++;
    return GLM_OK;
}

typedef struct vocab_add {
    const int16_t *byte_of_cp;
} vocab_add;

static glm_status add_entry(tok_tokenizer *t, const tbuf *key, const jv *v, void *user)
{
    const vocab_add *va = user;
    int32_t id = (int32_t)v->num;
    uint32_t off, len;
    glm_status st = set_token_bytes(t, id, key->p ? key->p : "", key->len, va->byte_of_cp, &off, &len);
    if (st == GLM_OK) {
        /* a key given twice: as in a JSON map, the earlier id is not in the vocabulary (unless
         * another key has it: load_vocab gives it that key's bytes after the pass) */
        int32_t before = vocab_insert(t, off, len, id);
        if (before >= 0 && before != id)
            t->bytes_of[before] = (tok_span){UINT32_MAX, 0};
    }
    return st == GLM_ERR_NOMEM ? GLM_ERR_NOMEM : GLM_OK;
}

static glm_status load_vocab(tok_tokenizer *t, const tok_doc *d, const jv *added, const int16_t *byte_of_cp,
                             const char *what, glm_error *err)
{
    vocab_count vc = {what, err, -1, 0};
    glm_status st = each_vocab_entry(t, d, count_entry, &vc, err);
    if (st)
        return st;
    int32_t max_id = vc.max_id;
    for (size_t i = 0; added && i < added->n; i++) {
        const jv *id = jv_get(added->items[i], "id");
        const jv *content = jv_get(added->items[i], "content");
        if (!id || id->type != JV_INT || id->num < 0 || id->num > 16777216 || !content ||
            content->type != JV_STRING || content->len == 0)
            return glm_error_set(err, GLM_ERR_FORMAT, "%s: added_tokens[%zu] needs an id and a non-empty content",
                                 what, i);
        if ((int32_t)id->num > max_id)
            max_id = (int32_t)id->num;
    }
    t->n_ids = max_id + 1;
    t->bytes_of = malloc((size_t)(t->n_ids ? t->n_ids : 1) * sizeof *t->bytes_of);
    size_t vsize = table_size(vc.n + 1);
    t->vocab = calloc(vsize, sizeof *t->vocab);
    /* the arena exists before the first token (which may be "", adding no bytes): spans point into it */
    if (!t->bytes_of || !t->vocab || tbuf_reserve(&t->arena, 0) != GLM_OK)
        return glm_error_set(err, GLM_ERR_NOMEM, "%s: out of memory", what);
    t->vocab_mask = vsize - 1;
    for (int32_t i = 0; i < t->n_ids; i++)
        t->bytes_of[i] = (tok_span){UINT32_MAX, 0};
    vocab_add va = {byte_of_cp};
    st = each_vocab_entry(t, d, add_entry, &va, err);
    if (st == GLM_ERR_NOMEM)
        return glm_error_set(err, GLM_ERR_NOMEM, "%s: out of memory", what);
    if (st)
        return st;
    /* An id left without bytes while a key still has it ("b": 1, "a": 1, "a": 2 leaves "b" at 1):
     * encode gives every id in the table, so each must decode. */
    for (size_t i = 0; i < vsize; i++) {
        const tok_slot *sl = &t->vocab[i];
        if (sl->hash && t->bytes_of[sl->id].off == UINT32_MAX)
            t->bytes_of[sl->id] = (tok_span){sl->off, sl->len};
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = vocab_find(t, &c, 1);
    }
    t->added = calloc(added && added->n ? added->n : 1, sizeof *t->added);
    if (!t->added)
        return glm_error_set(err, GLM_ERR_NOMEM, "%s: out of memory", what);
    for (size_t i = 0; added && i < added->n; i++) {
        const jv *content = jv_get(added->items[i], "content");
        int32_t id = (int32_t)jv_get(added->items[i], "id")->num;
        uint32_t off = (uint32_t)t->arena.len;
        if (tbuf_append(&t->arena, content->str, content->len) != GLM_OK)
            return glm_error_set(err, GLM_ERR_NOMEM, "%s: out of memory", what);
        t->added[t->n_added++] = (tok_added){off, (uint32_t)content->len, id};
        t->added_first[(unsigned char)content->str[0]] = 1;
        uint32_t doff, dlen;
        if (set_token_bytes(t, id, content->str, content->len, byte_of_cp, &doff, &dlen) == GLM_ERR_NOMEM)
            return glm_error_set(err, GLM_ERR_NOMEM, "%s: out of memory", what);
    }
    return GLM_OK;
}

/* One merge as "A B" or ["A", "B"] -> the two byte-level strings. */
static int merge_parts(const jv *m, const char **a, size_t *al, const char **b, size_t *bl)
{
    if (m->type == JV_ARRAY && m->n == 2 && m->items[0]->type == JV_STRING && m->items[1]->type == JV_STRING) {
        *a = m->items[0]->str, *al = m->items[0]->len;
        *b = m->items[1]->str, *bl = m->items[1]->len;
        return 1;
    }
    if (m->type != JV_STRING)
        return 0;
    const char *sp = memchr(m->str, ' ', m->len);
    if (!sp || memchr(sp + 1, ' ', m->len - (size_t)(sp + 1 - m->str)))
        return 0;
    *a = m->str, *al = (size_t)(sp - m->str);
    *b = sp + 1, *bl = m->len - *al - 1;
    return 1;
}

/* Merge i (a parsed element of model.merges) into the table. */
static glm_status add_merge(tok_tokenizer *t, const jv *m, size_t i, tbuf *tmp, const int16_t *byte_of_cp,
                            const char *what, glm_error *err)
{
    const char *a, *b;
    size_t al, bl;
    if (!merge_parts(m, &a, &al, &b, &bl))
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: model.merges[%zu] is not a pair of tokens", what, i);
    int32_t ids[3];
    const char *parts[2] = {a, b};
    size_t lens[2] = {al, bl};
    tbuf_clear(tmp);
    /* reserved even for two empty parts (" "): vocab_find wants a pointer, not NULL */
    if (tbuf_reserve(tmp, al + bl) != GLM_OK)
        return glm_error_set(err, GLM_ERR_NOMEM, "%s: out of memory", what);
    for (int k = 0; k < 2; k++) {
        size_t start = tmp->len;
        if (bytelevel_to_bytes(parts[k], lens[k], byte_of_cp, tmp) != 1)
            return glm_error_set(err, GLM_ERR_FORMAT, "%s: model.merges[%zu] holds a token outside the byte "
                                 "alphabet", what, i);
        ids[k] = vocab_find(t, tmp->p + start, tmp->len - start);
    }
    ids[2] = vocab_find(t, tmp->p, tmp->len);
    if (ids[0] < 0 || ids[1] < 0 || ids[2] < 0)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: model.merges[%zu] names a token missing from model.vocab",
                             what, i);
    merge_insert(t, ids[0], ids[1], (uint32_t)i, ids[2]);
    return GLM_OK;
}

static glm_status load_merges(tok_tokenizer *t, const tok_doc *d, const int16_t *byte_of_cp, const char *what,
                              glm_error *err)
{
    size_t msize = table_size(d->n_merges + 1);
    t->merges = malloc(msize * sizeof *t->merges);
    if (!t->merges)
        return glm_error_set(err, GLM_ERR_NOMEM, "%s: out of memory", what);
    for (size_t i = 0; i < msize; i++)
        t->merges[i].id = -1;
    t->merges_mask = msize - 1;
    jv_cursor c;
    jv_cursor_init(&c, d->text, d->len, err);
    c.i = d->merges_at;
    tbuf tmp = {0};
    glm_status st = GLM_OK;
    int more = jv_cursor_enter(&c, JV_ARRAY);
    for (size_t i = 0; more == 1 && st == GLM_OK; i++) {
        jv *m = jv_cursor_value(&c);
        if (!m) {
            st = err && err->status ? err->status : GLM_ERR_FORMAT;
            break;
        }
        st = add_merge(t, m, i, &tmp, byte_of_cp, what, err);
        jv_free(m);
        if (st == GLM_OK && (more = jv_cursor_next(&c, JV_ARRAY)) < 0)
            st = err && err->status ? err->status : GLM_ERR_FORMAT;
    }
    tbuf_free(&tmp);
    return st;
}

static char peek(jv_cursor *c)
{
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' || c->s[c->i] == '\r'))
        c->i++;
    return c->i < c->n ? c->s[c->i] : 0;
}

/* Steps over model.merges, counting its elements (the merge table is sized once from it). */
static glm_status skip_merges(jv_cursor *c, tok_doc *d)
{
    d->n_merges = 0;
    if (peek(c) != '[')
        return jv_cursor_skip(c, &d->merges_at);
    d->merges_at = c->i;
    int more = jv_cursor_enter(c, JV_ARRAY);
    size_t at;
    while (more == 1) {
        if (jv_cursor_skip(c, &at) != GLM_OK)
            return GLM_ERR_FORMAT;
        d->n_merges++;
        more = jv_cursor_next(c, JV_ARRAY);
    }
    return more == 0 ? GLM_OK : GLM_ERR_FORMAT;
}

/* The model object with its vocab and merges left in place (their offsets in d). */
static jv *read_model(jv_cursor *c, tok_doc *d)
{
    jv *model = jv_new(JV_OBJECT);
    tbuf key = {0};
    int more = model ? jv_cursor_enter(c, JV_OBJECT) : -1;
    d->vocab_at = d->merges_at = SIZE_MAX;
    while (more == 1) {
        if (jv_cursor_key(c, &key) != GLM_OK)
            break;
        const char *k = key.p ? key.p : "";
        if (strcmp(k, "vocab") == 0) {
            if (jv_cursor_skip(c, &d->vocab_at) != GLM_OK)
                break;
        } else if (strcmp(k, "merges") == 0) {
            if (skip_merges(c, d) != GLM_OK)
                break;
        } else {
            jv *v = jv_cursor_value(c);
            if (!v || jv_object_set(model, key.p, key.len, v) != GLM_OK)
                break;
        }
        more = jv_cursor_next(c, JV_OBJECT);
    }
    tbuf_free(&key);
    if (more != 0) {
        if (c->err && c->err->status == GLM_OK)
            glm_error_set(c->err, GLM_ERR_NOMEM, "JSON: out of memory");
        jv_free(model);
        return NULL;
    }
    return model;
}

/* The file as a tree of its small parts, with where model.vocab and model.merges lie. Every
 * byte is checked as jv_parse checks it, so reading the two later cannot meet bad JSON. */
static glm_status read_doc(tok_doc *d, glm_error *err)
{
    jv_cursor c;
    jv_cursor_init(&c, d->text, d->len, err);
    d->vocab_at = d->merges_at = SIZE_MAX;
    if (peek(&c) != '{') { /* not an object: what it is gets refused by check_pipeline */
        d->root = jv_cursor_value(&c);
    } else {
        d->root = jv_new(JV_OBJECT);
        tbuf key = {0};
        int more = d->root ? jv_cursor_enter(&c, JV_OBJECT) : -1;
        while (more == 1) {
            if (jv_cursor_key(&c, &key) != GLM_OK)
                break;
            jv *v = strcmp(key.p ? key.p : "", "model") == 0 && peek(&c) == '{' ? read_model(&c, d)
                                                                                 : jv_cursor_value(&c);
            if (!v || jv_object_set(d->root, key.p, key.len, v) != GLM_OK)
                break;
            more = jv_cursor_next(&c, JV_OBJECT);
        }
        tbuf_free(&key);
        if (more != 0) {
            if (err && err->status == GLM_OK)
                glm_error_set(err, GLM_ERR_NOMEM, "JSON: out of memory");
            jv_free(d->root);
            d->root = NULL;
        }
    }
    if (d->root && jv_cursor_end(&c) != GLM_OK) {
        jv_free(d->root);
        d->root = NULL;
    }
    return d->root ? GLM_OK : err && err->status ? err->status : GLM_ERR_FORMAT;
}

tok_tokenizer *tok_load_mem(const char *json, size_t len, const char *what, glm_error *err)
{
    glm_error local;
    if (!err)
        err = &local;
    tok_doc d = {.text = json, .len = len};
    if (read_doc(&d, err) != GLM_OK) {
        char inner[sizeof err->message];
        snprintf(inner, sizeof inner, "%s", err->message);
        glm_error_set(err, GLM_ERR_FORMAT, "%s is not valid JSON (%s)", what, inner);
        return NULL;
    }
    jv *root = d.root;
    tok_tokenizer *t = calloc(1, sizeof *t);
    const char *pattern = NULL;
    glm_status st = t ? check_pipeline(root, what, &pattern, err) : glm_error_set(err, GLM_ERR_NOMEM, "out of memory");
    const jv *model = jv_get(root, "model");
    const jv *added = jv_get(root, "added_tokens");
    if (st == GLM_OK && (d.vocab_at == SIZE_MAX || json[d.vocab_at] != '{' || d.merges_at == SIZE_MAX ||
                         json[d.merges_at] != '[' || (added && added->type != JV_ARRAY)))
        st = glm_error_set(err, GLM_ERR_FORMAT, "%s: model.vocab (object), model.merges and added_tokens (arrays) "
                           "are required", what);
    if (st == GLM_OK) {
        uint32_t cp_of[256];
        int16_t byte_of_cp[324];
        byte_alphabet(cp_of);
        for (int i = 0; i < 324; i++)
            byte_of_cp[i] = -1;
        for (int b = 0; b < 256; b++)
            byte_of_cp[cp_of[b]] = (int16_t)b;
        t->ignore_merges = jv_truthy(jv_get(model, "ignore_merges"));
        st = load_vocab(t, &d, added, byte_of_cp, what, err);
        if (st == GLM_OK)
            st = load_merges(t, &d, byte_of_cp, what, err);
    }
    if (st == GLM_OK) {
        t->split = pt_new(pattern, err);
        if (!t->split) { /* pt_new's sentence knows the pattern, not the file it came from */
            char inner[sizeof err->message];
            snprintf(inner, sizeof inner, "%s", err->message);
            st = glm_error_set(err, err->status ? err->status : GLM_ERR_UNSUPPORTED,
                               "%s: pre_tokenizer.pretokenizers[0].pattern.Regex: %s", what, inner);
        }
    }
    jv_free(root);
    if (st != GLM_OK) {
        tok_free(t);
        return NULL;
    }
    return t;
}

/* Loading holds the whole file and tables about its size beside it, so the file is bounded. */
#define TOK_MAX_FILE (64 << 20)

tok_tokenizer *tok_load(const char *path, glm_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        glm_error_set(err, GLM_ERR_IO, "cannot open tokenizer %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && sb.st_size > TOK_MAX_FILE) {
        fclose(f);
        glm_error_set(err, GLM_ERR_FORMAT, "tokenizer %s is %lld bytes, above glmchat's limit of "
                      "%d MiB: not a tokenizer glmchat can load",
                      path, (long long)sb.st_size, TOK_MAX_FILE >> 20);
        return NULL;
    }
    tbuf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (b.len + n > TOK_MAX_FILE) { /* a file that grows while read, or a pipe */
            fclose(f);
            tbuf_free(&b);
            glm_error_set(err, GLM_ERR_FORMAT, "tokenizer %s is larger than glmchat's limit of "
                          "%d MiB", path, TOK_MAX_FILE >> 20);
            return NULL;
        }
        if (tbuf_append(&b, chunk, n) != GLM_OK) {
            fclose(f);
            tbuf_free(&b);
            glm_error_set(err, GLM_ERR_NOMEM, "out of memory reading %s", path);
            return NULL;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        tbuf_free(&b);
        glm_error_set(err, GLM_ERR_IO, "cannot read tokenizer %s", path);
        return NULL;
    }
    tok_tokenizer *t = tok_load_mem(b.p ? b.p : "", b.len, path, err);
    tbuf_free(&b);
    return t;
}

void tok_free(tok_tokenizer *t)
{
    if (!t)
        return;
    tbuf_free(&t->arena);
    free(t->bytes_of);
    free(t->vocab);
    free(t->merges);
    free(t->added);
    pt_free(t->split);
    free(t);
}

/* ---- encoding ---- */

glm_status tok_ids_push(tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 256;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v)
            return GLM_ERR_NOMEM;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return GLM_OK;
}

void tok_ids_free(tok_ids *ids)
{
    free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}

typedef struct bpe_sym {
    int32_t id;
    int32_t prev, next; /* -1: none */
    uint32_t len;       /* 0: merged away */
} bpe_sym;

typedef struct bpe_cand {
    uint32_t rank;
    int32_t pos, id;
} bpe_cand;

/* A per-call cache of merged pieces (HF keeps one too): long texts repeat their words. */
enum { CACHE_SLOTS = 4096, CACHE_BYTES = 64, CACHE_IDS = 24, CACHE_MIN_TEXT = 4096 };

typedef struct piece_cache_slot {
    uint64_t hash;
    uint8_t len, n_ids;
    char bytes[CACHE_BYTES];
    int32_t ids[CACHE_IDS];
} piece_cache_slot;

typedef struct enc_work {
    const tok_tokenizer *t;
    tok_ids *ids;
    bpe_sym *syms;
    bpe_cand *heap;
    size_t cap;
    piece_cache_slot *cache; /* NULL for short texts */
    glm_error *err;
} enc_work;

static int cand_less(const bpe_cand *a, const bpe_cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(bpe_cand *h, size_t *n, bpe_cand c)
{
    size_t i = (*n)++;
    h[i] = c;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&h[i], &h[p]))
            break;
        bpe_cand tmp = h[i];
        h[i] = h[p];
        h[p] = tmp;
        i = p;
    }
}

static bpe_cand heap_pop(bpe_cand *h, size_t *n)
{
    bpe_cand top = h[0];
    h[0] = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && cand_less(&h[l], &h[m]))
            m = l;
        if (r < *n && cand_less(&h[r], &h[m]))
            m = r;
        if (m == i)
            break;
        bpe_cand tmp = h[i];
        h[i] = h[m];
        h[m] = tmp;
        i = m;
    }
    return top;
}

static void push_pair(enc_work *w, size_t *hn, int32_t pos)
{
    int32_t next = w->syms[pos].next;
    if (next < 0)
        return;
    const tok_merge_slot *m = merge_find(w->t, w->syms[pos].id, w->syms[next].id);
    if (m)
        heap_push(w->heap, hn, (bpe_cand){m->rank, pos, m->id});
}

/* HF's Word::merge_all: lowest rank first, leftmost on ties; stale candidates are skipped. */
static glm_status bpe_merge(enc_work *w, const char *p, size_t n)
{
    if (n > w->cap) {
        size_t cap = n * 2;
        /* every merge adds at most two candidates, so 3n bounds the heap */
        bpe_sym *s = realloc(w->syms, cap * sizeof *s);
        if (s)
            w->syms = s;
        bpe_cand *h = s ? realloc(w->heap, cap * 3 * sizeof *h) : NULL;
        if (!s || !h)
            return glm_error_set(w->err, GLM_ERR_NOMEM, "tokenizer: out of memory");
        w->heap = h;
        w->cap = cap;
    }
    size_t ns = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = w->t->byte_id[(unsigned char)p[i]];
        if (id < 0)
            continue; /* no unknown token: HF drops the character */
        w->syms[ns] = (bpe_sym){id, (int32_t)ns - 1, (int32_t)ns + 1, 1};
        ns++;
    }
    if (ns == 0)
        return GLM_OK;
    w->syms[ns - 1].next = -1;
    size_t hn = 0;
    for (size_t i = 0; i + 1 < ns; i++)
        push_pair(w, &hn, (int32_t)i);
    while (hn > 0) {
        bpe_cand top = heap_pop(w->heap, &hn);
        bpe_sym *cur = &w->syms[top.pos];
        if (cur->len == 0 || cur->next < 0)
            continue;
        bpe_sym *right = &w->syms[cur->next];
        const tok_merge_slot *m = merge_find(w->t, cur->id, right->id);
        if (!m || m->id != top.id)
            continue;
        cur->id = top.id;
        cur->len += right->len;
        cur->next = right->next;
        right->len = 0;
        if (cur->next >= 0)
            w->syms[cur->next].prev = top.pos;
        if (cur->prev >= 0)
            push_pair(w, &hn, cur->prev);
        push_pair(w, &hn, top.pos);
    }
    for (int32_t i = 0; i >= 0; i = w->syms[i].next)
        if (tok_ids_push(w->ids, w->syms[i].id) != GLM_OK)
            return glm_error_set(w->err, GLM_ERR_NOMEM, "tokenizer: out of memory");
    return GLM_OK;
}

static glm_status encode_piece(const char *p, size_t n, void *user)
{
    enc_work *w = user;
    if (w->t->ignore_merges) {
        int32_t id = vocab_find(w->t, p, n);
        if (id >= 0) {
            if (tok_ids_push(w->ids, id) != GLM_OK)
                return glm_error_set(w->err, GLM_ERR_NOMEM, "tokenizer: out of memory");
            return GLM_OK;
        }
    }
    if (!w->cache || n > CACHE_BYTES)
        return bpe_merge(w, p, n);
    uint64_t h = hash_bytes(p, n);
    piece_cache_slot *slot = &w->cache[h & (CACHE_SLOTS - 1)];
    if (slot->hash == h && slot->len == n && memcmp(slot->bytes, p, n) == 0) {
        for (int i = 0; i < slot->n_ids; i++)
            if (tok_ids_push(w->ids, slot->ids[i]) != GLM_OK)
                return glm_error_set(w->err, GLM_ERR_NOMEM, "tokenizer: out of memory");
        return GLM_OK;
    }
    size_t before = w->ids->n;
    glm_status st = bpe_merge(w, p, n);
    size_t made = w->ids->n - before;
    if (st == GLM_OK && made <= CACHE_IDS) {
        slot->hash = h;
        slot->len = (uint8_t)n;
        slot->n_ids = (uint8_t)made;
        memcpy(slot->bytes, p, n);
        memcpy(slot->ids, w->ids->v + before, made * sizeof *slot->ids);
    }
    return st;
}

/* The longest added token at s, or NULL. */
static const tok_added *added_at(const tok_tokenizer *t, const char *s, size_t n)
{
    const tok_added *best = NULL;
    for (size_t i = 0; i < t->n_added; i++) {
        const tok_added *a = &t->added[i];
        if (a->len <= n && (!best || a->len > best->len) && memcmp(t->arena.p + a->off, s, a->len) == 0)
            best = a;
    }
    return best;
}

static glm_status encode_valid(const tok_tokenizer *t, const char *s, size_t n, enc_work *w)
{
    size_t seg = 0;
    for (size_t i = 0; i < n; i++) {
        if (!t->added_first[(unsigned char)s[i]])
            continue;
        const tok_added *a = added_at(t, s + i, n - i);
        if (!a)
            continue;
        if (i > seg) {
            glm_status st = pt_split(t->split, s + seg, i - seg, encode_piece, w, w->err);
            if (st != GLM_OK)
                return st;
        }
        if (tok_ids_push(w->ids, a->id) != GLM_OK)
            return glm_error_set(w->err, GLM_ERR_NOMEM, "tokenizer: out of memory");
        i += a->len - 1;
        seg = i + 1;
    }
    if (n > seg)
        return pt_split(t->split, s + seg, n - seg, encode_piece, w, w->err);
    return GLM_OK;
}

glm_status tok_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *ids, glm_error *err)
{
    enc_work w = {t, ids, NULL, NULL, 0, NULL, err};
    if (len >= CACHE_MIN_TEXT)
        w.cache = calloc(CACHE_SLOTS, sizeof *w.cache); /* without it, only slower */
    tbuf fixed = {0};
    if (!utf8_valid(text, len)) {
        if (tbuf_append_utf8(&fixed, text, len, 1, NULL) != GLM_OK)
            return glm_error_set(err, GLM_ERR_NOMEM, "tokenizer: out of memory");
        text = fixed.p;
        len = fixed.len;
    }
    glm_status st = encode_valid(t, text, len, &w);
    free(w.syms);
    free(w.heap);
    free(w.cache);
    tbuf_free(&fixed);
    return st;
}

/* ---- decoding ---- */

const char *tok_token_bytes(const tok_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_ids || t->bytes_of[id].off == UINT32_MAX)
        return NULL;
    *len = t->bytes_of[id].len;
    return t->arena.p + t->bytes_of[id].off;
}

int32_t tok_token_id(const tok_tokenizer *t, const char *s, size_t len)
{
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == len && memcmp(t->arena.p + t->added[i].off, s, len) == 0)
            return t->added[i].id;
    return vocab_find(t, s, len);
}

int32_t tok_vocab_size(const tok_tokenizer *t)
{
    return t->n_ids;
}

glm_status tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, tbuf *out, glm_error *err)
{
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *b = tok_token_bytes(t, ids[i], &len);
        if (!b)
            return glm_error_set(err, GLM_ERR_ARG, "token id %ld (position %zu) is not in the vocabulary (0..%ld)",
                                 (long)ids[i], i, (long)t->n_ids - 1);
        if (tbuf_append(out, b, len) != GLM_OK)
            return glm_error_set(err, GLM_ERR_NOMEM, "tokenizer: out of memory");
    }
    return GLM_OK;
}

struct tok_stream {
    const tok_tokenizer *t;
    char held[4];
    size_t n_held;
};

tok_stream *tok_stream_new(const tok_tokenizer *t)
{
    tok_stream *s = calloc(1, sizeof *s);
    if (s)
        s->t = t;
    return s;
}

glm_status tok_stream_feed(tok_stream *s, int32_t id, tbuf *out, glm_error *err)
{
    size_t len;
    const char *b = tok_token_bytes(s->t, id, &len);
    if (!b)
        return glm_error_set(err, GLM_ERR_ARG, "token id %ld is not in the vocabulary", (long)id);
    if (s->n_held == 0) {
        size_t held;
        if (tbuf_append_utf8(out, b, len, 0, &held) != GLM_OK)
            return glm_error_set(err, GLM_ERR_NOMEM, "tokenizer: out of memory");
        memcpy(s->held, b + len - held, held);
        s->n_held = held;
        return GLM_OK;
    }
    tbuf tmp = {0};
    size_t held;
    glm_status st = tbuf_append(&tmp, s->held, s->n_held);
    if (st == GLM_OK)
        st = tbuf_append(&tmp, b, len);
    if (st == GLM_OK)
        st = tbuf_append_utf8(out, tmp.p, tmp.len, 0, &held);
    if (st == GLM_OK) {
        memcpy(s->held, tmp.p + tmp.len - held, held);
        s->n_held = held;
    }
    tbuf_free(&tmp);
    return st == GLM_OK ? GLM_OK : glm_error_set(err, GLM_ERR_NOMEM, "tokenizer: out of memory");
}

glm_status tok_stream_finish(tok_stream *s, tbuf *out)
{
    glm_status st = tbuf_append_utf8(out, s->held, s->n_held, 1, NULL);
    s->n_held = 0;
    return st;
}

void tok_stream_free(tok_stream *s)
{
    free(s);
}
