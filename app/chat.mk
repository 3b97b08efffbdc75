# app/chat.mk: the chat loop, tools (built-in and MCP), config file and scripted mode.
# Adds its sources to libapp.a (libapp_a_SOURCES +=) and its tests to the check run.
libapp_a_SOURCES += \
	app/config.c app/config.h app/config_save.c app/config_save.h app/jsonl.c app/jsonl.h app/signals.c app/signals.h \
	app/tools/tools.c app/tools/tools.h app/tools/proc.c app/tools/proc.h \
	app/tools/workspace.c app/tools/workspace.h app/tools/builtin.c app/tools/builtin_fs.c app/tools/write_preview.c \
	app/tools/builtin.h app/tools/mcp.c app/tools/mcp.h app/tools/mcp_rpc.c app/tools/mcp_rpc.h \
	app/tools/mcp_boot.c app/tools/mcp_boot.h \
	app/chat.c app/chat.h app/chat_branches.c app/chat_branches.h app/chat_memory.c app/chat_memory.h app/chat_engine.c app/chat_engine.h \
	app/chat_tui.c app/chat_tui.h app/source_hook.h \
	app/attach.c app/attach.h app/engine_log.c app/engine_log.h app/export_file.c app/export_file.h
glmchat_LDADD += $(CJSON_LIBS)

# The MCP test server: a real process with tools and modes that misbehave on purpose.
check_PROGRAMS += tests/mcp/test_mcp_server
tests_mcp_test_mcp_server_SOURCES = tests/mcp/test_mcp_server.c
tests_mcp_test_mcp_server_CPPFLAGS = $(AM_CPPFLAGS) $(CJSON_CFLAGS)
tests_mcp_test_mcp_server_LDADD = $(CJSON_LIBS)

CHAT_TEST_CPPFLAGS = $(TEST_CPPFLAGS) $(CJSON_CFLAGS) $(SQLITE_CFLAGS)
check_PROGRAMS += tests/unit/test_config tests/unit/test_tools tests/unit/test_mcp tests/unit/test_jsonl
tests_unit_test_config_SOURCES = tests/unit/test_config.c
tests_unit_test_config_CPPFLAGS = $(CHAT_TEST_CPPFLAGS)
tests_unit_test_config_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
tests_unit_test_tools_SOURCES = tests/unit/test_tools.c
tests_unit_test_tools_CPPFLAGS = $(CHAT_TEST_CPPFLAGS)
tests_unit_test_tools_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
tests_unit_test_mcp_SOURCES = tests/unit/test_mcp.c
tests_unit_test_mcp_CPPFLAGS = $(CHAT_TEST_CPPFLAGS)
tests_unit_test_mcp_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
tests_unit_test_jsonl_SOURCES = tests/unit/test_jsonl.c
tests_unit_test_jsonl_CPPFLAGS = $(CHAT_TEST_CPPFLAGS)
tests_unit_test_jsonl_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
check_PROGRAMS += tests/unit/test_chat
tests_unit_test_chat_SOURCES = tests/unit/test_chat.c tests/app/test_reply_source.c tests/app/test_reply_source.h
tests_unit_test_chat_CPPFLAGS = $(CHAT_TEST_CPPFLAGS)
tests_unit_test_chat_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_config tests/unit/test_tools tests/unit/test_mcp tests/unit/test_jsonl \
	tests/unit/test_chat

# glmchat-test: glmchat plus the recorded-reply source in place of the model when
# GLMCHAT_TEST_REPLIES is set (tests/app/reply_hook.c); the e2e tests that replay replies run it.
# glmchat itself does not contain the source (cli.sh checks with nm).
check_PROGRAMS += tests/app/glmchat-test
tests_app_glmchat_test_SOURCES = app/main.c tests/app/reply_hook.c tests/app/test_reply_source.c \
	tests/app/test_reply_source.h
tests_app_glmchat_test_CPPFLAGS = $(APP_CPPFLAGS)
tests_app_glmchat_test_LDADD = $(glmchat_LDADD)

# Scripted sessions end to end: recorded replies through the test build, the MCP test server.
TESTS += tests/e2e/chat_scripted.sh tests/e2e/chat_tools.sh tests/e2e/chat_cancel.sh tests/e2e/chat_errors.sh \
	tests/e2e/chat_tui.sh tests/e2e/chat_model.sh tests/e2e/chat_approval.sh tests/e2e/chat_escapes.sh \
	tests/e2e/chat_signals.sh tests/e2e/chat_workspace.sh tests/e2e/chat_tui_tools.sh tests/e2e/chat_input.sh \
	tests/e2e/chat_tui_ux.sh tests/e2e/chat_conversations.sh tests/e2e/chat_tui_conversations.sh \
	tests/e2e/chat_markup.sh tests/e2e/chat_tui_compact.sh tests/e2e/chat_compact.sh tests/e2e/chat_tui_copy.sh \
	tests/e2e/chat_tui_export.sh
EXTRA_DIST += tests/e2e/chat_lib.sh tests/e2e/chat_scripted.sh tests/e2e/chat_tools.sh \
	tests/e2e/chat_cancel.sh tests/e2e/chat_errors.sh tests/e2e/chat_tui.sh tests/e2e/chat_model.sh \
	tests/e2e/chat_approval.sh tests/e2e/chat_escapes.sh tests/e2e/chat_signals.sh \
	tests/e2e/chat_workspace.sh tests/e2e/chat_tui_tools.sh tests/e2e/chat_input.sh tests/e2e/chat_tui_ux.sh \
	tests/e2e/chat_conversations.sh tests/e2e/chat_tui_conversations.sh tests/e2e/chat_markup.sh \
	tests/e2e/chat_tui_compact.sh tests/e2e/chat_compact.sh tests/e2e/chat_tui_copy.sh \
	tests/e2e/chat_tui_export.sh

# Fuzz targets (clang -fsanitize=fuzzer; not built by make): each file says how to run it.
EXTRA_DIST += tests/fuzz/fuzz_config.c tests/fuzz/fuzz_mcp.c
TESTS += tests/e2e/tui_mcp_start.sh
EXTRA_DIST += tests/e2e/tui_mcp_start.sh

# Code blocks and the clipboard; the command table against both dispatchers (view and app).
check_PROGRAMS += tests/unit/test_codeblock
tests_unit_test_codeblock_SOURCES = tests/unit/test_codeblock.c
tests_unit_test_codeblock_CPPFLAGS = $(CHAT_TEST_CPPFLAGS)
tests_unit_test_codeblock_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_codeblock
