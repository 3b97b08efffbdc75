/* signals.h: Ctrl-C, SIGTERM and SIGHUP for the chat outside the TUI: the first one cancels the
 * reply being generated (the partial reply is kept and marked canceled), a second one exits at
 * once (128 + the signal: 130 for SIGINT). */
#ifndef GLMCHAT_APP_SIGNALS_H
#define GLMCHAT_APP_SIGNALS_H

#include <signal.h>

/* Installs the SIGINT, SIGTERM and SIGHUP handler and ignores SIGPIPE (a closed stdout is then a write error we
 * report, not a silent death that would lose the reply being saved). */
int signals_install(void);
/* Puts the previous SIGINT and SIGPIPE dispositions back. */
void signals_restore(void);

/* fn(arg) is called from the handler on the first SIGINT: it must be async-signal-safe
 * (glm_cancel is). NULL: none. */
void signals_on_interrupt(void (*fn)(void *), void *arg);

/* Nonzero after a SIGINT; tools and the chat loop poll it. */
const volatile sig_atomic_t *signals_cancel_flag(void);
int signals_interrupted(void);
/* Sets the flag as a first SIGINT would, without the handler (the TUI's cancel key). */
void signals_request_cancel(void);
/* Clears the flag (the next prompt starts afresh). */
void signals_clear(void);
/* The exit status after an interruption: 128 + the signal (130 for SIGINT or a cancel key). */
int signals_exit_status(void);
/* "interrupted", "stopped by SIGTERM" or "stopped by SIGHUP", for messages. */
const char *signals_what(void);

#endif
