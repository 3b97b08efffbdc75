/* demo_model.h: where glmchat's embedded demo model lives (the build tree's models/demo when
 * run from there, else the installed $(pkgdatadir)/demo), for runs with no --model and no config. */
#ifndef GLMCHAT_APP_DEMO_MODEL_H
#define GLMCHAT_APP_DEMO_MODEL_H

/* The demo model's directory: $GLMCHAT_DEMO_MODEL when set, else the build tree's copy when it holds a model.safetensors, else the
 * installed one. Never NULL; the path is static. */
const char *demo_model_dir(void);

/* What a chat on the demo model shows before its first message: what the model knows (a few
 * tasks of its training set, with examples) and how to run the real one. Markdown-lite. */
const char *demo_model_hint(void);

#endif
