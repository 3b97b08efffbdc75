# engine/local.mk: the inference engine (glm.h): model loading, text, CPU and CUDA backends, ranks.
noinst_LIBRARIES += libengine.a
libengine_a_SOURCES = engine/glm.h engine/error.c engine/cuda/probe.c \
	engine/model/config.c engine/model/config.h \
	engine/model/safetensors.c engine/model/safetensors.h \
	engine/model/weights.c engine/model/weights.h \
	engine/model/model.c engine/model/model.h \
	engine/cpu/threads.c engine/cpu/threads.h engine/cpu/ops.c engine/cpu/ops.h \
	engine/cpu/blocks.h engine/cpu/hc.c engine/cpu/kda.c engine/cpu/dsa.c engine/cpu/ffn.c \
	engine/cpu/forward.c engine/cpu/forward.h \
	engine/session.c engine/session.h engine/sampler.c engine/sampler.h
libengine_a_CPPFLAGS = $(AM_CPPFLAGS) $(CJSON_CFLAGS) $(PCRE2_CFLAGS)
glmchat_LDADD += libengine.a $(CJSON_LIBS) $(PCRE2_LIBS) -lm
