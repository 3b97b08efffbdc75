/* chat_branches.h: the alternatives a conversation's current path passed by (edits, retries,
 * dropped turns), numbered so that `/branch N` can switch to any of them.
 *
 * A branching point is a message of the path whose parent has other children (an edited user
 * message, a retried reply), or the path's end when its last message has children (a turn
 * dropped with /drop). Its alternatives are all those children, oldest first; the one on the
 * path is marked shown. Alternatives are numbered 1..N across the points, root first. */
#ifndef GLMCHAT_APP_CHAT_BRANCHES_H
#define GLMCHAT_APP_CHAT_BRANCHES_H

#include <stddef.h>
#include <stdint.h>

#include "storage/storage.h"

#define CHAT_BRANCH_PREVIEW 48 /* bytes of a preview, cut at a UTF-8 boundary */

typedef struct chat_branch_alt {
    int64_t msg;         /* database id */
    int64_t number;      /* its number in the conversation (msg_number) */
    int64_t at;          /* the number of the path message it stands beside; for the path's
                            end, the number of the last message, 0 for an empty path (after
                            is set) */
    int after;           /* 1: a continuation after the path's end */
    int shown;           /* 1: it is on the current path */
    msg_role role;
    char preview[CHAT_BRANCH_PREVIEW + 8]; /* its first text, or "tool call NAME" */
} chat_branch_alt;

/* Every alternative of conv's current path, in path order. *alts is malloc'd (NULL when
 * there are none). 0, or -1: storage failed (db_errmsg says why) or, with db_errmsg empty,
 * memory ran out. */
int chat_branch_alternatives(db_store *db, int64_t conv, chat_branch_alt **alts, size_t *count);

#endif
