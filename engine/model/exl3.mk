# engine/model/exl3.mk: EXL3 weights: bit-exact decode, products through the Hadamard scheme,
# the quantizer. Adds its sources to libengine.a (libengine_a_SOURCES +=).
libengine_a_SOURCES += \
	engine/model/exl3.h engine/model/exl3_decode.c engine/model/exl3_matvec.c \
	engine/model/exl3_quantize.c engine/model/exl3_load.h engine/model/exl3_load.c \
	engine/model/hadamard.h engine/model/hadamard.c

EXTRA_DIST += tests/fuzz/fuzz_exl3.c

check_PROGRAMS += tests/unit/test_exl3
tests_unit_test_exl3_SOURCES = tests/unit/test_exl3.c
tests_unit_test_exl3_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_exl3_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_exl3

check_PROGRAMS += tests/unit/test_exl3_quant
tests_unit_test_exl3_quant_SOURCES = tests/unit/test_exl3_quant.c
tests_unit_test_exl3_quant_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_exl3_quant_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_exl3_quant

# Benchmarks: built by `make check`, run by hand (bench/BENCHMARKS.md).
check_PROGRAMS += bench/bench_exl3_quant
bench_bench_exl3_quant_SOURCES = bench/bench_exl3_quant.c
bench_bench_exl3_quant_LDADD = $(glmchat_LDADD)

# `glmchat quantize` (app/cmd_quantize.c over engine/model/quantize_dir.c) end to end on a small checkpoint
check_PROGRAMS += tests/unit/test_exl3_quantize_cmd
tests_unit_test_exl3_quantize_cmd_SOURCES = tests/unit/test_exl3_quantize_cmd.c
tests_unit_test_exl3_quantize_cmd_CPPFLAGS = $(TEST_CPPFLAGS) $(CJSON_CFLAGS)
tests_unit_test_exl3_quantize_cmd_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_exl3_quantize_cmd

# The CPU engine on EXL3 checkpoints: logits against the dequantized model, dump-tensor, errors;
# quantize -> chat end to end.
check_PROGRAMS += tests/unit/test_exl3_engine
tests_unit_test_exl3_engine_SOURCES = tests/unit/test_exl3_engine.c $(ENGINE_TEST_UTIL)
tests_unit_test_exl3_engine_CPPFLAGS = $(TEST_CPPFLAGS) $(CJSON_CFLAGS)
tests_unit_test_exl3_engine_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_exl3_engine
TESTS += tests/e2e/exl3_chat.sh
EXTRA_DIST += tests/e2e/exl3_chat.sh
