# engine/local.mk: the inference engine (glm.h): model loading, text, CPU and CUDA backends, ranks.
noinst_LIBRARIES += libengine.a
libengine_a_SOURCES = engine/glm.h engine/error.c engine/cuda/probe.c
libengine_a_CPPFLAGS = $(AM_CPPFLAGS) $(CJSON_CFLAGS) $(PCRE2_CFLAGS)
glmchat_LDADD += libengine.a $(CJSON_LIBS) $(PCRE2_LIBS) -lm
