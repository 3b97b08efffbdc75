/* test_input_history.c: ui/history.c: the input history file keeps multi-line entries
 * across runs, keeps only the newest, and reports unreadable files by name. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ui/history.h"
#include "tests/common/check_main.h"

static char dir[256];
static char path[512];
static char *got[64];
static size_t ngot;

static void collect(const char *e, void *user)
{
    (void)user;
    if (ngot < 64)
        got[ngot++] = strdup(e);
}

static void reset_got(void)
{
    for (size_t i = 0; i < ngot; i++)
        free(got[i]);
    ngot = 0;
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "%s/glmchat-hist-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/history", dir);
}

static void teardown(void)
{
    reset_got();
    unlink(path);
    rmdir(dir);
}

START_TEST(escape_roundtrip)
{
    const char *cases[] = {"plain", "two\nlines", "back\\slash\\n literal", "\r\n\\", "", "\\"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *e = hist_escape(cases[i]);
        ck_assert_ptr_null(strchr(e, '\n'));
        char *u = hist_unescape(e);
        ck_assert_str_eq(u, cases[i]);
        free(e);
        free(u);
    }
}
END_TEST

START_TEST(append_then_load)
{
    char err[256];
    ck_assert_int_eq(hist_load(path, 100, collect, NULL, err, sizeof err), 0);
    ck_assert_uint_eq(ngot, 0); /* no file yet: an empty history */
    ck_assert_int_eq(hist_append(path, "first", err, sizeof err), 0);
    ck_assert_int_eq(hist_append(path, "multi\nline \\ message", err, sizeof err), 0);
    ck_assert_int_eq(hist_append(path, "third", err, sizeof err), 0);
    ck_assert_int_eq(hist_load(path, 100, collect, NULL, err, sizeof err), 0);
    ck_assert_uint_eq(ngot, 3);
    ck_assert_str_eq(got[0], "first");
    ck_assert_str_eq(got[1], "multi\nline \\ message");
    ck_assert_str_eq(got[2], "third");
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0600); /* messages can hold secrets */
}
END_TEST

START_TEST(keeps_newest)
{
    char err[256], e[32];
    for (int i = 0; i < 50; i++) {
        snprintf(e, sizeof e, "entry %d", i);
        ck_assert_int_eq(hist_append(path, e, err, sizeof err), 0);
    }
    ck_assert_int_eq(hist_load(path, 10, collect, NULL, err, sizeof err), 0);
    ck_assert_uint_eq(ngot, 10);
    ck_assert_str_eq(got[0], "entry 40");
    ck_assert_str_eq(got[9], "entry 49");
    reset_got();
    ck_assert_int_eq(hist_trim(path, 5, err, sizeof err), 0);
    ck_assert_int_eq(hist_load(path, 100, collect, NULL, err, sizeof err), 0);
    ck_assert_uint_eq(ngot, 5);
    ck_assert_str_eq(got[0], "entry 45");
}
END_TEST

START_TEST(unreadable_is_an_error)
{
    char err[512];
    ck_assert_int_eq(hist_append(dir, "x", err, sizeof err), -1); /* a directory */
    ck_assert_ptr_nonnull(strstr(err, dir));
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no/such/dir/history", dir);
    ck_assert_int_eq(hist_append(missing, "x", err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "no/such/dir"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("input_history");
    TCase *tc = tcase_create("file");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, escape_roundtrip);
    tcase_add_test(tc, append_then_load);
    tcase_add_test(tc, keeps_newest);
    tcase_add_test(tc, unreadable_is_an_error);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
