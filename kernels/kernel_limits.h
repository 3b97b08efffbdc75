/* kernel_limits.h: kernel configurations chosen on the host from shared-memory limits, pure C so
 * that CI checks each choice with the sm_90 and sm_121 (DGX Spark) numbers (kernels/LIMITS.md). */
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Dynamic shared memory a block may have without an opt-in, on every device glmchat builds for
 * (sm_90: 227 KiB with the opt-in, sm_120/sm_121: 99 KiB). */
#define KERN_SMEM_DEFAULT ((size_t)48 * 1024)

/* The scalar absorbed query (eng_mla_absorb's absorb_kernel): a block takes KERN_ABSORB_TOKENS
 * tokens of one head and a range of latent columns; its KERN_ABSORB_SLICES warps take
 * interleaved slices of the dn query rows and meet in shared memory. */
#define KERN_ABSORB_TOKENS 8
#define KERN_ABSORB_SLICES 8

/* absorb_kernel's dynamic shared memory for dn query rows and a block of cols latent columns:
 * the tokens' queries and every slice's partial sums of those columns. */
static inline size_t kern_absorb_smem(int dn, int cols)
{
    return ((size_t)KERN_ABSORB_TOKENS * (size_t)dn +
            (size_t)KERN_ABSORB_SLICES * KERN_ABSORB_TOKENS * (size_t)cols) *
           sizeof(float);
}

/* The latent columns a block of absorb_kernel takes for R columns within limit bytes of shared
 * memory: R where it fits, else halves rounded up to a multiple of 64 (a warp's two columns a
 * lane; BF16's eight a lane stay inside a block when R % 8 == 0) down to 64; 0 where not even
 * 64 columns fit (the caller refuses the shape). A column's sums do not depend on the block's
 * width, so every width gives the same bits. */
static inline int kern_absorb_cols(int dn, int R, size_t limit)
{
    if (dn < 1 || R < 1)
        return 0;
    int cols = R;
    while (cols > 64 && kern_absorb_smem(dn, cols) > limit)
        cols = (cols / 2 + 63) / 64 * 64;
    return kern_absorb_smem(dn, cols) <= limit ? cols : 0;
}

#ifdef __cplusplus
}
#endif
