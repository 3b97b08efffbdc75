# engine/local.mk: the inference engine (glm.h): model loading, text, CPU and CUDA backends, ranks.
noinst_LIBRARIES += libengine.a
libengine_a_SOURCES = engine/glm.h engine/glm_tokens.h engine/tokens.c engine/error.c engine/cuda/probe.c engine/generate.c \
	engine/backend.h engine/backend.c engine/prefill_grid.c engine/prefill_grid.h engine/cpu/backend_cpu.c engine/cuda/backend_cuda.c \
	engine/model/config.c engine/model/config.h \
	engine/model/safetensors.c engine/model/safetensors.h \
	engine/model/weights.c engine/model/weights.h \
	engine/model/model.c engine/model/model.h engine/model/traffic.c engine/model/traffic.h \
	engine/model/projection.c engine/model/projection.h \
	engine/model/prefill_projection.c engine/model/prefill_projection.h \
	engine/model/mkmodel.c engine/model/mkmodel.h engine/model/tokenizer_write.c \
	engine/model/identity.c engine/model/identity.h engine/model/dump.c engine/model/quantize_dir.c \
	engine/model/check_dir.c \
	engine/cpu/threads.c engine/cpu/threads.h engine/cpu/ops.c engine/cpu/ops.h engine/cpu/inputs.c \
	engine/cpu/blocks.h engine/cpu/hc.c engine/cpu/kda.c engine/cpu/dsa.c engine/cpu/ffn.c \
	engine/cpu/forward.c engine/cpu/forward.h \
	engine/cpu/snapshot.c engine/cpu/snapshot.h engine/cpu/mtp.c \
	engine/cpu/requant.c engine/cpu/requant.h engine/model/numfmt.c engine/model/numfmt.h \
	engine/engine.c engine/engine_impl.h engine/session.c engine/session.h engine/sampler.c engine/sampler.h \
	engine/prefix_cache.c engine/prefix_cache.h engine/spec.c engine/spec.h \
	engine/log.c engine/log.h
# the CUDA backend (engine/cuda; its kernels are kernels/engine_*.cu)
libengine_a_SOURCES += engine/cuda/cuda_internal.h engine/cuda/plan.c engine/cuda/plan.h \
	engine/cuda/weights.c engine/cuda/state.c engine/cuda/forward.c engine/cuda/graph.c \
	engine/cuda/spec.c engine/cuda/snapshot.c engine/cuda/mtp.c
libengine_a_CPPFLAGS = $(AM_CPPFLAGS) $(CJSON_CFLAGS) $(PCRE2_CFLAGS)
glmchat_LDADD += libengine.a $(CJSON_LIBS) $(PCRE2_LIBS) -lm

# Tests: the CPU engine against the reference fixtures, the loader's checks, the sampler.
ENGINE_TEST_UTIL = tests/unit/test_engine_util.c tests/unit/test_engine_util.h \
	tests/unit/test_engine_util_draft.c
check_PROGRAMS += tests/unit/test_engine
tests_unit_test_engine_SOURCES = tests/unit/test_engine.c $(ENGINE_TEST_UTIL)
tests_unit_test_engine_CPPFLAGS = $(TEST_CPPFLAGS) $(CJSON_CFLAGS)
tests_unit_test_engine_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_engine
EXTRA_DIST += tools/engine/make_fixtures.py tools/engine/make_fp8_fixture.py \
	tests/fixtures/fp8/fp8_blocks.safetensors tests/fixtures/models/README.md \
	tests/fixtures/models/groups-kpool2/config.json \
	tests/fixtures/models/groups-kpool2/generation_config.json \
	tests/fixtures/models/groups-kpool2/model.safetensors \
	tests/fixtures/models/groups-kpool2/reference.safetensors \
	tests/fixtures/models/shared-indexer-hc2/config.json \
	tests/fixtures/models/shared-indexer-hc2/generation_config.json \
	tests/fixtures/models/shared-indexer-hc2/model.safetensors \
	tests/fixtures/models/shared-indexer-hc2/reference.safetensors \
	tests/fixtures/models/dsa-first-hc3/config.json \
	tests/fixtures/models/dsa-first-hc3/generation_config.json \
	tests/fixtures/models/dsa-first-hc3/model.safetensors \
	tests/fixtures/models/dsa-first-hc3/reference.safetensors \
	tests/fixtures/models/softplus-kpool1-hc1/config.json \
	tests/fixtures/models/softplus-kpool1-hc1/generation_config.json \
	tests/fixtures/models/softplus-kpool1-hc1/model.safetensors \
	tests/fixtures/models/softplus-kpool1-hc1/reference.safetensors
check_PROGRAMS += tests/unit/test_model
tests_unit_test_model_SOURCES = tests/unit/test_model.c $(ENGINE_TEST_UTIL)
tests_unit_test_model_CPPFLAGS = $(TEST_CPPFLAGS) $(CJSON_CFLAGS)
tests_unit_test_model_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_model
# The published checkpoint layouts (EXL3 4-bit, official FP8) and their refusals (issue #29).
check_PROGRAMS += tests/unit/test_checkpoints
tests_unit_test_checkpoints_SOURCES = tests/unit/test_checkpoints.c $(ENGINE_TEST_UTIL)
tests_unit_test_checkpoints_CPPFLAGS = $(TEST_CPPFLAGS) $(CJSON_CFLAGS)
tests_unit_test_checkpoints_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_checkpoints
TESTS += tests/e2e/published_chat.sh
EXTRA_DIST += tests/e2e/published_chat.sh
check_PROGRAMS += tests/unit/test_sampler
tests_unit_test_sampler_SOURCES = tests/unit/test_sampler.c
tests_unit_test_sampler_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_sampler_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_sampler
# The CUDA backend's lossy formats as the CPU backend emulates them (issue 35).
check_PROGRAMS += tests/unit/test_numfmt tests/unit/test_emulate tests/unit/test_prefill_grid
tests_unit_test_prefill_grid_SOURCES = tests/unit/test_prefill_grid.c
tests_unit_test_prefill_grid_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_prefill_grid_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
tests_unit_test_numfmt_SOURCES = tests/unit/test_numfmt.c
tests_unit_test_numfmt_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_numfmt_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
tests_unit_test_emulate_SOURCES = tests/unit/test_emulate.c tests/gpu/emulate_trace.c \
	tests/gpu/emulate_trace.h $(ENGINE_TEST_UTIL)
tests_unit_test_emulate_CPPFLAGS = $(TEST_CPPFLAGS) $(CJSON_CFLAGS)
tests_unit_test_emulate_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_numfmt tests/unit/test_emulate tests/unit/test_prefill_grid
# Prompt reuse and speculative decoding (issue #11).
check_PROGRAMS += tests/unit/test_reuse
tests_unit_test_reuse_SOURCES = tests/unit/test_reuse.c $(ENGINE_TEST_UTIL)
tests_unit_test_reuse_CPPFLAGS = $(TEST_CPPFLAGS) $(CJSON_CFLAGS)
tests_unit_test_reuse_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_reuse
# The engine's log callback: its lines reach the application, nothing reaches stderr.
check_PROGRAMS += tests/unit/test_engine_log
tests_unit_test_engine_log_SOURCES = tests/unit/test_engine_log.c $(ENGINE_TEST_UTIL)
tests_unit_test_engine_log_CPPFLAGS = $(TEST_CPPFLAGS) $(CJSON_CFLAGS)
tests_unit_test_engine_log_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_engine_log
EXTRA_DIST += tests/fuzz/fuzz_prompt_cache.c tests/fuzz/fuzz_cpu_snapshot.c tests/fuzz/fuzz_reuse.sh \
	tests/fuzz/fuzz_prompt_cache_dir.c tests/fuzz/fuzz_setting.c tests/fuzz/fuzz_setting.sh
check_PROGRAMS += tests/unit/test_spec
tests_unit_test_spec_SOURCES = tests/unit/test_spec.c $(ENGINE_TEST_UTIL)
tests_unit_test_spec_CPPFLAGS = $(TEST_CPPFLAGS) $(CJSON_CFLAGS)
tests_unit_test_spec_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_spec
# bench/bench_spec: drafted against plain decoding (make bench/bench_spec; not run by make check).
EXTRA_PROGRAMS += bench/bench_spec
bench_bench_spec_SOURCES = bench/bench_spec.c bench/spec_decode.c bench/spec_decode.h
bench_bench_spec_CPPFLAGS = $(TEST_CPPFLAGS) $(CJSON_CFLAGS)
bench_bench_spec_LDADD = $(glmchat_LDADD)
EXTRA_PROGRAMS += bench/bench_spec_reuse
bench_bench_spec_reuse_SOURCES = bench/bench_spec_reuse.c bench/spec_decode.c bench/spec_decode.h
bench_bench_spec_reuse_CPPFLAGS = $(TEST_CPPFLAGS) $(CJSON_CFLAGS)
bench_bench_spec_reuse_LDADD = $(glmchat_LDADD)
# the CUDA backend's memory plan (arithmetic only: runs without a GPU)
# The per-op traffic of a decode step and the Spark projection (issue 31).
check_PROGRAMS += tests/unit/test_traffic
tests_unit_test_traffic_SOURCES = tests/unit/test_traffic.c
tests_unit_test_traffic_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_traffic_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_traffic
# A prefill chunk's op groups (FLOPs, bytes) and their projection onto two Sparks (issue 36).
check_PROGRAMS += tests/unit/test_prefill_projection
tests_unit_test_prefill_projection_SOURCES = tests/unit/test_prefill_projection.c
tests_unit_test_prefill_projection_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_prefill_projection_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_prefill_projection
# bench/traffic_table: the per-op byte table of a model directory's config (make bench/traffic_table).
EXTRA_PROGRAMS += bench/traffic_table
bench_traffic_table_SOURCES = bench/traffic_table.c
bench_traffic_table_CPPFLAGS = $(TEST_CPPFLAGS) $(CJSON_CFLAGS)
bench_traffic_table_LDADD = $(glmchat_LDADD)
check_PROGRAMS += tests/unit/test_cuda_plan
tests_unit_test_cuda_plan_SOURCES = tests/unit/test_cuda_plan.c
tests_unit_test_cuda_plan_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_cuda_plan_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_cuda_plan
EXTRA_DIST += tests/fixtures/cuda/config.json
TESTS += tests/e2e/engine_cli.sh
EXTRA_DIST += tests/e2e/engine_cli.sh
EXTRA_DIST += tests/fuzz/fuzz_safetensors.c tests/fuzz/fuzz_model_config.c tools/engine/fuzz.sh
