/* test_storage.h: what glmchat's storage test suites share: scratch directories on a real
 * disk, opening a fresh database there, reading files back for byte comparisons. */
#ifndef GLMCHAT_TESTS_TEST_STORAGE_H
#define GLMCHAT_TESTS_TEST_STORAGE_H

#include <check.h>
#include <stddef.h>

#include "storage/storage.h"
#include "tests/common/files.h"

/* A new empty directory under $TMPDIR (malloc'd path); scratch_free removes it and all in it. */
char *scratch_new(void);
void scratch_free(char *dir);

/* dir/name as a malloc'd path. */
char *scratch_path(const char *dir, const char *name);

/* Opens (creating) dir/name, failing the test with the error when it cannot. */
db_store *open_fresh(const char *dir, const char *name);

/* Exports conversation conv (0: all) in format into a malloc'd buffer. */
char *export_to_buffer(db_store *db, int64_t conv, export_format format, size_t *len);

Suite *storage_core_suite(void);
Suite *storage_export_suite(void);
Suite *storage_faults_suite(void);
Suite *storage_migrate_suite(void);

#endif
