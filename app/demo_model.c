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

const char *demo_model_hint(void)
{
    return "**The demo model** is a small model trained for glmchat on a few tasks, with its tools. "
           "Try one of them:\n"
           "- How much is 731 + 86?\n"
           "- What day of the week is 2020-01-11?\n"
           "- How many pounds is 55.1 kilograms?\n"
           "\n"
           "Other questions make it think in circles until the token limit. For GLM-5.3-Flash: "
           "`glmchat check-model DIR`, then `glmchat --model DIR`.\n";
}
