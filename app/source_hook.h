/* source_hook.h: where a test build puts its own model in place of the engine (glmchat-test,
 * tests/app/reply_hook.c). glmchat itself leaves the hook NULL and always runs the engine. */
#ifndef GLMCHAT_APP_SOURCE_HOOK_H
#define GLMCHAT_APP_SOURCE_HOOK_H

#include <stddef.h>

#include "app/chat.h"

typedef struct chat_source_hook {
    /* Called once by each chat command: 1 when it replaces the model (src filled, *state its
     * own, handed to close), 0 to run the engine, -1 with a message in err. */
    int (*open)(chat_source *src, void **state, char *err, size_t errlen);
    void (*close)(void *state);
} chat_source_hook;

/* Set before main runs by a test build; NULL in glmchat (defined in cmd_chat.c). */
extern const chat_source_hook *chat_source_hook_installed;

#endif
