/* demo_model.h: where glmchat's embedded demo model lives (the build tree's models/demo when
 * run from there, else the installed $(pkgdatadir)/demo), for runs with no --model and no config. */
#ifndef GLMCHAT_APP_DEMO_MODEL_H
#define GLMCHAT_APP_DEMO_MODEL_H

/* The demo model's directory: $GLMCHAT_DEMO_MODEL when set, else the build tree's copy when it holds a model.safetensors, else the
 * installed one. Never NULL; the path is static. */
const char *demo_model_dir(void);

#endif
