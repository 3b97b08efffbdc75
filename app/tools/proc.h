/* proc.h: runs one child process to completion for a tool: its own process group, stdin from
 * /dev/null, stdout and stderr captured together up to a cap, and a deadline that kills the group. */
#ifndef GLMCHAT_APP_TOOLS_PROC_H
#define GLMCHAT_APP_TOOLS_PROC_H

#include <signal.h>
#include <stddef.h>

typedef struct proc_opts {
    char *const *argv;                    /* argv[0] is looked up in PATH */
    const char *cwd;                      /* NULL: ours */
    int timeout_ms;                       /* > 0 */
    size_t max_output;                    /* bytes kept; the rest is read and dropped */
    const volatile sig_atomic_t *cancel;  /* nonzero: stop the child now */
} proc_opts;

typedef struct proc_result {
    char *output;      /* NUL-terminated, owned; stdout and stderr interleaved */
    size_t len;
    size_t total;      /* bytes the child wrote */
    int exited;        /* 1: exit_status is valid */
    int exit_status;
    int signal;        /* the signal that ended it, else 0 */
    int timed_out;
    int canceled;
} proc_result;

/* 0 when the child ran (whatever its status), -1 with err when it could not be started. */
int proc_run(const proc_opts *o, proc_result *r, char *err, size_t errlen);
void proc_result_free(proc_result *r);

/* Sends SIGTERM to the group, waits up to grace_ms for pid, then SIGKILL; reaps pid.
 * Returns the wait status. */
int proc_kill_group(int pid, int grace_ms);

/* Milliseconds on a monotonic clock. */
long long proc_now_ms(void);

#endif
