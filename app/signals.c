/* signals.c: SIGINT handling for scripted chats: a flag plus a cancel hook on the first signal,
 * _exit(130) on the second; SIGPIPE ignored so write errors are reported. */
#include <string.h>
#include <unistd.h>

#include "app/cli.h"
#include "app/signals.h"

static volatile sig_atomic_t interrupted;
static void (*volatile hook_fn)(void *);
static void *volatile hook_arg;
static struct sigaction old_int, old_pipe;
static int installed;

static void on_sigint(int sig)
{
    (void)sig;
    if (interrupted) {
        static const char msg[] = "\nglmchat: interrupted again; exiting now\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        _exit(CLI_EXIT_INTERRUPTED);
    }
    interrupted = 1;
    void (*fn)(void *) = hook_fn;
    if (fn)
        fn(hook_arg);
}

int signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a blocking read returns EINTR and the loop sees the flag */
    if (sigaction(SIGINT, &sa, &old_int) != 0)
        return -1;
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    if (sigaction(SIGPIPE, &ign, &old_pipe) != 0) {
        sigaction(SIGINT, &old_int, NULL);
        return -1;
    }
    installed = 1;
    return 0;
}

void signals_restore(void)
{
    if (!installed)
        return;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    installed = 0;
}

void signals_on_interrupt(void (*fn)(void *), void *arg)
{
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
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
}
