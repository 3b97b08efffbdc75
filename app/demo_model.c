/* demo_model.c: resolves the embedded demo model's directory: the build tree's models/demo
 * (made by models/local.mk from the committed compressed weights) first, then the installed copy. */
#include <stdlib.h>
#include <unistd.h>

#include "app/demo_model.h"

#ifndef GLMCHAT_DEMO_BUILDDIR
#define GLMCHAT_DEMO_BUILDDIR ""
#endif
#ifndef GLMCHAT_DEMO_DATADIR
#define GLMCHAT_DEMO_DATADIR "/usr/local/share/glmchat/demo"
#endif

const char *demo_model_dir(void)
{
    const char *moved = getenv("GLMCHAT_DEMO_MODEL"); /* a relocated copy (packagers, tests) */
    if (moved && moved[0])
        return moved;
    static const char build_dir[] = GLMCHAT_DEMO_BUILDDIR;
    if (build_dir[0] && access(GLMCHAT_DEMO_BUILDDIR "/model.safetensors", R_OK) == 0)
        return build_dir;
    return GLMCHAT_DEMO_DATADIR;
}
