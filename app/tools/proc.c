/* proc.c: proc_run, a child process with a deadline for run_command: fork, setpgid, exec;
 * poll its output; on timeout or cancel, SIGTERM then SIGKILL to the whole process group. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "app/tools/proc.h"

long long proc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int proc_kill_group(int pid, int grace_ms)
{
    int status = 0;
    kill(-pid, SIGTERM);
    long long end = proc_now_ms() + grace_ms;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR)
            return 0;
        if (proc_now_ms() >= end) {
            kill(-pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            break;
        }
        usleep(10000);
    }
    kill(-pid, SIGKILL); /* grandchildren that ignored SIGTERM */
    return status;
}

/* In the child: own group, stdin /dev/null, stdout+stderr to the pipe, then exec. */
static void child_exec(const proc_opts *o, int out_fd, int err_fd)
{
    setpgid(0, 0);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) {
        dup2(null_fd, 0);
        close(null_fd);
    }
    dup2(out_fd, 1);
    dup2(out_fd, 2);
    close(out_fd);
    if (o->cwd && chdir(o->cwd) != 0) {
        dprintf(err_fd, "cannot enter %s: %s", o->cwd, strerror(errno));
        _exit(127);
    }
    execvp(o->argv[0], o->argv);
    dprintf(err_fd, "cannot run %s: %s", o->argv[0], strerror(errno));
    _exit(127);
}

static void keep_output(proc_result *r, size_t cap, const char *buf, size_t n)
{
    r->total += n;
    size_t room = cap > r->len ? cap - r->len : 0;
    size_t take = n < room ? n : room;
    memcpy(r->output + r->len, buf, take);
    r->len += take;
    r->output[r->len] = 0;
}

int proc_run(const proc_opts *o, proc_result *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->output = malloc(o->max_output + 1);
    if (!r->output) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    r->output[0] = 0;
    int out[2], exec_err[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "cannot make a pipe: %s", strerror(errno));
        proc_result_free(r);
        return -1;
    }
    if (pipe2(exec_err, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "cannot make a pipe: %s", strerror(errno));
        close(out[0]);
        close(out[1]);
        proc_result_free(r);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "cannot start a process: %s", strerror(errno));
        close(out[0]);
        close(out[1]);
        close(exec_err[0]);
        close(exec_err[1]);
        proc_result_free(r);
        return -1;
    }
    if (pid == 0) {
        close(out[0]);
        close(exec_err[0]);
        child_exec(o, out[1], exec_err[1]);
    }
    setpgid(pid, pid); /* both sides set it, so no kill can race the child's own setpgid */
    close(out[1]);
    close(exec_err[1]);

    char why[512];
    ssize_t wn = read(exec_err[0], why, sizeof why - 1);
    close(exec_err[0]);
    if (wn > 0) { /* exec failed: the child wrote why and exits 127 */
        why[wn] = 0;
        snprintf(err, errlen, "%s", why);
        close(out[0]);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        proc_result_free(r);
        return -1;
    }

    long long deadline = proc_now_ms() + o->timeout_ms;
    long long drain_until = 0; /* once the child exited: how long to read what is left */
    int status = 0, reaped = 0, left_behind = 0;
    char buf[8192];
    for (;;) {
        if (o->cancel && *o->cancel) {
            r->canceled = 1;
            break;
        }
        long long now = proc_now_ms();
        if (!reaped && now >= deadline) {
            r->timed_out = 1;
            break;
        }
        if (reaped && now >= drain_until) {
            left_behind = 1; /* a background child still holds the pipe; the command is done */
            break;
        }
        if (!reaped) {
            pid_t w = waitpid(pid, &status, WNOHANG);
            if (w == pid) {
                reaped = 1;
                drain_until = now + 200;
            }
        }
        struct pollfd pfd = {.fd = out[0], .events = POLLIN};
        int pr = poll(&pfd, 1, 50);
        if (pr < 0 && errno != EINTR)
            break;
        if (pr <= 0)
            continue;
        ssize_t n = read(out[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (reaped)
                break;
            /* every writer closed but the child runs on: wait for it under the deadline */
            while (!reaped && !(o->cancel && *o->cancel) && proc_now_ms() < deadline) {
                pid_t w = waitpid(pid, &status, WNOHANG);
                if (w == pid)
                    reaped = 1;
                else
                    usleep(5000);
            }
            if (!reaped) {
                r->canceled = o->cancel && *o->cancel;
                r->timed_out = !r->canceled;
            }
            break;
        }
        keep_output(r, o->max_output, buf, (size_t)n);
    }
    close(out[0]);
    if (!reaped)
        status = proc_kill_group(pid, 2000);
    else if (left_behind)
        kill(-pid, SIGKILL); /* the group outlives its leader only through those children */
    if (WIFEXITED(status)) {
        r->exited = !r->timed_out && !r->canceled;
        r->exit_status = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        r->signal = WTERMSIG(status);
    }
    return 0;
}

void proc_result_free(proc_result *r)
{
    free(r->output);
    r->output = NULL;
    r->len = 0;
}
