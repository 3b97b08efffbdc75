/* attach.h: documents that go with a scripted prompt: piped stdin and `-f FILE` text files,
 * each fenced and labelled after the prompt text so the model sees where one ends. */
#ifndef GLMCHAT_APP_ATTACH_H
#define GLMCHAT_APP_ATTACH_H

#include <stddef.h>
#include <stdio.h>

#include "app/tools/workspace.h"

/* The most bytes one document (a file or stdin) may hold. */
#define ATTACH_MAX_BYTES (1024 * 1024)

/* A growing message: the prompt, then documents. */
typedef struct attach_buf {
    char *text;
    size_t len, cap;
} attach_buf;

/* Reads all of f (at most ATTACH_MAX_BYTES, no NUL bytes) into a new string; label names it in
 * errors. NULL with err on failure. *len_out gets its length. */
char *attach_read_stream(FILE *f, const char *label, size_t *len_out, char *err, size_t errlen);

/* Appends text as it is. 0, or -1 with err (out of memory). */
int attach_add_text(attach_buf *b, const char *text, char *err, size_t errlen);

/* Appends "\n\nLABEL:\n" and body in a backtick fence longer than any backtick run inside. */
int attach_add_document(attach_buf *b, const char *label, const char *body, size_t len, char *err,
                        size_t errlen);

/* Reads path (resolved inside ws, as the file tools are) and appends it as a document labelled
 * with its path relative to the workspace. 0, or -1 with err naming the file. */
int attach_add_file(attach_buf *b, const workspace *ws, const char *path, char *err, size_t errlen);

void attach_buf_free(attach_buf *b);

#endif
