# engine/text/local.mk: tokenizer, chat template and reply stream parser.
# Adds its sources to libengine.a (libengine_a_SOURCES +=).
libengine_a_SOURCES += \
	engine/text/tbuf.c engine/text/tbuf.h engine/text/utf8.c engine/text/utf8.h \
	engine/text/json.c engine/text/json.h engine/text/pretokenize.c engine/text/pretokenize.h \
	engine/text/tokenizer.c engine/text/tokenizer.h \
	engine/text/template.c engine/text/template.h

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
EXTRA_DIST += tests/fixtures/text/template-cases.jsonl tools/text/make_template_fixtures.py

TESTS += tests/e2e/text_cli.sh
EXTRA_DIST += tests/e2e/text_cli.sh
