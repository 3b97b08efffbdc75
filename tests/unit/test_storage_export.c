/* test_storage_export.c: Check suite for transcripts: JSON export/import is lossless (hostile
 * bytes, every Unicode plane, 50 MB texts, branches), Markdown and HTML shape and escaping,
 * and import errors that name the bad field and change nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/export_internal.h"
#include "tests/unit/test_storage.h"

/* The rule for "lossless": an export of the imported copy equals the original's export byte
 * for byte, except the digits of the top-level "id" (the new conversation's id). */
static void assert_same_except_id(const char *a, size_t alen, const char *b, size_t blen)
{
    const char *key = "\n  \"id\": ";
    const char *ia = strstr(a, key), *ib = strstr(b, key);
    ck_assert_ptr_nonnull(ia);
    ck_assert_ptr_nonnull(ib);
    ck_assert_int_eq(ia - a, ib - b);
    ck_assert_int_eq(memcmp(a, b, (size_t)(ia - a)), 0);
    ia += strlen(key);
    ib += strlen(key);
    while (*ia >= '0' && *ia <= '9')
        ia++;
    while (*ib >= '0' && *ib <= '9')
        ib++;
    size_t ra = alen - (size_t)(ia - a), rb = blen - (size_t)(ib - b);
    ck_assert_uint_eq(ra, rb);
    ck_assert_msg(memcmp(ia, ib, ra) == 0, "the re-export differs from the export");
}

/* Exports conv, imports it, exports the copy, and compares; returns the copy's id. */
static int64_t round_trip(db_store *db, int64_t conv)
{
    size_t alen, blen;
    char *a = export_to_buffer(db, conv, EXPORT_JSON, &alen);
    int64_t *ids;
    size_t n;
    ck_assert_msg(import_json(db, a, alen, &ids, &n) == 0, "import: %s", db_errmsg(db));
    ck_assert_uint_eq(n, 1);
    int64_t copy = ids[0];
    free(ids);
    ck_assert_int_ne(copy, conv);
    char *b = export_to_buffer(db, copy, EXPORT_JSON, &blen);
    assert_same_except_id(a, alen, b, blen);
    free(a);
    free(b);
    return copy;
}

static int64_t add_part(db_store *db, int64_t msg, part_kind kind, const char *data, size_t len)
{
    part_in p = {.kind = kind, .data = data, .len = len};
    int64_t id = part_append(db, msg, &p);
    ck_assert_msg(id > 0, "part_append: %s", db_errmsg(db));
    return id;
}

/* UTF-8 of code point cp into out; returns the length. */
static size_t utf8_put(unsigned cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 63));
        out[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 63));
    out[2] = (char)(0x80 | (cp >> 6 & 63));
    out[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* Code points from every plane 0..16, around the edges of each, skipping surrogates. */
static size_t every_plane(char *out)
{
    size_t n = 0;
    for (unsigned plane = 0; plane <= 16; plane++)
        for (unsigned low = 0; low < 0x10000; low += 0x0fff) {
            unsigned cp = plane << 16 | low;
            if (cp == 0 || (cp >= 0xd800 && cp <= 0xdfff))
                continue;
            n += utf8_put(cp, out + n);
        }
    n += utf8_put(0x10ffff, out + n);
    n += utf8_put(0xfeff, out + n); /* BOM in the middle */
    n += utf8_put(0x2028, out + n); /* JavaScript line separator */
    return n;
}

static const char metachars[] =
    "<script>alert('x')</script> & &amp; \"q\" </details> <!-- --> ]]> ``` ~~~ **b** _i_ "
    "# h\n> quote\n| t | a |\n[link](javascript:alert(1)) \\n \\u0000 \x01\x02\x1f\x7f\t\r\n";

static void assert_same_path(db_store *db, int64_t a, int64_t b)
{
    conv_messages x, y;
    ck_assert_int_eq(conv_load_tree(db, a, &x), 0);
    ck_assert_int_eq(conv_load_tree(db, b, &y), 0);
    ck_assert_uint_eq(x.count, y.count);
    for (size_t i = 0; i < x.count; i++) {
        ck_assert_uint_eq(x.msgs[i].nparts, y.msgs[i].nparts);
        for (size_t k = 0; k < x.msgs[i].nparts; k++) {
            const part *p = &x.msgs[i].parts[k], *q = &y.msgs[i].parts[k];
            ck_assert_int_eq(p->kind, q->kind);
            ck_assert_uint_eq(p->len, q->len);
            ck_assert_msg(memcmp(p->data, q->data, p->len) == 0, "part %zu.%zu differs", i, k);
            ck_assert_uint_eq(p->args_len, q->args_len);
            if (p->args_len)
                ck_assert_mem_eq(p->args, q->args, p->args_len);
        }
    }
    conv_messages_free(&x);
    conv_messages_free(&y);
}

START_TEST(json_round_trip_of_branches_tools_and_hostile_bytes)
{
    char *dir = scratch_new();
    db_store *db = open_fresh(dir, "e.db");
    int64_t c = conv_create(db, "Hostile <b>\"title\"</b>", "glm-5.3-flash");
    ck_assert_int_eq(conv_set_settings(db, c, "{\"temperature\":0.6, \"top_p\" : 0.95}"), 0);
    ck_assert_int_eq(conv_set_system_prompt(db, c, "Be careful.\n\tIndented."), 0);
    int64_t u = msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL);
    char planes[4096];
    size_t planes_len = every_plane(planes);
    add_part(db, u, PART_TEXT, planes, planes_len);
    add_part(db, u, PART_TEXT, metachars, sizeof metachars - 1);
    char binary[1024]; /* NUL-free bytes, mostly invalid UTF-8 */
    srand(7);
    for (size_t i = 0; i < sizeof binary; i++)
        binary[i] = (char)(1 + rand() % 255);
    int64_t a1 = msg_append(db, c, u, MSG_ASSISTANT, MSG_STREAMING, "glm");
    add_part(db, a1, PART_REASONING, binary, sizeof binary);
    const char with_nul[] = "before\0after";
    add_part(db, a1, PART_TEXT, with_nul, sizeof with_nul - 1);
    ck_assert_int_eq(msg_finish(db, a1, MSG_ERROR, NULL, NULL), 0);
    int64_t a2 = msg_append(db, c, u, MSG_ASSISTANT, MSG_STREAMING, "glm");
    add_part(db, a2, PART_REASONING, "Need the weather.", 17);
    const char args[] = "{\"city\": \"Z\\u00fcrich\",\"days\":[1, 2]}";
    part_in call = {.kind = PART_TOOL_CALL, .name = "weather", .call_id = "call_0", .args = args,
                    .args_len = sizeof args - 1};
    ck_assert_int_gt(part_append(db, a2, &call), 0);
    int64_t t = msg_append(db, c, a2, MSG_TOOL, MSG_COMPLETE, NULL);
    part_in res = {.kind = PART_TOOL_RESULT, .data = "{\"temp\": -3}", .len = 12, .name = "weather",
                   .call_id = "call_0", .is_error = 0};
    ck_assert_int_gt(part_append(db, t, &res), 0);
    int64_t a3 = msg_append(db, c, t, MSG_ASSISTANT, MSG_STREAMING, "glm");
    add_part(db, a3, PART_TEXT, "", 0);
    msg_stats st = {100, 42, 7, 150, 80, 900};
    ck_assert_int_eq(msg_finish(db, a3, MSG_COMPLETE, "stop", &st), 0);
    ck_assert_int_eq(conv_set_leaf(db, c, a1), 0); /* the leaf is on the older branch */

    int64_t copy = round_trip(db, c);
    assert_same_path(db, c, copy);
    ck_assert_int_eq(conv_leaf(db, copy) > 0, 1);
    conv_messages p1, p2;
    ck_assert_int_eq(conv_load_path(db, copy, &p1), 0);
    ck_assert_int_eq(conv_load_path(db, c, &p2), 0);
    ck_assert_uint_eq(p1.count, 2);
    ck_assert_uint_eq(p1.count, p2.count);
    ck_assert_int_eq(p1.msgs[1].status, MSG_ERROR);
    conv_messages_free(&p1);
    conv_messages_free(&p2);
    /* The copy of the copy is the same again, and the export names non-UTF-8 as base64. */
    round_trip(db, copy);
    size_t len;
    char *json = export_to_buffer(db, c, EXPORT_JSON, &len);
    ck_assert_ptr_nonnull(strstr(json, "\"text_b64\": \""));
    ck_assert_ptr_nonnull(strstr(json, "\"format\": \"glmchat-conversation\""));
    ck_assert_ptr_nonnull(strstr(json, "\"version\": 1"));
    free(json);
    db_close(db);
    scratch_free(dir);
}
END_TEST

START_TEST(fifty_megabyte_text_round_trips)
{
    char *dir = scratch_new();
    db_store *db = open_fresh(dir, "big.db");
    size_t size = 50u * 1024 * 1024;
    char *big = malloc(size);
    ck_assert_ptr_nonnull(big);
    char planes[4096];
    size_t planes_len = every_plane(planes);
    size_t n = 0;
    for (unsigned i = 0; n + planes_len + 16 <= size; i++) {
        memcpy(big + n, planes, planes_len);
        n += planes_len;
        n += (size_t)sprintf(big + n, " word%u\n", i % 1000);
    }
    while (n < size)
        big[n++] = 'z';
    int64_t c = conv_create(db, "big", NULL);
    int64_t m = msg_append(db, c, 0, MSG_ASSISTANT, MSG_COMPLETE, NULL);
    add_part(db, m, PART_REASONING, big, size);
    conv_messages path;
    ck_assert_int_eq(conv_load_path(db, c, &path), 0);
    ck_assert_uint_eq(path.msgs[0].parts[0].len, size);
    ck_assert(memcmp(path.msgs[0].parts[0].data, big, size) == 0);
    conv_messages_free(&path);
    int64_t copy = round_trip(db, c);
    ck_assert_int_eq(conv_load_path(db, copy, &path), 0);
    ck_assert_uint_eq(path.msgs[0].parts[0].len, size);
    ck_assert(memcmp(path.msgs[0].parts[0].data, big, size) == 0);
    conv_messages_free(&path);
    search_hit *hits;
    size_t count;
    ck_assert_int_eq(search_parts(db, "word17", 0, &hits, &count), 0);
    ck_assert_uint_eq(count, 2); /* the original and the imported copy */
    search_hits_free(hits, count);
    free(big);
    db_close(db);
    scratch_free(dir);
}
END_TEST

START_TEST(export_all_and_import_all)
{
    db_store *db = db_open(":memory:", (char[256]){0}, 256);
    size_t len;
    char *empty = export_to_buffer(db, 0, EXPORT_JSON, &len);
    int64_t *ids;
    size_t n;
    ck_assert_int_eq(import_json(db, empty, len, &ids, &n), 0);
    ck_assert_uint_eq(n, 0);
    free(ids);
    free(empty);
    int64_t a = conv_create(db, "one", NULL);
    int64_t b = conv_create(db, NULL, NULL);
    int64_t m = msg_append(db, b, 0, MSG_USER, MSG_COMPLETE, NULL);
    add_part(db, m, PART_TEXT, "hi", 2);
    char *all = export_to_buffer(db, 0, EXPORT_JSON, &len);
    ck_assert_ptr_nonnull(strstr(all, "\"format\": \"glmchat-export\""));
    ck_assert_int_eq(import_json(db, all, len, &ids, &n), 0);
    ck_assert_uint_eq(n, 2);
    assert_same_path(db, a, ids[0]);
    assert_same_path(db, b, ids[1]);
    free(ids);
    /* A bad second conversation undoes the first: all or nothing, inside db_begin too. */
    char *broken = strdup(all);
    char *role = strstr(broken, "\"role\": \"user\"");
    ck_assert_ptr_nonnull(role);
    memcpy(role + 9, "xser", 4);
    conv_summary *list;
    size_t before, after;
    ck_assert_int_eq(conv_list(db, &list, &before), 0);
    conv_list_free(list, before);
    ck_assert_int_eq(import_json(db, broken, len, &ids, &n), -1);
    ck_assert_ptr_nonnull(strstr(db_errmsg(db), "conversations[1].messages[0].role"));
    ck_assert_int_eq(db_begin(db), 0);
    ck_assert_int_gt(conv_create(db, "inside", NULL), 0);
    ck_assert_int_eq(import_json(db, broken, len, &ids, &n), -1);
    ck_assert_int_eq(db_commit(db), 0);
    ck_assert_int_eq(conv_list(db, &list, &after), 0);
    conv_list_free(list, after);
    ck_assert_uint_eq(after, before + 1); /* only "inside" was added */
    free(broken);
    free(all);
    db_close(db);
}
END_TEST

START_TEST(markdown_folds_reasoning_and_fences_tools)
{
    db_store *db = db_open(":memory:", (char[256]){0}, 256);
    int64_t c = conv_create(db, "Weather", "glm");
    int64_t u = msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL);
    add_part(db, u, PART_TEXT, "What is it like in Oslo?", 24);
    int64_t a = msg_append(db, c, u, MSG_ASSISTANT, MSG_COMPLETE, "glm");
    add_part(db, a, PART_REASONING, "Use the tool. </details><b>", 27);
    part_in call = {.kind = PART_TOOL_CALL, .name = "weather", .call_id = "call_9",
                    .args = "{\"code\": \"```\"}", .args_len = 15};
    ck_assert_int_gt(part_append(db, a, &call), 0);
    part_in res = {.kind = PART_TOOL_RESULT, .data = "snow", .len = 4, .call_id = "call_9"};
    ck_assert_int_gt(part_append(db, a, &res), 0);
    add_part(db, a, PART_TEXT, "It snows.", 9);
    size_t len;
    char *md = export_to_buffer(db, c, EXPORT_MD, &len);
    ck_assert_ptr_nonnull(strstr(md, "# Weather\n"));
    ck_assert_ptr_nonnull(strstr(md, "## User\n\nWhat is it like in Oslo?\n"));
    ck_assert_ptr_nonnull(strstr(md, "<details>\n<summary>Reasoning</summary>\n\nUse the tool. &lt;/details>&lt;b>\n\n</details>"));
    ck_assert_ptr_nonnull(strstr(md, "**Tool call** `` weather `` id `` call_9 ``"));
    ck_assert_ptr_nonnull(strstr(md, "````json\n{\"code\": \"```\"}\n````\n")); /* longer fence */
    ck_assert_ptr_nonnull(strstr(md, "**Tool result** for `` call_9 ``\n\n```\nsnow\n```"));
    ck_assert_ptr_nonnull(strstr(md, "It snows.\n"));
    ck_assert_ptr_null(strstr(md, "</details><b>"));
    free(md);
    db_close(db);
}
END_TEST

START_TEST(html_is_self_contained_and_escaped)
{
    db_store *db = db_open(":memory:", (char[256]){0}, 256);
    int64_t c = conv_create(db, "<img src=x onerror=alert(1)>", NULL);
    int64_t u = msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL);
    add_part(db, u, PART_TEXT, metachars, sizeof metachars - 1);
    add_part(db, u, PART_TEXT, "bad \xff\xfe bytes \xe2\x82", 15);
    int64_t a = msg_append(db, c, u, MSG_ASSISTANT, MSG_COMPLETE, NULL);
    add_part(db, a, PART_REASONING, "<script>x</script>", 18);
    part_in call = {.kind = PART_TOOL_CALL, .name = "t\"<", .call_id = "'id'", .args = "{\"a\":\"<&>\"}",
                    .args_len = 11};
    ck_assert_int_gt(part_append(db, a, &call), 0);
    size_t len;
    char *html = export_to_buffer(db, c, EXPORT_HTML, &len);
    ck_assert_ptr_nonnull(strstr(html, "<!DOCTYPE html>"));
    ck_assert_ptr_nonnull(strstr(html, "</html>\n"));
    ck_assert_ptr_null(strstr(html, "<script"));
    ck_assert_ptr_null(strstr(html, "<img"));
    ck_assert_ptr_null(strstr(html, "src=\""));
    ck_assert_ptr_null(strstr(html, "href=\""));
    ck_assert_ptr_null(strstr(html, "<link"));
    ck_assert_ptr_null(strstr(html, "url("));
    ck_assert_ptr_nonnull(strstr(html, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
    ck_assert_ptr_nonnull(strstr(html, "<details class=\"reasoning\">"));
    ck_assert_ptr_nonnull(strstr(html, "{&quot;a&quot;:&quot;&lt;&amp;&gt;&quot;}"));
    ck_assert_ptr_nonnull(strstr(html, "bad \xef\xbf\xbd\xef\xbf\xbd bytes \xef\xbf\xbd"));
    /* "\xe2\x82" is one maximal invalid subpart: one U+FFFD (base/utf8.h), not one per byte */
    ck_assert_ptr_null(strstr(html, "bytes \xef\xbf\xbd\xef\xbf\xbd"));
    /* The page is valid UTF-8 however hostile the content. */
    for (size_t i = 0; i < len; i++)
        ck_assert_msg(html[i] != '\0' && html[i] != '\x01' && (unsigned char)html[i] != 0xff &&
                          (unsigned char)html[i] != 0xfe,
                      "byte %zu of the page is 0x%02x", i, (unsigned char)html[i]);
    free(html);
    db_close(db);
}
END_TEST

START_TEST(html_renders_markdown_safely)
{
    /* Markdown becomes the page's own tags; the model's HTML, javascript: links and
     * attribute injection come out as text. */
    static const char md[] =
        "# Heading *em*\n"
        "Para with **bold**, *em*, `code <b>`, [ok](https://example.com/a?b=1&c=2) "
        "[bad](javascript:alert(1)) [bad2]( JaVaScRiPt:alert(2)) "
        "[q](https://x.org/\" onmouseover=\"alert(3))\n"
        "<script>alert(4)</script><img src=x onerror=alert(5)>\n"
        "\n- one\n- two\n\n3. third\n\n"
        "```c\" onclick=\"x\nint main() { return \"</code></pre><script>\"; }\n```\n\n"
        "| a | b |\n|---|--:|\n| <i>x</i> | \\| |\n\n"
        "> quote **q**\n";
    db_store *db = db_open(":memory:", (char[256]){0}, 256);
    int64_t c = conv_create(db, "md", NULL);
    int64_t u = msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL);
    add_part(db, u, PART_TEXT, "hi", 2);
    int64_t a = msg_append(db, c, u, MSG_ASSISTANT, MSG_COMPLETE, NULL);
    add_part(db, a, PART_TEXT, md, sizeof md - 1);
    size_t len;
    char *html = export_to_buffer(db, c, EXPORT_HTML, &len);
    ck_assert_ptr_nonnull(strstr(html, "<h3>Heading <em>em</em></h3>"));
    ck_assert_ptr_nonnull(strstr(html, "Para with <strong>bold</strong>, <em>em</em>, "
                                       "<code>code &lt;b&gt;</code>, "));
    ck_assert_ptr_nonnull(strstr(html, "<a href=\"https://example.com/a?b=1&amp;c=2\" "
                                       "rel=\"noopener noreferrer nofollow\">ok</a>"));
    ck_assert_ptr_nonnull(strstr(html, " bad bad2 q<br>\n&lt;script&gt;alert(4)&lt;/script&gt;"
                                       "&lt;img src=x onerror=alert(5)&gt;</p>"));
    const char *href = strstr(html, "href=");
    ck_assert_ptr_nonnull(href);
    ck_assert_ptr_null(strstr(href + 1, "href=")); /* the one http(s) link only */
    ck_assert_ptr_null(strstr(html, "<script"));
    ck_assert_ptr_null(strstr(html, "<img"));
    ck_assert_ptr_null(strstr(html, "<i>"));
    ck_assert_ptr_null(strstr(html, "onmouseover=\""));
    ck_assert_ptr_null(strstr(html, "onclick=\""));
    ck_assert_ptr_null(strstr(html, "javascript:"));
    ck_assert_ptr_null(strstr(html, "JaVaScRiPt:"));
    ck_assert_ptr_nonnull(strstr(html, "<ul>\n<li>one</li>\n<li>two</li>\n</ul>\n"));
    ck_assert_ptr_nonnull(strstr(html, "<ol start=\"3\">\n<li>third</li>\n</ol>\n"));
    ck_assert_ptr_nonnull(strstr(html, "<pre><code class=\"language-c\">int main() { return "
                                       "&quot;&lt;/code&gt;&lt;/pre&gt;&lt;script&gt;&quot;; }"
                                       "</code></pre>"));
    ck_assert_ptr_nonnull(strstr(html, "<thead><tr><th>a</th><th style=\"text-align:right\">b"
                                       "</th></tr></thead>"));
    ck_assert_ptr_nonnull(strstr(html, "<tr><td>&lt;i&gt;x&lt;/i&gt;</td><td style=\"text-align:right\">|</td></tr>"));
    ck_assert_ptr_nonnull(strstr(html, "<blockquote>\n<p>quote <strong>q</strong></p>\n"));
    free(html);
    db_close(db);
}
END_TEST

START_TEST(html_markdown_tags_balance)
{
    /* Whatever the emphasis markers, every tag opened is closed, innermost first. */
    static const char *inputs[] = {
        "**a *b** c*", "*a **b* c**", "***x***", "_a_b_ __c__", "**", "*", "a * b * c",
        "**open", "`a", "[x](https://e.org", "[x(https://e.org)", "> > > > > > > > > > > deep",
    };
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        ck_assert_int_eq(export_html_markdown(f, inputs[i], strlen(inputs[i])), 0);
        fclose(f);
        const char *tags[] = {"strong", "em", "code", "a", "blockquote", "p"};
        for (size_t t = 0; t < sizeof tags / sizeof tags[0]; t++) {
            char open_tag[32], close_tag[32];
            snprintf(open_tag, sizeof open_tag, "<%s>", tags[t]);
            snprintf(close_tag, sizeof close_tag, "</%s>", tags[t]);
            int depth = 0;
            for (const char *p = buf; *p; p++) {
                if (strncmp(p, open_tag, strlen(open_tag)) == 0)
                    depth++;
                if (strncmp(p, close_tag, strlen(close_tag)) == 0)
                    depth--;
                ck_assert_msg(depth >= 0, "'%s' closes <%s> before opening it: %s", inputs[i], tags[t], buf);
            }
            ck_assert_msg(depth == 0, "'%s' leaves <%s> open: %s", inputs[i], tags[t], buf);
        }
        ck_assert_ptr_null(strstr(buf, "<strong><em></strong>"));
        free(buf);
    }
}
END_TEST

static void expect_import_error(db_store *db, const char *json, const char *needle)
{
    int64_t *ids;
    size_t n;
    ck_assert_int_eq(import_json(db, json, strlen(json), &ids, &n), -1);
    ck_assert_msg(strstr(db_errmsg(db), needle) != NULL, "error '%s' lacks '%s'", db_errmsg(db), needle);
}

START_TEST(import_errors_name_the_field_and_change_nothing)
{
    db_store *db = db_open(":memory:", (char[256]){0}, 256);
    expect_import_error(db, "not json", "not valid JSON");
    expect_import_error(db, "[1,2]", "not a JSON object");
    expect_import_error(db, "{\"format\":\"glmchat-conversation\",\"title\":\"a\\u0000b\"}", "u0000");
    expect_import_error(db, "{\"format\":\"other\",\"version\":1}", "format");
    expect_import_error(db, "{\"format\":\"glmchat-conversation\",\"version\":2,\"messages\":[]}",
                        "version 2");
    const char *head = "{\"format\":\"glmchat-conversation\",\"version\":1,\"created_at\":1,"
                       "\"updated_at\":2,\"current_leaf\":null,\"messages\":[";
    char buf[2048];
    snprintf(buf, sizeof buf, "%s{\"id\":1,\"parent\":null,\"role\":\"user\",\"status\":\"complete\","
                              "\"created_at\":5,\"parts\":[{\"kind\":\"text\",\"text\":\"ok\",\"created_at\":1}]},"
                              "{\"id\":2,\"parent\":1,\"role\":\"user\",\"status\":\"complete\","
                              "\"created_at\":5,\"parts\":[{\"kind\":\"poem\",\"created_at\":1}]}]}",
             head);
    expect_import_error(db, buf, "messages[1].parts[0].kind");
    snprintf(buf, sizeof buf, "%s{\"id\":1,\"parent\":3,\"role\":\"user\",\"status\":\"complete\","
                              "\"created_at\":5,\"parts\":[]}]}",
             head);
    expect_import_error(db, buf, "messages[0].parent");
    snprintf(buf, sizeof buf, "%s{\"id\":1,\"parent\":null,\"role\":\"god\",\"status\":\"complete\","
                              "\"created_at\":5,\"parts\":[]}]}",
             head);
    expect_import_error(db, buf, "messages[0].role");
    snprintf(buf, sizeof buf, "%s{\"id\":1,\"parent\":null,\"role\":\"user\",\"status\":\"complete\","
                              "\"created_at\":-5,\"parts\":[]}]}",
             head);
    expect_import_error(db, buf, "messages[0].created_at");
    snprintf(buf, sizeof buf, "%s{\"id\":1,\"parent\":null,\"role\":\"user\",\"status\":\"complete\","
                              "\"created_at\":5,\"parts\":[{\"kind\":\"text\",\"text_b64\":\"@@@@\","
                              "\"created_at\":1}]}]}",
             head);
    expect_import_error(db, buf, "text_b64");
    snprintf(buf, sizeof buf, "%s{\"id\":1,\"parent\":null,\"role\":\"user\",\"status\":\"complete\","
                              "\"model_b64\":\"YQBi\",\"created_at\":5,\"parts\":[]}]}",
             head);
    expect_import_error(db, buf, "messages[0].model contains a NUL byte");
    /* Nothing of the failed imports was kept. */
    conv_summary *list;
    size_t n;
    ck_assert_int_eq(conv_list(db, &list, &n), 0);
    ck_assert_uint_eq(n, 0);
    conv_list_free(list, n);
    db_close(db);
}
END_TEST

/* The format a file's name says, for `glmchat export -o` and the TUI's /export. */
START_TEST(format_of_a_file_name)
{
    ck_assert_int_eq(export_format_of_path("notes.md"), EXPORT_MD);
    ck_assert_int_eq(export_format_of_path("dir.json/a.tar.markdown"), EXPORT_MD);
    ck_assert_int_eq(export_format_of_path("/tmp/x.JSON"), EXPORT_JSON);
    ck_assert_int_eq(export_format_of_path("My Notes.Html"), EXPORT_HTML);
    ck_assert_int_eq(export_format_of_path("page.htm"), EXPORT_HTML);
    ck_assert_int_eq(export_format_of_path("notes.txt"), -1);
    ck_assert_int_eq(export_format_of_path("notes"), -1);
    ck_assert_int_eq(export_format_of_path(".md"), -1);        /* a dot file, no extension */
    ck_assert_int_eq(export_format_of_path("out.md/notes"), -1); /* a folder's name says nothing */
    ck_assert_int_eq(export_format_of_path("notes.md.bak"), -1);
    ck_assert_int_eq(export_format_of_path(""), -1);
    ck_assert_int_eq(export_format_of_path(NULL), -1);
}
END_TEST

Suite *storage_export_suite(void)
{
    Suite *s = suite_create("storage export");
    TCase *t = tcase_create("export");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, json_round_trip_of_branches_tools_and_hostile_bytes);
    tcase_add_test(t, fifty_megabyte_text_round_trips);
    tcase_add_test(t, export_all_and_import_all);
    tcase_add_test(t, markdown_folds_reasoning_and_fences_tools);
    tcase_add_test(t, html_is_self_contained_and_escaped);
    tcase_add_test(t, html_renders_markdown_safely);
    tcase_add_test(t, html_markdown_tags_balance);
    tcase_add_test(t, import_errors_name_the_field_and_change_nothing);
    tcase_add_test(t, format_of_a_file_name);
    suite_add_tcase(s, t);
    return s;
}
