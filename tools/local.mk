# tools/local.mk: developer scripts (model makers, reference generators); never needed at run time.
# The lossy modes' cost on the demo model (`make tools/accuracy/accuracy`, then
# tools/accuracy/run.sh): KL and top-1 against the f32 run over held-out conversations.
EXTRA_PROGRAMS += tools/accuracy/accuracy
tools_accuracy_accuracy_SOURCES = tools/accuracy/accuracy.c
tools_accuracy_accuracy_CPPFLAGS = $(AM_CPPFLAGS) $(CJSON_CFLAGS)
tools_accuracy_accuracy_LDADD = $(glmchat_LDADD)
# the calibration for the GPTQ modes sees every product's input through the wrapped cpu_matmul
tools_accuracy_accuracy_LDFLAGS = -Wl,--wrap=cpu_matmul
CLEANFILES += tools/accuracy/accuracy
EXTRA_DIST += tools/accuracy/heldout_text.py tools/accuracy/calib_text.py \
    tools/accuracy/dequant_experts.py tools/accuracy/run.sh tools/accuracy/larger.sh
