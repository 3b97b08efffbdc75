# ui/local.mk: the view the app talks to (view.h): the ncurses TUI. Scripted mode (app/cmd_chat.c)
# writes its own output.
# libui.a has no engine or storage code; its tests drive the real TUI in tmux.
noinst_LIBRARIES += libui.a
libui_a_SOURCES = \
	ui/view.h ui/view_impl.h ui/view.c ui/commands.c \
	ui/render.h ui/render.c ui/codeblock.h ui/codeblock.c ui/clipboard.h ui/clipboard.c ui/highlight.h ui/highlight.c ui/visible.h ui/visible.c ui/history.h ui/history.c \
	ui/transcript.h ui/transcript.c ui/tui.h ui/tui.c ui/input.c
libui_a_CPPFLAGS = $(AM_CPPFLAGS) $(NCURSES_CFLAGS) $(READLINE_CFLAGS)
glmchat_LDADD += libui.a $(NCURSES_LIBS) $(READLINE_LIBS)

UI_TEST_LIBS = libui.a libbase.a $(NCURSES_LIBS) $(READLINE_LIBS) $(CHECK_LIBS)

check_PROGRAMS += tests/unit/test_render tests/unit/test_input_history \
	tests/unit/test_transcript
tests_unit_test_transcript_SOURCES = tests/unit/test_transcript.c
tests_unit_test_transcript_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_transcript_LDADD = $(UI_TEST_LIBS)
tests_unit_test_render_SOURCES = tests/unit/test_render.c
tests_unit_test_render_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_render_LDADD = $(UI_TEST_LIBS)
tests_unit_test_input_history_SOURCES = tests/unit/test_input_history.c
tests_unit_test_input_history_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_input_history_LDADD = $(UI_TEST_LIBS)

# The TUI with a scripted reply source, for the tmux tests (and as the wiring example).
check_PROGRAMS += tests/ui/tui_driver
tests_ui_tui_driver_SOURCES = tests/ui/tui_driver.c
tests_ui_tui_driver_CPPFLAGS = $(AM_CPPFLAGS)
tests_ui_tui_driver_LDADD = libui.a libbase.a $(NCURSES_LIBS) $(READLINE_LIBS)

TESTS += tests/unit/test_render tests/unit/test_input_history \
	tests/unit/test_transcript \
	tests/e2e/tui_driver.sh tests/e2e/tui_valgrind.sh tests/e2e/tui_glmchat.sh tests/e2e/tui_reading.sh \
	tests/e2e/tui_escape_keys.sh
EXTRA_DIST += tests/e2e/tui_driver.sh tests/e2e/tui_valgrind.sh tests/e2e/tui_glmchat.sh tests/e2e/tui_reading.sh tests/e2e/tui_lib.sh \
	tests/e2e/tui_escape_keys.sh tests/ui/reply.script \
	tests/ui/scripts/slow.script tests/ui/scripts/tool.script tests/ui/scripts/flood.script tests/ui/scripts/stream.script tests/fuzz/fuzz_render.c
