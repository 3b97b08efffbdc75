# storage/local.mk: conversations, parts, reasoning memory and search in SQLite.
# libstorage.a (public header storage/storage.h), its tests, the crash writer and the benchmark.
noinst_LIBRARIES += libstorage.a
libstorage_a_SOURCES = \
	storage/storage.h storage/db_internal.h storage/export_internal.h \
	storage/db.c storage/migrations.c storage/bytes.c storage/conversations.c \
	storage/memory.c storage/search.c storage/export.c storage/export_json.c \
	storage/export_md.c storage/export_html.c storage/export_html_md.c storage/import.c storage/interrupted.c
libstorage_a_CPPFLAGS = $(AM_CPPFLAGS) $(SQLITE_CFLAGS) $(CJSON_CFLAGS)
glmchat_LDADD += libstorage.a $(SQLITE_LIBS) $(CJSON_LIBS) -lm
EXTRA_DIST += storage/FORMATS.md

check_PROGRAMS += tests/unit/test_storage tests/unit/test_storage_writer
tests_unit_test_storage_SOURCES = tests/unit/test_storage.c tests/unit/test_storage_export.c \
	tests/unit/test_storage_faults.c tests/unit/test_storage_migrate.c tests/unit/test_storage.h
tests_unit_test_storage_CPPFLAGS = $(TEST_CPPFLAGS) $(SQLITE_CFLAGS)
tests_unit_test_storage_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
# The crash test's writer: saves forever and prints committed ids; verifies them after a kill.
tests_unit_test_storage_writer_SOURCES = tests/unit/test_storage_writer.c
tests_unit_test_storage_writer_CPPFLAGS = $(AM_CPPFLAGS) $(SQLITE_CFLAGS)
tests_unit_test_storage_writer_LDADD = libstorage.a libbase.a $(SQLITE_LIBS) $(CJSON_LIBS) -lm

TESTS += tests/unit/test_storage tests/e2e/storage_cli.sh tests/e2e/storage_sigkill.sh tests/e2e/reliability.sh \
	tests/e2e/export_html_page.sh
EXTRA_DIST += tests/e2e/storage_cli.sh tests/e2e/storage_sigkill.sh tests/e2e/reliability.sh tests/e2e/export_html_page.sh \
	tests/fuzz/fuzz_import.c tests/fuzz/run_fuzz_import.sh tests/fuzz/import_seed.json

EXTRA_PROGRAMS += bench/bench_storage
bench_bench_storage_SOURCES = bench/bench_storage.c
bench_bench_storage_CPPFLAGS = $(AM_CPPFLAGS) $(SQLITE_CFLAGS)
bench_bench_storage_LDADD = libstorage.a libbase.a $(SQLITE_LIBS) $(CJSON_LIBS) -lm
CLEANFILES += bench/bench_storage
