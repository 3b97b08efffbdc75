# base/local.mk: libbase.a, the bottom layer (UTF-8, setting values, error buffers, array growth,
# SHA-256, "did you mean" suggestions; hash.h, le.h and md_table.h are header-only). It uses nothing of glmchat's; every layer uses it.
noinst_LIBRARIES += libbase.a
libbase_a_SOURCES = base/utf8.c base/utf8.h base/setting.c base/setting.h \
	base/errbuf.c base/errbuf.h base/grow.c base/grow.h base/sha256.c base/sha256.h \
	base/suggest.c base/suggest.h base/hash.h base/le.h base/md_table.h
# Last on the link line: every library before it may call into it.
glmchat_LDADD += libbase.a

check_PROGRAMS += tests/unit/test_base
tests_unit_test_base_SOURCES = tests/unit/test_base.c
tests_unit_test_base_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_base_LDADD = libbase.a $(CHECK_LIBS)
TESTS += tests/unit/test_base

# Fuzzing (not part of make check): make fuzz-base builds the UTF-8 decoder's libFuzzer target with
# clang and sanitizers; make fuzz-base-run runs it for BASE_FUZZ_SECONDS.
BASE_FUZZ_SECONDS = 60
BASE_FUZZ_FLAGS = -g -O1 -std=c11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	-include $(top_builddir)/config.h -I$(top_srcdir)
EXTRA_DIST += tests/fuzz/fuzz_utf8.c
CLEANFILES += tests/fuzz/fuzz_utf8
.PHONY: fuzz-base fuzz-base-run
fuzz-base:
	mkdir -p tests/fuzz
	clang $(BASE_FUZZ_FLAGS) $(top_srcdir)/base/utf8.c $(top_srcdir)/tests/fuzz/fuzz_utf8.c -o tests/fuzz/fuzz_utf8
fuzz-base-run: fuzz-base
	mkdir -p tests/fuzz/corpus-utf8
	tests/fuzz/fuzz_utf8 -max_total_time=$(BASE_FUZZ_SECONDS) -max_len=256 tests/fuzz/corpus-utf8
