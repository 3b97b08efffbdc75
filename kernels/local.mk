# kernels/local.mk: CUDA kernels (*.cu) behind kernels.h, built with nvcc for $(CUDA_ARCHS).
# The GPU test and benchmark are built with the kernels; they run on a GPU machine
# (tests/gpu/run.sh), never in CI.
KERNEL_SOURCES = kernels/kernels.h kernels/kernel_limits.h kernels/device_facts.h kernels/launch.cuh \
	kernels/device.cu kernels/exl3_device.cuh \
	kernels/exl3_gemm.cu kernels/exl3_moe.cu
# the CUDA backend's kernels (engine/cuda)
KERNEL_SOURCES += kernels/engine.h kernels/engine_common.cuh kernels/engine_route.cuh \
	kernels/engine_rows.cuh kernels/engine_dot.cuh kernels/engine_rt.cu \
	kernels/engine_matmul.cu kernels/engine_ops.cu kernels/engine_kda.cu kernels/engine_index.cu \
	kernels/engine_attend.cu kernels/engine_attend_prefill.cu \
	kernels/engine_moe.cu kernels/engine_gemm.cu kernels/gemm_fp16x2.h kernels/engine_q4.cu
EXTRA_DIST += tests/gpu/spec.sh tests/gpu/lib.sh tests/gpu/test_cuda_spec.c bench/bench_cuda_spec.c
EXTRA_DIST += tests/gpu/engine.sh tests/gpu/test_cuda_engine.c bench/bench_cuda_engine.c
EXTRA_DIST += tests/gpu/exl3.sh tests/gpu/same_bits.sh tests/e2e/gpu_run_cli.sh
# the GPU entry point's options, refusals and table, where no GPU is needed (CI)
TESTS += tests/e2e/gpu_run_cli.sh
# the bundling of GPU binaries for a device run and the A/B run's refusals (CI)
EXTRA_DIST += tests/e2e/gpu_ab_cli.sh tests/gpu/pack.sh tests/gpu/ab.sh
TESTS += tests/e2e/gpu_ab_cli.sh
# the kernels' configurations chosen from shared-memory limits, with sm_90's and sm_121's (CI)
check_PROGRAMS += tests/unit/test_kernel_limits
tests_unit_test_kernel_limits_SOURCES = tests/unit/test_kernel_limits.c
tests_unit_test_kernel_limits_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_kernel_limits_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_kernel_limits
# the kernels' per-device facts: limits raised once a device from racing threads, table bounds (CI)
check_PROGRAMS += tests/unit/test_device_facts
tests_unit_test_device_facts_SOURCES = tests/unit/test_device_facts.c
tests_unit_test_device_facts_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_device_facts_LDADD = $(CHECK_LIBS)
TESTS += tests/unit/test_device_facts
# the fp16x2 products' power-of-two scaling, the header the kernels compile (CI)
check_PROGRAMS += tests/unit/test_gemm_fp16x2
tests_unit_test_gemm_fp16x2_SOURCES = tests/unit/test_gemm_fp16x2.c
tests_unit_test_gemm_fp16x2_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_gemm_fp16x2_LDADD = $(CHECK_LIBS) -lm
TESTS += tests/unit/test_gemm_fp16x2
EXTRA_DIST += $(KERNEL_SOURCES) kernels/LIMITS.md tests/gpu/run.sh tests/gpu/variants.sh tests/gpu/test_exl3_gpu.c tests/gpu/test_mla_gpu.c tests/gpu/test_index_gpu.c \
	tests/gpu/test_gemm_rows.c tests/gpu/test_decode_gpu.c tests/gpu/test_kda_gpu.c tests/gpu/test_hc_gpu.c \
	tests/gpu/test_devices_gpu.c tests/gpu/gpu_test.h bench/bench_exl3.cu
# the CUDA backend's lossy modes against the CPU backend's emulation (tests/gpu/engine.sh runs
# it); built in every configuration so CI compiles it, run only where a GPU is
check_PROGRAMS += tests/gpu/test_cuda_emulate
tests_gpu_test_cuda_emulate_SOURCES = tests/gpu/test_cuda_emulate.c tests/gpu/emulate_trace.c \
	tests/gpu/emulate_trace.h tests/gpu/emulate_noise.c tests/gpu/emulate_noise.h
tests_gpu_test_cuda_emulate_LDADD = $(glmchat_LDADD)
# emulate_noise.c's noise on the CPU backend's products (a one-part mode's own floor)
tests_gpu_test_cuda_emulate_LDFLAGS = -Wl,--wrap=cpu_matmul
# its CPU side (the noise floor's machinery) where no GPU is (CI)
TESTS += tests/e2e/emulate_noise.sh
EXTRA_DIST += tests/e2e/emulate_noise.sh
EXTRA_DIST += tests/gpu/cuda_env.h
if HAVE_CUDA
noinst_LIBRARIES += libkernels.a
libkernels_a_SOURCES = $(KERNEL_SOURCES)
glmchat_LDADD += libkernels.a $(CUDA_LIBS)
SUFFIXES = .cu
NVCCFLAGS = -std=c++17 -O3 $(NVCC_GENCODE) -Xcompiler -Wall,-Wextra,-Werror -I$(top_srcdir) -I$(top_srcdir)/kernels
.cu.o:
	$(AM_V_GEN)$(NVCC) $(NVCCFLAGS) -c -o $@ $<
# the suffix rule tracks no includes: every kernel object is rebuilt when a kernel header changes
# (a stale object against a changed header ran with the wrong layouts on the H200, 2026-12-03)
KERNEL_INCLUDES = kernels/kernels.h kernels/kernel_limits.h kernels/device_facts.h kernels/launch.cuh kernels/engine.h kernels/engine_common.cuh kernels/exl3_device.cuh \
	kernels/engine_route.cuh kernels/engine_rows.cuh kernels/engine_dot.cuh kernels/gemm_fp16x2.h
$(libkernels_a_OBJECTS) bench/bench_exl3.$(OBJEXT) tests/unit/test_exl3_pairs.$(OBJEXT) \
	tests/gpu/exl3_grouped_ref.$(OBJEXT): \
	$(KERNEL_INCLUDES)

# the MoE strips' paired-products decode (products_k4_pairs) against states_k4's states, on the
# host: nvcc-built, no GPU needed, so it runs in CI
check_PROGRAMS += tests/unit/test_exl3_pairs
tests_unit_test_exl3_pairs_SOURCES = tests/unit/test_exl3_pairs.cu
tests_unit_test_exl3_pairs_LDADD = $(CUDA_LIBS)
tests_unit_test_exl3_pairs_LINK = $(CC) $(CFLAGS) -o $@
TESTS += tests/unit/test_exl3_pairs
# the grouped experts' workspace as the kernels carve it against the memory plan's count, on the
# host: no GPU needed, so it runs in CI
check_PROGRAMS += tests/unit/test_exl3_workspace
tests_unit_test_exl3_workspace_SOURCES = tests/unit/test_exl3_workspace.c
tests_unit_test_exl3_workspace_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_exl3_workspace

check_PROGRAMS += tests/gpu/test_exl3_gpu bench/bench_exl3
tests_gpu_test_exl3_gpu_SOURCES = tests/gpu/test_exl3_gpu.c tests/gpu/exl3_grouped_ref.cu
tests_gpu_test_exl3_gpu_LDADD = $(glmchat_LDADD)
# the prefill latent attention and its products against the scalar kernels
check_PROGRAMS += tests/gpu/test_mla_gpu
tests_gpu_test_mla_gpu_SOURCES = tests/gpu/test_mla_gpu.c
tests_gpu_test_mla_gpu_LDADD = $(glmchat_LDADD)
# the indexer's top-k against the CPU's rule, its scores against fp64, times against the previous one
check_PROGRAMS += tests/gpu/test_index_gpu
tests_gpu_test_index_gpu_SOURCES = tests/gpu/test_index_gpu.c
tests_gpu_test_index_gpu_LDADD = $(glmchat_LDADD)
# the dense prefill products: a row's bits whatever the chunk, and their time against cuBLAS's default
check_PROGRAMS += tests/gpu/test_gemm_rows
tests_gpu_test_gemm_rows_SOURCES = tests/gpu/test_gemm_rows.c
tests_gpu_test_gemm_rows_LDADD = $(glmchat_LDADD)
bench_bench_exl3_SOURCES = bench/bench_exl3.cu
bench_bench_exl3_LDADD = libkernels.a $(CUDA_LIBS)
bench_bench_exl3_LINK = $(CC) $(CFLAGS) -o $@

# the decode step's kernels at the real shapes: references, row invariance, times
check_PROGRAMS += tests/gpu/test_decode_gpu
tests_gpu_test_decode_gpu_SOURCES = tests/gpu/test_decode_gpu.c
tests_gpu_test_decode_gpu_LDADD = $(glmchat_LDADD)
# the KDA prefill kernels bit for bit against C references and the decode path, the decode step's
# two forms against each other; their times
check_PROGRAMS += tests/gpu/test_kda_gpu
tests_gpu_test_kda_gpu_SOURCES = tests/gpu/test_kda_gpu.c
tests_gpu_test_kda_gpu_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_gpu_test_kda_gpu_LDADD = $(glmchat_LDADD)
# the prefill path's fused HC kernels against double sums, a row's bits at any chunk size, times
check_PROGRAMS += tests/gpu/test_hc_gpu
tests_gpu_test_hc_gpu_SOURCES = tests/gpu/test_hc_gpu.c
tests_gpu_test_hc_gpu_LDADD = $(glmchat_LDADD)
# the launches that depend on the device from two threads a device on every device: the same bits
check_PROGRAMS += tests/gpu/test_devices_gpu
tests_gpu_test_devices_gpu_SOURCES = tests/gpu/test_devices_gpu.c
tests_gpu_test_devices_gpu_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_gpu_test_devices_gpu_LDADD = $(glmchat_LDADD)
# the CUDA backend against the CPU one, and its benchmark (tests/gpu/engine.sh runs both)
check_PROGRAMS += tests/gpu/test_cuda_engine bench/bench_cuda_engine
tests_gpu_test_cuda_engine_SOURCES = tests/gpu/test_cuda_engine.c bench/op_profile.c \
	bench/op_profile.h bench/op_marks.h
tests_gpu_test_cuda_engine_LDADD = $(glmchat_LDADD)
bench_bench_cuda_engine_SOURCES = bench/bench_cuda_engine.c bench/decode_tables.c bench/decode_tables.h \
	bench/op_profile.c bench/op_profile.h bench/op_marks.h \
	bench/long_prefill.c bench/long_prefill.h
bench_bench_cuda_engine_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
bench_bench_cuda_engine_LDADD = $(glmchat_LDADD) -lcublas

# prompt reuse and drafted decoding on the CUDA backend, and their benchmark (tests/gpu/spec.sh)
check_PROGRAMS += tests/gpu/test_cuda_spec bench/bench_cuda_spec
tests_gpu_test_cuda_spec_SOURCES = tests/gpu/test_cuda_spec.c tests/unit/test_engine_util_draft.c \
	tests/unit/test_engine_util.h
tests_gpu_test_cuda_spec_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests/unit
tests_gpu_test_cuda_spec_LDADD = $(glmchat_LDADD)
bench_bench_cuda_spec_SOURCES = bench/bench_cuda_spec.c bench/spec_decode.c bench/spec_decode.h
bench_bench_cuda_spec_LDADD = $(glmchat_LDADD)
endif
