/* signals.c: SIGINT, SIGTERM and SIGHUP for scripted chats: a flag plus a cancel hook on the
 * first signal, _exit(128 + signal) on the second; SIGPIPE ignored so write errors are reported. */
#include <string.h>
#include <unistd.h>

#include "app/cli.h"
#include "app/signals.h"

static volatile sig_atomic_t interrupted;
static volatile sig_atomic_t which; /* the first signal that interrupted */
static void (*volatile hook_fn)(void *);
static void *volatile hook_arg;
static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define N_STOP_SIGNALS (sizeof stop_signals / sizeof stop_signals[0])
static struct sigaction old_stop[N_STOP_SIGNALS], old_pipe;
static int installed;

static void on_stop_signal(int sig)
{
    if (interrupted) {
        static const char msg[] = "\nglmchat: interrupted again; exiting now\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        _exit(128 + sig);
    }
    which = sig;
    interrupted = 1;
    void (*fn)(void *) = hook_fn;
    if (fn)
        fn(hook_arg);
}

int signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < N_STOP_SIGNALS; i++)
        sigaddset(&sa.sa_mask, stop_signals[i]); /* one handler runs at a time */
    sa.sa_flags = 0; /* no SA_RESTART: a blocking read returns EINTR and the loop sees the flag */
    for (size_t i = 0; i < N_STOP_SIGNALS; i++)
        if (sigaction(stop_signals[i], &sa, &old_stop[i]) != 0) {
            while (i-- > 0)
                sigaction(stop_signals[i], &old_stop[i], NULL);
            return -1;
        }
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    if (sigaction(SIGPIPE, &ign, &old_pipe) != 0) {
        for (size_t i = 0; i < N_STOP_SIGNALS; i++)
            sigaction(stop_signals[i], &old_stop[i], NULL);
        return -1;
    }
    installed = 1;
    return 0;
}

void signals_restore(void)
{
    if (!installed)
        return;
    for (size_t i = 0; i < N_STOP_SIGNALS; i++)
        sigaction(stop_signals[i], &old_stop[i], NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    installed = 0;
}

void signals_on_interrupt(void (*fn)(void *), void *arg)
{
    sigset_t block, old;
    sigemptyset(&block);
    for (size_t i = 0; i < N_STOP_SIGNALS; i++)
        sigaddset(&block, stop_signals[i]);
    sigprocmask(SIG_BLOCK, &block, &old); /* the handler never sees a half-set hook */
    hook_fn = fn;
    hook_arg = arg;
    sigprocmask(SIG_SETMASK, &old, NULL);
}

const volatile sig_atomic_t *signals_cancel_flag(void)
{
    return &interrupted;
}

int signals_interrupted(void)
{
    return interrupted != 0;
}

void signals_request_cancel(void)
{
    interrupted = 1;
}

void signals_clear(void)
{
    interrupted = 0;
    which = 0;
}

int signals_exit_status(void)
{
    return which ? 128 + which : CLI_EXIT_INTERRUPTED;
}

const char *signals_what(void)
{
    return which == SIGTERM ? "stopped by SIGTERM" : which == SIGHUP ? "stopped by SIGHUP" : "interrupted";
}
