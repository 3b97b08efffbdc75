/* signals.h: Ctrl-C for the chat outside the TUI: the first SIGINT cancels the reply being
 * generated (the partial reply is kept and marked canceled), a second one exits at once (130). */
#ifndef GLMCHAT_APP_SIGNALS_H
#define GLMCHAT_APP_SIGNALS_H

#include <signal.h>

/* Installs the SIGINT handler and ignores SIGPIPE (a closed stdout is then a write error we
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

#endif
