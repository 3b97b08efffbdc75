# app/local.mk: the glmchat binary: CLI, command table, one cmd_*.c per subcommand.
# Everything but main.c goes in libapp.a so tests can link it.
noinst_LIBRARIES += libapp.a
libapp_a_SOURCES = \
	app/cli.c app/cli.h app/commands.c app/commands.h app/paths.c app/paths.h \
	app/open_db.c app/open_db.h \
	app/cmd_chat.c app/cmd_worker.c app/cmd_list.c app/cmd_check_db.c app/cmd_rename.c app/cmd_delete.c \
	app/cmd_search.c app/cmd_export.c \
	app/cmd_import.c app/cmd_tokenize.c app/cmd_detokenize.c app/cmd_render.c \
	app/cmd_logits.c app/cmd_dump_tensor.c app/cmd_mkmodel.c app/cmd_quantize.c \
	app/cmd_bench.c app/bench_ceiling.c app/bench_ceiling.h app/cmd_check_model.c \
	app/manpage.c app/manpage.h
APP_CPPFLAGS = $(AM_CPPFLAGS) $(CJSON_CFLAGS) $(SQLITE_CFLAGS) $(NCURSES_CFLAGS) $(READLINE_CFLAGS)
libapp_a_CPPFLAGS = $(APP_CPPFLAGS)
glmchat_SOURCES += app/main.c
glmchat_CPPFLAGS = $(APP_CPPFLAGS)
glmchat_LDADD += libapp.a

# The man page and the shell completions are generated from the binary's command table and
# each command's --help (app/manpage.c), so they list what this build has.
man1_MANS = glmchat.1
bashcompletiondir = $(datadir)/bash-completion/completions
bashcompletion_DATA = completions/glmchat
zshcompletiondir = $(datadir)/zsh/site-functions
zshcompletion_DATA = completions/_glmchat
glmchat.1: glmchat$(EXEEXT)
	$(AM_V_GEN)./glmchat$(EXEEXT) --man >$@.tmp && mv $@.tmp $@
completions/glmchat: glmchat$(EXEEXT)
	$(AM_V_GEN)$(MKDIR_P) completions && ./glmchat$(EXEEXT) --completion bash >$@.tmp && mv $@.tmp $@
completions/_glmchat: glmchat$(EXEEXT)
	$(AM_V_GEN)$(MKDIR_P) completions && ./glmchat$(EXEEXT) --completion zsh >$@.tmp && mv $@.tmp $@
CLEANFILES += glmchat.1 completions/glmchat completions/_glmchat
TESTS += tests/e2e/man_completion.sh
EXTRA_DIST += tests/e2e/man_completion.sh
