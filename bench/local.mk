# bench/local.mk: benchmarks (not tests); results recorded in bench/BENCHMARKS.md.
EXTRA_DIST += bench/BENCHMARKS.md bench/ncu_decode_h200_2026-12-03.csv bench/bench_exl3_h200_2026-12-02-main.txt bench/bench_clock.h

# the arithmetic of bench_cuda_engine's decode tables (bench/decode_tables.c), checked by hand
check_PROGRAMS += tests/unit/test_decode_tables
tests_unit_test_decode_tables_SOURCES = tests/unit/test_decode_tables.c bench/decode_tables.c \
	bench/decode_tables.h
tests_unit_test_decode_tables_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_decode_tables_LDADD = $(CHECK_LIBS) -lm
TESTS += tests/unit/test_decode_tables

# the op profile's attribution over the main and side streams (bench/op_profile.c), checked by hand
check_PROGRAMS += tests/unit/test_op_profile
tests_unit_test_op_profile_SOURCES = tests/unit/test_op_profile.c bench/op_profile.c \
	bench/op_profile.h
tests_unit_test_op_profile_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_op_profile_LDADD = $(CHECK_LIBS) -lm
TESTS += tests/unit/test_op_profile

# the rules of bench_cuda_engine's long-prefill mode (bench/long_prefill.c): arguments, limits, lines
check_PROGRAMS += tests/unit/test_long_prefill
tests_unit_test_long_prefill_SOURCES = tests/unit/test_long_prefill.c bench/long_prefill.c \
	bench/long_prefill.h
tests_unit_test_long_prefill_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_long_prefill_LDADD = $(CHECK_LIBS) -lm
TESTS += tests/unit/test_long_prefill
