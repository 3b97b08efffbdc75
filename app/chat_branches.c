/* chat_branches.c: the branching points of a conversation's current path and their alternatives
 * (chat_branches.h), from one load of the message tree. */
#include <stdlib.h>
#include <string.h>

#include "app/chat_branches.h"
#include "base/grow.h"

/* A one-line preview of m: its first text part (or a tool call's name). */
static void preview_of(const msg *m, char *out, size_t cap)
{
    const char *text = "";
    size_t len = 0;
    for (size_t j = 0; j < m->nparts; j++) {
        const part *p = &m->parts[j];
        if (p->kind == PART_TEXT || p->kind == PART_TOOL_RESULT) {
            text = p->data;
            len = p->len;
            break;
        }
        if (p->kind == PART_TOOL_CALL && !*text) {
            snprintf(out, cap, "tool call %s", p->name ? p->name : "?");
            return;
        }
    }
    size_t n = len < CHAT_BRANCH_PREVIEW ? len : CHAT_BRANCH_PREVIEW;
    while (n > 0 && n < len && ((unsigned char)text[n] & 0xC0) == 0x80)
        n--; /* a cut in the middle of a character */
    if (n >= cap)
        n = cap - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = text[i] == '\n' || text[i] == '\r' || text[i] == '\t' || text[i] == '\0' ? ' ' : text[i];
    out[n] = 0;
    if (n < len && n + 4 <= cap - 1)
        strcat(out, "...");
}

typedef struct alt_list {
    chat_branch_alt *v;
    size_t n, cap;
} alt_list;

static int add_alt(alt_list *l, const chat_branch_alt *a)
{
    if (grow_array((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v, 8) != 0)
        return -1;
    l->v[l->n++] = *a;
    return 0;
}

/* Adds the children of parent (tree order: oldest first) when there are at least min of them. */
static int add_children(alt_list *l, const conv_messages *tree, int64_t parent, int64_t shown, int64_t at,
                        int after, size_t min)
{
    size_t kids = 0;
    for (size_t i = 0; i < tree->count; i++)
        kids += tree->msgs[i].parent == parent;
    if (kids < min)
        return 0;
    for (size_t i = 0; i < tree->count; i++) {
        const msg *m = &tree->msgs[i];
        if (m->parent != parent)
            continue;
        chat_branch_alt a = {.msg = m->id, .number = (int64_t)i + 1, .at = at, .after = after,
                             .shown = m->id == shown, .role = m->role};
        preview_of(m, a.preview, sizeof a.preview);
        if (add_alt(l, &a) != 0)
            return -1;
    }
    return 0;
}

int chat_branch_alternatives(db_store *db, int64_t conv, chat_branch_alt **alts, size_t *count)
{
    *alts = NULL;
    *count = 0;
    conv_messages tree, path;
    if (conv_load_tree(db, conv, &tree) != 0)
        return -1;
    if (conv_load_path(db, conv, &path) != 0) {
        conv_messages_free(&tree);
        return -1;
    }
    /* Numbers are creation order (msg_number), which is the tree's order. */
    alt_list l = {0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < path.count; i++) {
        int64_t at = 0;
        for (size_t k = 0; k < tree.count; k++)
            if (tree.msgs[k].id == path.msgs[i].id)
                at = (int64_t)k + 1;
        rc = add_children(&l, &tree, path.msgs[i].parent, path.msgs[i].id, at, 0, 2);
    }
    if (rc == 0) { /* what goes on after the path's end (all the roots for an empty path) */
        const msg *last = path.count ? &path.msgs[path.count - 1] : NULL;
        int64_t at = 0;
        for (size_t k = 0; last && k < tree.count; k++)
            if (tree.msgs[k].id == last->id)
                at = (int64_t)k + 1;
        rc = add_children(&l, &tree, last ? last->id : 0, 0, at, 1, 1);
    }
    conv_messages_free(&tree);
    conv_messages_free(&path);
    if (rc != 0) {
        free(l.v);
        return -1;
    }
    *alts = l.v;
    *count = l.n;
    return 0;
}
