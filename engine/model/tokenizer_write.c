/* tokenizer_write.c: the tokenizer.json that mkmodel ships with its random models: a valid
 * Hugging Face byte-level BPE with GLM's pre-tokenizer regex and GLM's 36 added tokens. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/mkmodel.h"

static const char glm_split_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* GLM's added tokens from id 154820, in id order; the first 18 are special. */
static const char *const glm_added_tokens[36] = {
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
    "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>",
    "<|begin_of_video|>", "<|end_of_video|>", "<|begin_of_audio|>", "<|end_of_audio|>",
    "<|begin_of_transcription|>", "<|end_of_transcription|>", "<|code_prefix|>",
    "<|code_middle|>", "<|code_suffix|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>",
    "</arg_value>", "/nothink", "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>",
};
#define GLM_ADDED_BASE 154820
#define GLM_N_SPECIAL 18

/* Merges in rank order, as "left right" in byte-level symbols (U+0120 is a space). */
static const char *const merges[] = {
    "Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "r e", "Ġ s", "e n", "a t", "o r", "i s",
    "in g", "Ġ w", "Ġ o", "Ġ c", "a n", "Ġa n", "Ġan d", "Ġ i", "Ġi s", "Ġo f", "Ġt o", "l l",
    "e d", "Ġ h", "Ġh e", "o u", "Ġ m", "Ġ b", "Ġ f", "Ġ p", "Ġ d", "e s", "i t", "a l", "a r",
    "Ċ Ċ", "Ġ Ġ",
};

/* GPT-2's byte to printable code point table. */
static unsigned byte_char(int b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
        return (unsigned)b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174))
            n++;
    return 256u + (unsigned)n;
}

static void utf8(unsigned cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        out[2] = 0;
    }
}

static cJSON *added_token(int i)
{
    cJSON *t = cJSON_CreateObject();
    if (!t)
        return NULL;
    cJSON_AddNumberToObject(t, "id", GLM_ADDED_BASE + i);
    cJSON_AddStringToObject(t, "content", glm_added_tokens[i]);
    cJSON_AddBoolToObject(t, "single_word", 0);
    cJSON_AddBoolToObject(t, "lstrip", 0);
    cJSON_AddBoolToObject(t, "rstrip", 0);
    cJSON_AddBoolToObject(t, "normalized", 0);
    cJSON_AddBoolToObject(t, "special", i < GLM_N_SPECIAL);
    return t;
}

static cJSON *byte_level(int add_prefix_space, int trim_offsets, int use_regex)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "type", "ByteLevel");
    cJSON_AddBoolToObject(o, "add_prefix_space", add_prefix_space);
    cJSON_AddBoolToObject(o, "trim_offsets", trim_offsets);
    cJSON_AddBoolToObject(o, "use_regex", use_regex);
    return o;
}

static cJSON *pre_tokenizer(void)
{
    cJSON *seq = cJSON_CreateObject(), *list = cJSON_CreateArray(), *split = cJSON_CreateObject(),
          *pat = cJSON_CreateObject();
    if (!seq || !list || !split || !pat) {
        cJSON_Delete(seq);
        cJSON_Delete(list);
        cJSON_Delete(split);
        cJSON_Delete(pat);
        return NULL;
    }
    cJSON_AddStringToObject(pat, "Regex", glm_split_regex);
    cJSON_AddStringToObject(split, "type", "Split");
    cJSON_AddItemToObject(split, "pattern", pat);
    cJSON_AddStringToObject(split, "behavior", "Isolated");
    cJSON_AddBoolToObject(split, "invert", 0);
    cJSON_AddItemToArray(list, split);
    cJSON_AddItemToArray(list, byte_level(0, 1, 0));
    cJSON_AddStringToObject(seq, "type", "Sequence");
    cJSON_AddItemToObject(seq, "pretokenizers", list);
    return seq;
}

static cJSON *bpe_model(void)
{
    cJSON *m = cJSON_CreateObject(), *vocab = cJSON_CreateObject(), *ml = cJSON_CreateArray();
    if (!m || !vocab || !ml) {
        cJSON_Delete(m);
        cJSON_Delete(vocab);
        cJSON_Delete(ml);
        return NULL;
    }
    cJSON_AddStringToObject(m, "type", "BPE");
    cJSON_AddNullToObject(m, "dropout");
    cJSON_AddNullToObject(m, "unk_token");
    cJSON_AddNullToObject(m, "continuing_subword_prefix");
    cJSON_AddNullToObject(m, "end_of_word_suffix");
    cJSON_AddBoolToObject(m, "fuse_unk", 0);
    cJSON_AddBoolToObject(m, "byte_fallback", 0);
    cJSON_AddBoolToObject(m, "ignore_merges", 1);
    char sym[4];
    for (int b = 0; b < 256; b++) {
        utf8(byte_char(b), sym);
        cJSON_AddNumberToObject(vocab, sym, b);
    }
    int id = 256;
    for (size_t i = 0; i < sizeof merges / sizeof *merges; i++) {
        char left[32], joined[64];
        const char *sp = strchr(merges[i], ' ');
        snprintf(left, sizeof left, "%.*s", (int)(sp - merges[i]), merges[i]);
        snprintf(joined, sizeof joined, "%s%s", left, sp + 1);
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString(left));
        cJSON_AddItemToArray(pair, cJSON_CreateString(sp + 1));
        cJSON_AddItemToArray(ml, pair);
        cJSON_AddNumberToObject(vocab, joined, id++);
    }
    cJSON_AddItemToObject(m, "vocab", vocab);
    cJSON_AddItemToObject(m, "merges", ml);
    return m;
}

glm_status glm_write_tokenizer(const char *dir, glm_error *err)
{
    cJSON *root = cJSON_CreateObject(), *added = cJSON_CreateArray();
    if (!root || !added) {
        cJSON_Delete(root);
        cJSON_Delete(added);
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory writing tokenizer.json");
    }
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    for (int i = 0; i < 36; i++)
        cJSON_AddItemToArray(added, added_token(i));
    cJSON_AddItemToObject(root, "added_tokens", added);
    cJSON_AddNullToObject(root, "normalizer");
    cJSON_AddItemToObject(root, "pre_tokenizer", pre_tokenizer());
    cJSON_AddItemToObject(root, "post_processor", byte_level(1, 0, 1));
    cJSON_AddItemToObject(root, "decoder", byte_level(1, 1, 1));
    cJSON_AddItemToObject(root, "model", bpe_model());
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory writing tokenizer.json");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "wb");
    glm_status st = GLM_OK;
    if (!f)
        st = glm_error_set(err, GLM_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    else {
        int bad = fputs(text, f) == EOF;
        bad |= fclose(f) != 0;
        if (bad)
            st = glm_error_set(err, GLM_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    free(text);
    return st;
}
