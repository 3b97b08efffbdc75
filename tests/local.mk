# tests/local.mk: the foundation's tests: CLI parsing (Check) and the binary's contract (shell).
# Layers declare their own suites in their local.mk; all run under automake's harness.
TEST_CPPFLAGS = $(AM_CPPFLAGS) $(CHECK_CFLAGS)

check_PROGRAMS += tests/unit/test_cli
tests_unit_test_cli_SOURCES = tests/unit/test_cli.c
tests_unit_test_cli_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_cli_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)

TESTS += tests/unit/test_cli tests/e2e/cli.sh tests/e2e/engine_reuse.sh tests/e2e/bench_cli.sh \
	tests/e2e/engine_settings.sh tests/e2e/check_model.sh tests/e2e/chat_tui_drafts.sh
# app/ and ui/ include no engine header but the public ones (engine_boundary.sh lists any).
TESTS += tests/e2e/engine_boundary.sh
EXTRA_DIST += tests/e2e/engine_boundary.sh
EXTRA_DIST += tests/e2e/cli.sh tests/e2e/lib.sh tests/e2e/engine_reuse.sh tests/e2e/bench_cli.sh \
	tests/e2e/engine_settings.sh tests/e2e/check_model.sh tests/e2e/chat_tui_drafts.sh

# tests/common: what the test programs share (the Check runner, the xorshift source, whole-file
# reads and writes, the tiny model of the cost tests, the real config), header-only.
EXTRA_DIST += tests/common/check_main.h tests/common/cancel_later.h tests/common/rng.h tests/common/files.h tests/common/tiny_config.h \
	tests/common/real_config.h
