/* export_internal.h: what the export writers (JSON, Markdown, HTML) share: a conversation's
 * own fields loaded once, and the per-format writers export.c dispatches to. */
#ifndef GLMCHAT_STORAGE_EXPORT_INTERNAL_H
#define GLMCHAT_STORAGE_EXPORT_INTERNAL_H

#include <stdio.h>

#include "storage/db_internal.h"

#define EXPORT_JSON_VERSION 1

typedef struct field_bytes {
    char *data; /* NULL for SQL NULL */
    size_t len;
} field_bytes;

typedef struct conv_record {
    int64_t id;
    field_bytes title, model, settings, system_prompt;
    int64_t created_at, updated_at;
    int64_t leaf; /* 0 when none */
} conv_record;

int conv_record_load(db_store *db, int64_t conv, conv_record *r);
void conv_record_clear(conv_record *r);

/* Writers: 0, or -1 when out of memory (the caller checks ferror for write failures). */
int export_json_conversation(FILE *out, const conv_record *r, const conv_messages *tree,
                             int top_level, int indent);
int export_md_conversation(FILE *out, const conv_record *r, const conv_messages *path);
void export_html_begin(FILE *out, const conv_record *only);
int export_html_conversation(FILE *out, const conv_record *r, const conv_messages *path);
void export_html_end(FILE *out);
/* Writes s escaped for HTML text and attribute context (quotes included); what HTML cannot
 * carry (invalid UTF-8, control characters) becomes U+FFFD. */
void export_html_escape(FILE *out, const char *s, size_t len);
/* Writes the Markdown s as HTML blocks (export_html_md.c): only its own tags, all content
 * escaped, anchors only for http(s) URLs. 0, or -1 when out of memory. */
int export_html_markdown(FILE *out, const char *s, size_t len);

/* "2026-12-02 16:40 UTC" from ms since the epoch. */
void export_format_time(int64_t ms, char *buf, size_t n);

/* The heading a conversation goes by: its title, else its first user words, else "Conversation N". */
void export_display_title(const conv_record *r, const conv_messages *path, char *buf, size_t n);

#endif
