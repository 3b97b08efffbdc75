/* manpage.h: glmchat.1 (roff) and the bash and zsh completion scripts, generated from the
 * command table (app/commands.c) and each command's own --help text. */
#ifndef GLMCHAT_APP_MANPAGE_H
#define GLMCHAT_APP_MANPAGE_H

#include <stdio.h>

/* Writes the man page; 0, or -1 with the reason on stderr. */
int manpage_print(FILE *out);
/* Writes the completion script for shell ("bash" or "zsh"); 0, or -1 with the reason on
 * stderr. */
int completion_print(FILE *out, const char *shell);

#endif
