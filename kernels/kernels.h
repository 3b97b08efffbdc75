/* kernels.h: the small C ABI in front of glmchat's CUDA kernels. Nothing above this header
 * includes CUDA headers; every function returns 0 or a CUDA error code. */
#ifndef GLMCHAT_KERNELS_H
#define GLMCHAT_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (0 when there is no driver or no GPU). */
int kern_device_count(void);

/* Fills name (n bytes) with device dev's name and compute capability ("NVIDIA H200 sm_90").
 * Returns 0, or a CUDA error code. */
int kern_device_describe(int dev, char *name, int n);

#ifdef __cplusplus
}
#endif

#endif
