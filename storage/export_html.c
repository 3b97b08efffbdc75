/* export_html.c: the HTML transcript: one self-contained file (inline style, no scripts, no
 * external assets), every byte of content escaped; invalid UTF-8 shows as U+FFFD. Message text
 * is rendered from its Markdown (export_html_md.c); http(s) links are the only hrefs. */
#include <string.h>

#include "base/utf8.h"
#include "storage/export_internal.h"

static const char html_style[] =
    "body{font-family:-apple-system,BlinkMacSystemFont,\"Segoe UI\",Roboto,\"Noto Sans\","
    "\"Helvetica Neue\",Arial,\"Liberation Sans\",sans-serif;max-width:48rem;margin:2rem auto;"
    "padding:0 1rem;color:#1d1d1f;background:#fff;line-height:1.55;font-size:16px}"
    "h1{font-size:1.5rem}.meta{color:#666;font-size:.9rem}"
    ".message{border-top:1px solid #ddd;padding:.5rem 0}"
    ".role{font-weight:600;margin:.25rem 0}"
    ".text{white-space:pre-wrap;overflow-wrap:anywhere}"
    ".md{overflow-wrap:anywhere}.md p{margin:.5rem 0}"
    ".md h3,.md h4,.md h5,.md h6{margin:1rem 0 .4rem}"
    "code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,\"DejaVu Sans Mono\","
    "\"Liberation Mono\",monospace;font-size:.9em}"
    "code{background:#f3f3f3;border-radius:.2rem;padding:0 .2rem}"
    "pre code{background:none;padding:0}"
    "details.reasoning{color:#555;background:#f6f6f8;border-radius:.4rem;padding:.3rem .6rem;"
    "margin:.4rem 0}"
    "pre{background:#f3f3f3;padding:.5rem;border-radius:.3rem;white-space:pre-wrap;"
    "overflow-wrap:anywhere}"
    "table{border-collapse:collapse;margin:.5rem 0}"
    "th,td{border:1px solid #ccc;padding:.2rem .5rem;vertical-align:top}th{background:#f6f6f8}"
    "blockquote{margin:.5rem 0;padding-left:.8rem;border-left:3px solid #ccc;color:#444}"
    ".tool{margin:.4rem 0}.error{color:#a00}.status{color:#a60;font-weight:400}"
    "hr{margin:2rem 0}";

void export_html_escape(FILE *out, const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned char c = p[i];
        const char *entity = NULL;
        switch (c) {
        case '&': entity = "&amp;"; break;
        case '<': entity = "&lt;"; break;
        case '>': entity = "&gt;"; break;
        case '"': entity = "&quot;"; break;
        case '\'': entity = "&#39;"; break;
        default: break;
        }
        if (entity) {
            fputs(entity, out);
            i++;
            continue;
        }
        if (c < 0x20 && c != '\n' && c != '\t') {
            fputs(c == '\r' ? "" : "\xef\xbf\xbd", out);
            i++;
            continue;
        }
        if (c < 0x80) {
            fputc(c, out);
            i++;
            continue;
        }
        uint32_t cp; /* U+FFFD for each maximal invalid subpart (base/utf8.h) */
        size_t n = utf8_next(s + i, len - i, &cp);
        if (cp == 0xFFFD)
            fputs(UTF8_REPLACEMENT, out);
        else
            fwrite(s + i, 1, n, out);
        i += n;
    }
}

static void put_cstr(FILE *out, const char *s)
{
    export_html_escape(out, s, strlen(s));
}

void export_html_begin(FILE *out, const conv_record *only)
{
    char title[128];
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
          "<meta name=\"generator\" content=\"glmchat\">\n<title>",
          out);
    if (only) {
        export_display_title(only, NULL, title, sizeof title);
        put_cstr(out, title);
    } else {
        fputs("glmchat conversations", out);
    }
    fprintf(out, "</title>\n<style>%s</style>\n</head>\n<body>\n", html_style);
}

void export_html_end(FILE *out)
{
    fputs("</body>\n</html>\n", out);
}

static const char *role_label(msg_role role)
{
    switch (role) {
    case MSG_SYSTEM: return "System";
    case MSG_USER: return "User";
    case MSG_ASSISTANT: return "Assistant";
    case MSG_TOOL: return "Tool";
    }
    return "Message";
}

static int put_part(FILE *out, const part *p)
{
    switch (p->kind) {
    case PART_TEXT:
        fputs("<div class=\"md\">\n", out);
        if (export_html_markdown(out, p->data, p->len) < 0)
            return -1;
        fputs("</div>\n", out);
        break;
    case PART_REASONING:
        fputs("<details class=\"reasoning\"><summary>Reasoning</summary><div class=\"text\">", out);
        export_html_escape(out, p->data, p->len);
        fputs("</div></details>\n", out);
        break;
    case PART_TOOL_CALL:
        fputs("<div class=\"tool call\">Tool call <code>", out);
        put_cstr(out, p->name ? p->name : "?");
        fputs("</code>", out);
        if (p->call_id) {
            fputs(" id <code>", out);
            put_cstr(out, p->call_id);
            fputs("</code>", out);
        }
        fputs("<pre>", out);
        if (p->args)
            export_html_escape(out, p->args, p->args_len);
        fputs("</pre></div>\n", out);
        break;
    case PART_TOOL_RESULT:
        fprintf(out, "<div class=\"tool result%s\">%s", p->is_error ? " error" : "",
                p->is_error ? "Tool error" : "Tool result");
        if (p->name) {
            fputs(" <code>", out);
            put_cstr(out, p->name);
            fputs("</code>", out);
        }
        if (p->call_id) {
            fputs(" for <code>", out);
            put_cstr(out, p->call_id);
            fputs("</code>", out);
        }
        fputs("<pre>", out);
        export_html_escape(out, p->data, p->len);
        fputs("</pre></div>\n", out);
        break;
    }
    return 0;
}

int export_html_conversation(FILE *out, const conv_record *r, const conv_messages *path)
{
    char title[128], created[64];
    export_display_title(r, path, title, sizeof title);
    export_format_time(r->created_at, created, sizeof created);
    fprintf(out, "<article class=\"conversation\" id=\"conversation-%lld\">\n<h1>", (long long)r->id);
    put_cstr(out, title);
    fprintf(out, "</h1>\n<p class=\"meta\">conversation %lld", (long long)r->id);
    if (r->model.data) {
        fputs(" &middot; ", out);
        export_html_escape(out, r->model.data, r->model.len);
    }
    fprintf(out, " &middot; %s</p>\n", created);
    if (r->system_prompt.data && r->system_prompt.len) {
        fputs("<section class=\"message system\"><div class=\"role\">System prompt</div><div "
              "class=\"text\">",
              out);
        export_html_escape(out, r->system_prompt.data, r->system_prompt.len);
        fputs("</div></section>\n", out);
    }
    for (size_t i = 0; i < path->count; i++) {
        const msg *m = &path->msgs[i];
        fprintf(out, "<section class=\"message %s\"><div class=\"role\">%s", msg_role_name(m->role),
                role_label(m->role));
        if (m->role == MSG_ASSISTANT && m->model) {
            fputs(" <span class=\"meta\">", out);
            put_cstr(out, m->model);
            fputs("</span>", out);
        }
        if (m->status != MSG_COMPLETE)
            fprintf(out, " <span class=\"status\">[%s]</span>", msg_status_name(m->status));
        fputs("</div>\n", out);
        for (size_t k = 0; k < m->nparts; k++)
            if (put_part(out, &m->parts[k]) < 0)
                return -1;
        fputs("</section>\n", out);
    }
    fputs("</article>\n<hr>\n", out);
    return 0;
}
