# app/local.mk: the glmchat binary: CLI, command table, one cmd_*.c per subcommand.
# Everything but main.c goes in libapp.a so tests can link it.
noinst_LIBRARIES += libapp.a
libapp_a_SOURCES = \
	app/cli.c app/cli.h app/commands.c app/commands.h app/paths.c app/paths.h \
	app/open_db.c app/open_db.h \
	app/cmd_chat.c app/cmd_worker.c app/cmd_list.c app/cmd_rename.c app/cmd_delete.c app/cmd_search.c app/cmd_export.c \
	app/cmd_import.c app/cmd_tokenize.c app/cmd_detokenize.c app/cmd_render.c \
	app/cmd_logits.c app/cmd_dump_tensor.c app/cmd_mkmodel.c app/cmd_quantize.c \
	app/cmd_bench.c app/bench_ceiling.c app/bench_ceiling.h app/cmd_check_model.c
APP_CPPFLAGS = $(AM_CPPFLAGS) $(CJSON_CFLAGS) $(SQLITE_CFLAGS) $(NCURSES_CFLAGS) $(READLINE_CFLAGS)
libapp_a_CPPFLAGS = $(APP_CPPFLAGS)
glmchat_SOURCES += app/main.c
glmchat_CPPFLAGS = $(APP_CPPFLAGS)
glmchat_LDADD += libapp.a
