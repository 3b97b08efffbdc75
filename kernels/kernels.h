/* kernels.h: the small C ABI in front of glmchat's CUDA kernels. Nothing above this header
 * includes CUDA headers; every function returns 0 or a CUDA error code. */
#ifndef GLMCHAT_KERNELS_H
#define GLMCHAT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (0 when there is no driver or no GPU). */
int kern_device_count(void);

/* Fills name (n bytes) with device dev's name and compute capability ("NVIDIA H200 sm_90").
 * Returns 0, or a CUDA error code. */
int kern_device_describe(int dev, char *name, int n);
/* Device dev's compute capability as one number (major x 10 + minor: 90, 121) into *cc.
 * Returns 0, or a CUDA error code. */
int kern_device_capability(int dev, int *cc);

/* 0 when this build's kernels carry code the current device runs; else the CUDA error
 * (cudaErrorNoKernelImageForDevice: built for other architectures than this GPU's, see
 * configure's CUDA_ARCHS). */
int kern_device_runs_build(void);
/* The CUDA codes kern_device_runs_build gives for a build without this GPU's architecture
 * (cudaErrorNoKernelImageForDevice, cudaErrorInvalidDeviceFunction), for callers without CUDA's
 * headers; device.cu checks them against the runtime's enum. */
#define KERN_ERR_NO_KERNEL_IMAGE 209
#define KERN_ERR_INVALID_DEVICE_FUNCTION 98

/* 1 when the kernels go out as programmatic dependent launches (kernels/launch.cuh): the
 * default; kern_set_pdl(0) (the engine's cuda.pdl_off) turns them into plain stream-ordered
 * launches, for measuring one against the other. Process-wide. */
int kern_pdl(void);
void kern_set_pdl(int on);

/* Where the kernels' messages go (the engine passes its glm_log_fn; levels as glm_log_level:
 * 0 error, 1 warning, 2 information, 3 debug). fn NULL: dropped. Process-wide; kernels never
 * write to stdout or stderr themselves. */
typedef void (*kern_log_fn)(void *user, int level, const char *msg);
void kern_set_log(kern_log_fn fn, void *user);
/* The current hook, so that an engine closing can tell whether it is still its own. */
void *kern_log_user(void);
/* Formats one line and hands it to the hook (kernels' own use). */
void kern_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- device memory (for callers without CUDA headers: tests, benches, the engine) ------- */

/* cudaMalloc / cudaFree / cudaMemcpy (host<->device) / cudaDeviceSynchronize. */
int kern_malloc(void **ptr, size_t bytes);
void kern_free(void *ptr);
int kern_to_device(void *dst, const void *src, size_t bytes);
int kern_to_host(void *dst, const void *src, size_t bytes);
int kern_memset(void *dst, int byte, size_t bytes);
int kern_sync(void);
/* The text of a code these functions returned. */
const char *kern_error_string(int code);

/* ---- EXL3 linear layers (exl3_gemm.cu) -------------------------------------------------- */

/* One EXL3 linear on the device, in the on-disk layout (research/exl3.md): in and out
 * multiples of 128, bits 1..8, codebook 0 = 3INST, 1 = MCG, 2 = MUL1. bias may be NULL. */
typedef struct kern_exl3_linear {
    int in, out, bits, codebook;
    const void *trellis; /* uint16 [in/16][out/16][16*bits] */
    const void *suh;     /* fp16 [in] */
    const void *svh;     /* fp16 [out] */
    const void *bias;    /* fp16 [out] or NULL */
} kern_exl3_linear;

/* Bytes of device scratch kern_exl3_matmul needs for this layer and any row count up to rows
 * (the same on every device). */
size_t kern_exl3_matmul_workspace(const kern_exl3_linear *l, int rows);

/* y[rows][out] = x[rows][in] W^T (+ bias), f32 in and out, straight from the trellis: batch-1
 * GEMV and few-row GEMM for rows <= 16, the prefill GEMM (tiles decoded into shared memory,
 * tensor cores) above. work: kern_exl3_matmul_workspace bytes. stream: a cudaStream_t or NULL.
 * Deterministic, no float atomics. Bits: a row's output is bit for bit the same at every row
 * count 1..16 (GEMV path), and the same at every row count above 16 (prefill path), whatever
 * its position and the other rows; the two paths give different bits for the same row (other
 * k splits and decode forms), so a caller that needs a token's bits to repeat must keep the
 * token on one side of 16 rows. Returns 0, a CUDA error code, or -1 for arguments out of range. */
int kern_exl3_matmul(const kern_exl3_linear *l, const float *x, float *y, int rows, void *work,
                     void *stream);

/* ---- EXL3 routed experts (exl3_moe.cu) -------------------------------------------------- */

/* A layer's routed experts, stacked: gate and up [n_experts] x (hidden -> inter), down
 * [n_experts] x (inter -> hidden), one bit width and codebook. swiglu_limit: GLM's clamp. */
typedef struct kern_exl3_experts {
    int n_experts, hidden, inter, bits, codebook;
    float swiglu_limit;
    const void *gate_trellis, *up_trellis, *down_trellis;
    const void *gate_suh, *gate_svh, *up_suh, *up_svh, *down_suh, *down_svh; /* fp16 [E][..] */
} kern_exl3_experts;

#define KERN_EXL3_MOE_MAX_PAIRS 256 /* rows * slots of one decode call */

/* Bytes of device scratch for up to rows * slots <= KERN_EXL3_MOE_MAX_PAIRS (row, expert)
 * pairs; zero it once (kern_memset) before the first call: calls leave it zeroed. */
size_t kern_exl3_moe_workspace(const kern_exl3_experts *ex, int rows, int slots);

/* The routed-expert MLP of `rows` tokens in one launch: y[r] = sum_s weights[r][s] *
 * down(min(gate x, L) silu-gated * clamp(up x, -L, L)) over experts ids[r][s]. x, y f32
 * [rows][hidden]; ids int32, weights f32 [rows][slots]. Pairs sharing an expert read its
 * weights once. Ids outside 0..n_experts-1 contribute nothing (a row with none: zeros).
 * Deterministic and batch-invariant: row r's bits depend only on x[r], ids[r] and weights[r]
 * (not on rows, r's place, or which other rows share its experts); the slots are summed in slot
 * order. Its bits differ from kern_exl3_moe_prefill's for the same row (another GEMM), so a
 * token keeps its bits only while it stays on the same kernel. */
int kern_exl3_moe(const kern_exl3_experts *ex, const float *x, const int32_t *ids,
                  const float *weights, float *y, int rows, int slots, void *work,
                  void *stream);

/* The routed experts of a prefill chunk (rows > 8): the (row, slot) pairs are grouped by expert
 * on the device (a stable counting sort), each selected expert's gate/up and down run once over
 * all its rows on tensor cores (weights decoded once per pass of 64 or 128 rows, the whole k
 * range in one block), and each row then sums its slots in slot order. So it is deterministic and
 * batch-invariant too: a row's bits do not depend on the chunk's size, the row's place, or how
 * many other rows chose its experts (any rows >= 1). Same arguments and result as
 * kern_exl3_moe, without its pair limit (rows <= 65535, rows * slots <= 2^24); hidden and inter multiples of
 * 128. work: kern_exl3_moe_prefill_workspace bytes (no zeroing needed); work and the trellises
 * 16-byte aligned (as cudaMalloc's are), else -1. */
size_t kern_exl3_moe_prefill_workspace(const kern_exl3_experts *ex, int rows, int slots);
/* Its bytes from the shapes alone (the memory plan counts them without a GPU): the sort tables
 * (offsets, three pair tables, the experts by rows) and each pair's fp16 gate, up and down inputs
 * and f32 gate and up products, each from a 256-byte boundary; the down product's f32 results
 * take the gate and up inputs' room. kern_exl3_moe_prefill refuses a workspace carved otherwise. */
static inline size_t kern_exl3_moe_prefill_bytes(int experts, int hidden, int inter, int rows,
                                                 int slots)
{
    size_t P = (size_t)rows * (size_t)slots, H = (size_t)hidden, I = (size_t)inter;
    size_t E = (size_t)experts, a = 255;
    return (((E + 1) * 4 + a) & ~a) + 3 * ((P * 4 + a) & ~a) + ((E * 4 + a) & ~a) +
           2 * ((P * H * 2 + a) & ~a) + ((P * I * 2 + a) & ~a) + 2 * ((P * I * 4 + a) & ~a);
}
/* The grouped products' kernel, process-wide (benches and tests compare them; both give the same
 * bits). Both stream activations and trellis words through a 4-stage cp.async ring, each warp
 * decoding the weight tiles it multiplies once, in registers (4 warps of two 16-column tiles, each
 * activation fragment serving both): PIPE_64 takes 64 rows of an expert a pass, PIPE_128_ONCE
 * 128 (each tile decoded once for all 128 rows). AUTO (the default):
 * PIPE_128_ONCE where the experts get 67 rows each on average (routed rows are uneven), else
 * PIPE_64. Returns -1 for
 * another value. */
enum {
    KERN_EXL3_GROUPED_AUTO = 0,
    KERN_EXL3_GROUPED_PIPE_64,
    KERN_EXL3_GROUPED_PIPE_128_ONCE
};
int kern_exl3_set_grouped(int variant);
int kern_exl3_grouped(void);
/* The grouped products alone, with the kernel kern_exl3_set_grouped names (tests and benches):
 * z[pos] = xh[pos] W_e for pos in offsets[e] .. offsets[e+1]-1 of every expert e < n_experts,
 * W_e the decoded (unrotated) weights of expert e: trellis [n_experts][in/16][out/16][16 bits]
 * uint16 words. xh fp16 [pairs][in], z f32 [pairs][out], offsets int [n_experts+1] (device; a
 * stable sort's, offsets[n_experts] == pairs); in and out multiples of 128; trellis and xh
 * 16-byte aligned. Plain stores, no atomics: a row's bits do not depend on the other rows. */
int kern_exl3_grouped_product(const void *trellis, int bits, int codebook, int in, int out,
                              int n_experts, const int *offsets, int pairs, const void *xh,
                              float *z, void *stream);
int kern_exl3_moe_prefill(const kern_exl3_experts *ex, const float *x, const int32_t *ids,
                          const float *weights, float *y, int rows, int slots, void *work,
                          void *stream);

#ifdef __cplusplus
}
#endif

#endif
