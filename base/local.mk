# base/local.mk: libbase.a, the bottom layer (UTF-8, setting values, error buffers; hash.h, le.h
# and md_table.h are header-only). It uses nothing of glmchat's; every other layer may use it.
noinst_LIBRARIES += libbase.a
libbase_a_SOURCES = base/utf8.c base/utf8.h base/setting.c base/setting.h \
	base/errbuf.c base/errbuf.h base/hash.h base/le.h base/md_table.h
# Last on the link line: every library before it may call into it.
glmchat_LDADD += libbase.a

check_PROGRAMS += tests/unit/test_base
tests_unit_test_base_SOURCES = tests/unit/test_base.c
tests_unit_test_base_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_base_LDADD = libbase.a $(CHECK_LIBS)
TESTS += tests/unit/test_base
