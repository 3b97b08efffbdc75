/* resume.c: rank 0 picking a conversation up again after its worker restarted: the head's state
 * is replayed from its own token history, so the first forward reconnects to an empty worker. */
#include <stdlib.h>
#include <string.h>

#include "session.h"
#include "tp/rank.h"

glm_status tp_session_resume(glm_session *s, tp_rank *r, glm_error *err)
{
    int held = glm_session_length(s);
    if (held == 0 || tp_rank_health(r, NULL) == GLM_OK)
        return GLM_OK;
    int32_t *tokens = malloc((size_t)held * sizeof *tokens);
    if (!tokens)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory keeping %d tokens to replay for the worker", held);
    memcpy(tokens, glm_session_tokens(s), (size_t)held * sizeof *tokens);
    glm_session_reset(s); /* the failed peer is not told; the reconnected one starts empty */
    glm_status st = glm_session_feed(s, tokens, held, NULL, err);
    free(tokens);
    return st;
}
