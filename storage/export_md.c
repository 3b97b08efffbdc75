/* export_md.c: the Markdown transcript of a conversation's current path: reasoning folded in
 * <details>, tool calls with their arguments and results in fences no content can close. */
#include <string.h>

#include "storage/export_internal.h"

static const char *role_heading(msg_role role)
{
    switch (role) {
    case MSG_SYSTEM: return "System";
    case MSG_USER: return "User";
    case MSG_ASSISTANT: return "Assistant";
    case MSG_TOOL: return "Tool";
    }
    return "Message";
}

/* A fence of backticks one longer than the longest run inside (at least three). */
static void put_fenced(FILE *out, const char *info, const char *s, size_t len)
{
    size_t longest = 0, run = 0;
    for (size_t i = 0; i < len; i++) {
        run = s[i] == '`' ? run + 1 : 0;
        if (run > longest)
            longest = run;
    }
    size_t fence = longest >= 3 ? longest + 1 : 3;
    for (size_t i = 0; i < fence; i++)
        fputc('`', out);
    fprintf(out, "%s\n", info);
    fwrite(s, 1, len, out);
    if (len == 0 || s[len - 1] != '\n')
        fputc('\n', out);
    for (size_t i = 0; i < fence; i++)
        fputc('`', out);
    fputs("\n\n", out);
}

/* Inside <details>, Markdown renderers read HTML: < and & become entities so reasoning text
 * can neither close the block nor inject tags. */
static void put_html_safe(FILE *out, const char *s, size_t len)
{
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        const char *entity = s[i] == '<' ? "&lt;" : s[i] == '&' ? "&amp;" : NULL;
        if (!entity)
            continue;
        fwrite(s + run, 1, i - run, out);
        fputs(entity, out);
        run = i + 1;
    }
    fwrite(s + run, 1, len - run, out);
}

static void put_code_span(FILE *out, const char *s)
{
    fputs("`` ", out);
    for (; *s; s++)
        fputc(*s == '\n' || *s == '`' ? ' ' : *s, out);
    fputs(" ``", out);
}

static void put_part(FILE *out, const part *p)
{
    switch (p->kind) {
    case PART_TEXT:
        fwrite(p->data, 1, p->len, out);
        fputs(p->len && p->data[p->len - 1] == '\n' ? "\n" : "\n\n", out);
        break;
    case PART_REASONING:
        fputs("<details>\n<summary>Reasoning</summary>\n\n", out);
        put_html_safe(out, p->data, p->len);
        fputs(p->len && p->data[p->len - 1] == '\n' ? "\n</details>\n\n" : "\n\n</details>\n\n", out);
        break;
    case PART_TOOL_CALL:
        fputs("**Tool call** ", out);
        put_code_span(out, p->name ? p->name : "?");
        if (p->call_id) {
            fputs(" id ", out);
            put_code_span(out, p->call_id);
        }
        fputs("\n\n", out);
        put_fenced(out, "json", p->args ? p->args : "", p->args ? p->args_len : 0);
        break;
    case PART_TOOL_RESULT:
        fputs(p->is_error ? "**Tool error**" : "**Tool result**", out);
        if (p->name) {
            fputc(' ', out);
            put_code_span(out, p->name);
        }
        if (p->call_id) {
            fputs(" for ", out);
            put_code_span(out, p->call_id);
        }
        fputs("\n\n", out);
        put_fenced(out, "", p->data, p->len);
        break;
    }
}

static void put_stats(FILE *out, const msg *m)
{
    const msg_stats *s = &m->stats;
    if (s->prompt_tokens < 0 && s->completion_tokens < 0 && s->gen_ms < 0)
        return;
    fputs("_", out);
    const char *sep = "";
    if (s->prompt_tokens >= 0)
        fprintf(out, "%s%lld prompt tokens", sep, (long long)s->prompt_tokens), sep = ", ";
    if (s->completion_tokens >= 0)
        fprintf(out, "%s%lld completion tokens", sep, (long long)s->completion_tokens), sep = ", ";
    if (s->reasoning_tokens >= 0)
        fprintf(out, "%s%lld reasoning tokens", sep, (long long)s->reasoning_tokens), sep = ", ";
    if (s->ttft_ms >= 0)
        fprintf(out, "%sfirst token after %lld ms", sep, (long long)s->ttft_ms), sep = ", ";
    if (s->gen_ms > 0 && s->completion_tokens >= 0)
        fprintf(out, "%s%.1f tokens/s", sep, (double)s->completion_tokens * 1000.0 / (double)s->gen_ms);
    fputs("_\n\n", out);
}

int export_md_conversation(FILE *out, const conv_record *r, const conv_messages *path)
{
    char title[128], created[64], updated[64];
    export_display_title(r, path, title, sizeof title);
    export_format_time(r->created_at, created, sizeof created);
    export_format_time(r->updated_at, updated, sizeof updated);
    fprintf(out, "# %s\n\n", title);
    fprintf(out, "- conversation: %lld\n", (long long)r->id);
    if (r->model.data)
        fprintf(out, "- model: %s\n", r->model.data);
    fprintf(out, "- created: %s\n- updated: %s\n\n", created, updated);
    if (r->system_prompt.data && r->system_prompt.len) {
        fputs("## System prompt\n\n", out);
        put_fenced(out, "", r->system_prompt.data, r->system_prompt.len);
    }
    for (size_t i = 0; i < path->count; i++) {
        const msg *m = &path->msgs[i];
        fprintf(out, "## %s", role_heading(m->role));
        if (m->role == MSG_ASSISTANT && m->model)
            fprintf(out, " (%s)", m->model);
        if (m->status != MSG_COMPLETE)
            fprintf(out, " [%s]", msg_status_name(m->status));
        fputs("\n\n", out);
        for (size_t k = 0; k < m->nparts; k++)
            put_part(out, &m->parts[k]);
        if (m->role == MSG_ASSISTANT)
            put_stats(out, m);
    }
    return 0;
}
