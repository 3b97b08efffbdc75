/* reply_hook.c: makes glmchat-test, glmchat with the recorded-reply source (test_reply_source.h)
 * in place of the model while GLMCHAT_TEST_REPLIES=FILE is set; without it, the engine as ever. */
#include <stdlib.h>

#include "app/source_hook.h"
#include "base/setting.h"
#include "tests/app/test_reply_source.h"

#define HOOK_REPLIES "GLMCHAT_TEST_REPLIES"
#define HOOK_REQUESTS "GLMCHAT_TEST_REQUESTS"     /* each request appended here as a JSON line */
#define HOOK_DELAY "GLMCHAT_TEST_REPLY_DELAY_MS"  /* a pause before each event */
#define HOOK_CONTEXT "GLMCHAT_TEST_CONTEXT"       /* a context window to check prompts against */

/* An optional whole-number variable in [lo, hi]; 0, or -1 naming it in err. */
static int env_number(const char *name, long long lo, long long hi, long long *out, char *err, size_t errlen)
{
    const char *v = getenv(name);
    *out = 0;
    return v && *v && setting_int(name, v, lo, hi, out, err, errlen) ? -1 : 0;
}

static int open_replies(chat_source *src, void **state, char *err, size_t errlen)
{
    const char *replies = getenv(HOOK_REPLIES);
    if (!replies || !*replies)
        return 0;
    long long delay_ms, ctx;
    if (env_number(HOOK_DELAY, 0, 600000, &delay_ms, err, errlen) < 0 ||
        env_number(HOOK_CONTEXT, 1, 1 << 30, &ctx, err, errlen) < 0)
        return -1;
    test_reply_source *t = test_reply_source_open(replies, getenv(HOOK_REQUESTS), (int)delay_ms, err, errlen);
    if (!t)
        return -1;
    test_reply_source_set_context(t, (int)ctx);
    *src = test_reply_source_as_source(t);
    *state = t;
    return 1;
}

static void close_replies(void *state)
{
    test_reply_source_free(state);
}

static const chat_source_hook reply_hook = {open_replies, close_replies};

/* Before main: the hook is in place for every command glmchat-test runs. */
__attribute__((constructor)) static void install_reply_hook(void)
{
    chat_source_hook_installed = &reply_hook;
}
