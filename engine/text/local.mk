# engine/text/local.mk: tokenizer, chat template and reply stream parser.
# Adds its sources to libengine.a (libengine_a_SOURCES +=).
libengine_a_SOURCES += \
	engine/text/tbuf.c engine/text/tbuf.h \
	engine/text/json.c engine/text/json.h engine/text/pretokenize.c engine/text/pretokenize.h \
	engine/text/tokenizer.c engine/text/tokenizer.h \
	engine/text/template.c engine/text/template.h engine/text/reply_parser.c engine/text/reply_parser.h \
	engine/text/template_check.c engine/text/template_check.h

check_PROGRAMS += tests/unit/test_tokenizer
tests_unit_test_tokenizer_SOURCES = tests/unit/test_tokenizer.c
tests_unit_test_tokenizer_CPPFLAGS = $(TEST_CPPFLAGS) $(PCRE2_CFLAGS)
tests_unit_test_tokenizer_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_tokenizer
EXTRA_DIST += \
	tests/fixtures/text/glm-bpe.tokenizer.json tests/fixtures/text/glm-bpe.encode.bin \
	tests/fixtures/text/glm-bpe.decode.bin tests/fixtures/text/glm-bpe-merges.tokenizer.json \
	tests/fixtures/text/glm-bpe-merges.encode.bin tests/fixtures/text/glm-bpe-merges.decode.bin
EXTRA_DIST += tools/text/corpus.py tools/text/make_tokenizer_fixtures.py

check_PROGRAMS += tests/unit/test_template
tests_unit_test_template_SOURCES = tests/unit/test_template.c
tests_unit_test_template_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_template_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_template
EXTRA_DIST += tests/fixtures/text/template-cases.jsonl tools/text/make_template_fixtures.py \
	tests/fixtures/text/README.md

TESTS += tests/e2e/text_cli.sh tests/e2e/template_jinja.sh tests/e2e/text_tokenizer_memory.sh
EXTRA_DIST += tests/e2e/text_cli.sh tests/e2e/template_jinja.sh tests/e2e/template_jinja.py tests/e2e/text_tokenizer_memory.sh \
	tests/fixtures/text/glm-5.3-flash.chat_template.jinja tests/fixtures/text/glm-5.3-flash-nvidia.chat_template.jinja

check_PROGRAMS += tests/unit/test_reply_parser
tests_unit_test_reply_parser_SOURCES = tests/unit/test_reply_parser.c tests/unit/reply_parser_check.h
tests_unit_test_reply_parser_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_reply_parser_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_reply_parser

# The tokenizer benchmark (not a test): make bench/bench_tokenizer, then see tools/text/bench_tokenizer.sh.
# (EXTRA_PROGRAMS is first set here; once Makefile.am sets it, this becomes +=.)
EXTRA_DIST += tools/text/bench_same_machine.sh
EXTRA_PROGRAMS += bench/bench_tokenizer
bench_bench_tokenizer_SOURCES = bench/bench_tokenizer.c
bench_bench_tokenizer_LDADD = libengine.a libbase.a $(PCRE2_LIBS) -lm
CLEANFILES += bench/bench_tokenizer

# Fuzzing (not part of make check): make fuzz-text builds the libFuzzer targets with clang and
# sanitizers; make fuzz-text-run runs each for TEXT_FUZZ_SECONDS. fuzz_tokenizer_load starts from
# tests/fuzz/tokenizer_load_seeds (cut-down tokenizer.json files, and inputs that once failed).
TEXT_FUZZ_SECONDS = 60
TEXT_FUZZ_FLAGS = -g -O1 -std=c11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	-include $(top_builddir)/config.h -I$(top_srcdir) -I$(top_srcdir)/engine $(PCRE2_CFLAGS)
TEXT_FUZZ_LIB = engine/error.c base/utf8.c engine/text/tbuf.c engine/text/json.c \
	engine/text/pretokenize.c engine/text/tokenizer.c engine/text/reply_parser.c engine/text/template.c
TEXT_FUZZERS = fuzz_tokenizer_decode fuzz_reply_parser fuzz_template fuzz_tokenizer_load
EXTRA_DIST += tests/fuzz/fuzz_tokenizer_decode.c tests/fuzz/fuzz_reply_parser.c tests/fuzz/reply_parser.dict \
	tests/fuzz/fuzz_template.c tests/fuzz/fuzz_tokenizer_load.c tests/fuzz/tokenizer_load.dict \
	tests/fuzz/tokenizer_load_seeds tools/text/make_tokenizer_fuzz_seeds.py
CLEANFILES += tests/fuzz/fuzz_tokenizer_decode tests/fuzz/fuzz_reply_parser tests/fuzz/fuzz_template \
	tests/fuzz/fuzz_tokenizer_load
.PHONY: fuzz-text fuzz-text-run
fuzz-text:
	mkdir -p tests/fuzz
	for t in $(TEXT_FUZZERS); do \
	  clang $(TEXT_FUZZ_FLAGS) $(TEXT_FUZZ_LIB:%=$(top_srcdir)/%) $(top_srcdir)/tests/fuzz/$$t.c \
	    $(PCRE2_LIBS) -lm -o tests/fuzz/$$t || exit 1; done
fuzz-text-run: fuzz-text
	mkdir -p tests/fuzz/corpus-tok tests/fuzz/corpus-rp tests/fuzz/corpus-tmpl
	GLMCHAT_FUZZ_TOKENIZER=$(top_srcdir)/tests/fixtures/text/glm-bpe.tokenizer.json \
	  tests/fuzz/fuzz_tokenizer_decode -max_total_time=$(TEXT_FUZZ_SECONDS) -max_len=4096 tests/fuzz/corpus-tok
	tests/fuzz/fuzz_reply_parser -max_total_time=$(TEXT_FUZZ_SECONDS) -max_len=4096 \
	  -dict=$(top_srcdir)/tests/fuzz/reply_parser.dict tests/fuzz/corpus-rp
	tests/fuzz/fuzz_template -max_total_time=$(TEXT_FUZZ_SECONDS) -max_len=8192 tests/fuzz/corpus-tmpl
	mkdir -p tests/fuzz/corpus-tokload
	tests/fuzz/fuzz_tokenizer_load -max_total_time=$(TEXT_FUZZ_SECONDS) -max_len=16384 -timeout=10 \
	  -dict=$(top_srcdir)/tests/fuzz/tokenizer_load.dict tests/fuzz/corpus-tokload \
	  $(top_srcdir)/tests/fuzz/tokenizer_load_seeds
