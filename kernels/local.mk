# kernels/local.mk: CUDA kernels (*.cu) behind kernels.h, built with nvcc for $(CUDA_ARCHS).
EXTRA_DIST += kernels/kernels.h kernels/device.cu
if HAVE_CUDA
noinst_LIBRARIES += libkernels.a
libkernels_a_SOURCES = kernels/kernels.h kernels/device.cu
glmchat_LDADD += libkernels.a $(CUDA_LIBS)
SUFFIXES = .cu
NVCCFLAGS = -std=c++17 -O3 $(NVCC_GENCODE) -Xcompiler -Wall,-Wextra,-Werror -I$(top_srcdir) -I$(top_srcdir)/kernels
.cu.o:
	$(AM_V_GEN)$(NVCC) $(NVCCFLAGS) -c -o $@ $<
endif
