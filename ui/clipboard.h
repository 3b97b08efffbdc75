/* clipboard.h: copying text out of the TUI: to the terminal's clipboard with OSC 52 (through
 * tmux with set-clipboard on, and over ssh) and to a file, as the status line reports. */
#ifndef GLMCHAT_UI_CLIPBOARD_H
#define GLMCHAT_UI_CLIPBOARD_H

#include <stddef.h>

/* The OSC 52 sequence that puts text[0, len) on the clipboard: ESC ] 52 ; c ; base64 BEL.
 * malloc'd, its length in *olen; NULL when out of memory. */
char *clip_osc52(const char *text, size_t len, size_t *olen);

/* Writes the OSC 52 sequence to fd and, when path is not NULL, text to path (created or
 * truncated, mode 0600: a copy may hold secrets). A terminal cannot say whether it took the
 * sequence, so the file is the copy that is sure to be there. how gets what happened, for the
 * status line: "OSC 52 + ~/path", "OSC 52 (path not written: reason)". Returns 0 when the
 * sequence was written and the file (if any) too, -1 when either failed (said in how). */
int clip_copy(int fd, const char *path, const char *text, size_t len, char *how, size_t howlen);

#endif
