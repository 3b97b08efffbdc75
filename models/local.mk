# models/local.mk: the embedded demo model (models/demo): its compressed weights expand into the
# build tree (models/demo/model.safetensors) and install to $(pkgdatadir)/demo; its resolver and tests.
DEMO_FILES = models/demo/config.json models/demo/generation_config.json models/demo/tokenizer.json

libapp_a_SOURCES += app/demo_model.c app/demo_model.h
libapp_a_CPPFLAGS += -DGLMCHAT_DEMO_BUILDDIR='"$(abs_top_builddir)/models/demo"' \
	-DGLMCHAT_DEMO_DATADIR='"$(pkgdatadir)/demo"'

# The build tree's copy: weights expanded, the small files copied when building out of tree.
models/demo/model.safetensors: $(srcdir)/models/demo/model.safetensors.gz
	$(MKDIR_P) models/demo
	gzip -dc $(srcdir)/models/demo/model.safetensors.gz > $@.tmp && mv $@.tmp $@
	for f in $(DEMO_FILES); do \
	  test -f $$f || cp $(srcdir)/$$f $$f; done
all-local: models/demo/model.safetensors
CLEANFILES += models/demo/model.safetensors
distclean-local:
	if test "$(srcdir)" != .; then rm -f $(DEMO_FILES); fi

install-data-local: models/demo/model.safetensors
	$(MKDIR_P) $(DESTDIR)$(pkgdatadir)/demo
	$(INSTALL_DATA) models/demo/model.safetensors $(DESTDIR)$(pkgdatadir)/demo/model.safetensors
	for f in $(DEMO_FILES); do \
	  $(INSTALL_DATA) $(srcdir)/$$f $(DESTDIR)$(pkgdatadir)/demo/ || exit 1; done
uninstall-local:
	rm -f $(DESTDIR)$(pkgdatadir)/demo/model.safetensors
	for f in $(DEMO_FILES); do rm -f $(DESTDIR)$(pkgdatadir)/demo/`basename $$f`; done

EXTRA_DIST += models/demo/model.safetensors.gz $(DEMO_FILES) models/demo/reference.safetensors \
	models/demo/heldout.jsonl models/demo/training-log.txt models/demo/demo-request.json \
	models/demo/README.md tools/demo/train.py tools/demo/data.py tools/demo/check_render.py \
	tools/demo/kda_chunk.py tools/demo/test_kda_chunk.py tools/demo/eval_glmchat.py tools/demo/run_device.sh \
	tools/demo/train_larger.sh

# The held-out evaluation on glmchat's CPU engine (tools/demo/eval_glmchat.py): `make tools/demo/demo_greedy`.
EXTRA_PROGRAMS += tools/demo/demo_greedy
tools_demo_demo_greedy_SOURCES = tools/demo/demo_greedy.c
tools_demo_demo_greedy_LDADD = $(glmchat_LDADD)
CLEANFILES += tools/demo/demo_greedy

check_PROGRAMS += tests/unit/test_demo
tests_unit_test_demo_SOURCES = tests/unit/test_demo.c
tests_unit_test_demo_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_demo_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_demo
tests/unit/test_demo.$(OBJEXT): models/demo/model.safetensors

TESTS += tests/e2e/demo_tool.sh tests/e2e/demo_cancel_prefill.sh tests/e2e/tp_cancel_prefill.sh
EXTRA_DIST += tests/e2e/demo_tool.sh tests/e2e/demo_cancel_prefill.sh tests/e2e/tp_cancel_prefill.sh
