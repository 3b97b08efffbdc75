/* files.h: whole-file reads and writes for the Check suites, each failing the test with the path
 * when the file cannot be read or written, so no test goes on with half a file. */
#ifndef GLMCHAT_TESTS_COMMON_FILES_H
#define GLMCHAT_TESTS_COMMON_FILES_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole file at path (malloc'd, a NUL added after its *len bytes). */
static inline char *test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_msg(n >= 0, "cannot size %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_SET), 0);
    char *b = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_msg(fread(b, 1, (size_t)n, f) == (size_t)n, "short read of %s", path);
    fclose(f);
    b[n] = '\0';
    *len = (size_t)n;
    return b;
}

/* Creates or replaces the file at path with data[0..len). */
static inline void test_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_msg(fwrite(data, 1, len, f) == len, "short write of %s", path);
    ck_assert_msg(fclose(f) == 0, "cannot close %s", path);
}

/* test_write_file of a string. */
static inline void test_write_text(const char *path, const char *text)
{
    test_write_file(path, text, strlen(text));
}

#endif
