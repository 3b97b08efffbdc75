/* template_check.h: a model directory's own chat template (chat_template.jinja, else the
 * chat_template of tokenizer_config.json) compared by SHA-256 with the revisions glmchat renders.
 *
 * glmchat renders GLM-5's template natively (template.c) and never interprets the model's file; a
 * file that is another revision may render differently, so the engine says so once, as a notice. */
#ifndef GLMCHAT_TEXT_TEMPLATE_CHECK_H
#define GLMCHAT_TEXT_TEMPLATE_CHECK_H

#include <stddef.h>

#include "glm.h"

typedef struct tmpl_check {
    int found;            /* 1: the directory holds a template */
    char source[4200];    /* where it came from: the file (and the key, for tokenizer_config.json) */
    char sha256[65];      /* of its text as UTF-8 bytes */
    size_t bytes;
    const char *revision; /* the revision glmchat implements that it is, or NULL: another one */
} tmpl_check;

/* The revisions glmchat's renderer equals (each rendered by jinja2 in tests/e2e/template_jinja.sh). */
typedef struct tmpl_revision {
    const char *sha256;
    size_t bytes;
    const char *name;
} tmpl_revision;
extern const tmpl_revision tmpl_revisions[];
extern const int tmpl_n_revisions;

/* Reads dir's template, if any, and looks its hash up (err must not be NULL). GLM_ERR_IO or GLM_ERR_FORMAT (naming the
 * file) when a template file is there but cannot be read or parsed; out->found is 0 when none. */
glm_status tmpl_check_dir(const char *dir, tmpl_check *out, glm_error *err);

/* The notice for another revision (file, hash, what glmchat renders instead) into buf; 0 when
 * none is due (no template, or a known one). */
int tmpl_check_notice(const tmpl_check *c, char *buf, size_t n);

#endif
