/* engine.h: the C ABI of the CUDA backend's kernels (kernels/engine_*.cu): matrices, norms,
 * hyper-connections, KDA, DSA with its indexer, router and MoE, plus streams and graphs. */
#ifndef GLMCHAT_KERNELS_ENGINE_H
#define GLMCHAT_KERNELS_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every function returns 0 or a CUDA error code (-1: arguments out of range). stream is a
 * cudaStream_t or NULL. Activations are f32 on the device; positions are device ints so a
 * captured decode step replays at any length. */

/* ---- streams, graphs, timing (engine_rt.cu) --------------------------------------------- */
int eng_stream_new(void **stream);
void eng_stream_free(void *stream);
int eng_stream_sync(void *stream);
int eng_copy_async(void *dst, const void *src, size_t bytes, void *stream); /* any direction */
/* rows rows of width bytes, dst and src strided by their pitches (bytes); any direction. */
int eng_copy_2d(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
                size_t rows, void *stream);
int eng_host_alloc(void **ptr, size_t bytes); /* pinned */
void eng_host_free(void *ptr);
int eng_capture_begin(void *stream);
int eng_capture_end(void *stream, void **graph_exec); /* instantiates */
/* eng_capture_end that also keeps the captured graph (*graph: a cudaGraph_t, for walking its
 * nodes; free it with eng_graph_destroy). */
int eng_capture_end_keep(void *stream, void **graph, void **graph_exec);
void eng_graph_destroy(void *graph);
int eng_graph_launch(void *graph_exec, void *stream);
void eng_graph_free(void *graph_exec);
int eng_mem_info(size_t *free_bytes, size_t *total_bytes);
int eng_device_integrated(void); /* 1: the GPU shares the host's memory (GB10) */
int eng_last_error(void); /* and clears it */
int eng_event_new(void **ev);
void eng_event_free(void *ev);
int eng_event_record(void *ev, void *stream);
int eng_event_ms(void *start, void *end, float *ms); /* syncs end */
/* eng_event_record, but during a stream capture the record becomes an event record node of the
 * graph (cudaEventRecordExternal), which every replay records with its time: timing inside a
 * graph. Outside a capture it is a plain record. ev must be an eng_event_new event. */
int eng_event_record_node(void *ev, void *stream);
/* An event for ordering streams only (no timing): record it on one stream, make another wait
 * for it with eng_stream_wait; both also order a graph's capture (a fork and a join). */
int eng_fence_new(void **ev);
int eng_stream_wait(void *stream, void *ev);
/* Waits on the host until the work before ev's last record has run (a record not yet made:
 * returns at once). */
int eng_event_sync(void *ev);

/* ---- matrices (engine_matmul.cu) --------------------------------------------------------- */
typedef enum eng_dtype { ENG_F32 = 0, ENG_BF16 = 1, ENG_F16 = 2, ENG_FP8 = 3, ENG_Q4 = 4 } eng_dtype;

/* A dense matrix [rows][cols] (Hugging Face orientation: out, in) in device memory. FP8: e4m3
 * values times scale[r / block_rows][c / block_cols] (scale_cols per scale row). Q4 (the dense
 * weights requantized at load, engine_q4.cu): w = (n - 8) * s with n a 4-bit code and s the fp16
 * scale of its group of 32 consecutive columns (gscale); cols a multiple of 128; the codes and
 * scales of a row are interleaved as eng_q4_offsets says. */
typedef struct eng_mat {
    int dtype, rows, cols;
    const void *data;
    const float *scale;
    int scale_cols, block_rows, block_cols;
    const uint16_t *gscale; /* Q4: rows * cols / 32 fp16 scales */
} eng_mat;

/* Q4 layout: a row's 128-column tiles go in runs of up to 8 (tiles t = 8r .. 8r + n - 1); column
 * c = 128 t + 4 l + i (lane l < 32, i < 4) is the (i % 2 ? high : low) nibble of byte
 * 512 r + 2 n l + 2 (t - 8 r) + i / 2 of the row (cols / 2 bytes), and the scale of its group
 * c / 32 is fp16 number 32 r + n (l / 8) + (t - 8 r) of the row's cols / 32. Writes the byte
 * offset and the scale index within the row for column c. */
#ifdef __CUDACC__
#define ENG_HOST_DEVICE __host__ __device__
#else
#define ENG_HOST_DEVICE
#endif
static inline ENG_HOST_DEVICE void eng_q4_offsets(int cols, int c, size_t *byte, size_t *scale)
{
    int t = c / 128, l = (c % 128) / 4, i = c % 4, r = t / 8, j = t % 8;
    int tiles = cols / 128, n = tiles - 8 * r < 8 ? tiles - 8 * r : 8;
    *byte = (size_t)512 * r + (size_t)2 * n * l + (size_t)2 * j + (size_t)(i / 2);
    *scale = (size_t)32 * r + (size_t)n * (l / 8) + (size_t)j;
}

/* Quantizes the BF16 (or F32) matrix src into dst (ENG_Q4, same shape) on the GPU: per group of
 * 32 columns s = fp16(max |w| / 7), n = 8 + clamp(round(w / s), -7, 7) (s 0: n 8). codes:
 * rows * cols / 2 bytes, scales: rows * cols / 32 fp16, both device memory. -1 unless BF16 or
 * F32 with cols % 128 == 0. */
int eng_quantize_q4(const eng_mat *src, void *codes, uint16_t *scales, eng_mat *dst, void *stream);

/* Several products of T <= 8 rows in one launch (the decode step's products that share an input
 * or have no dependency). Each job: y[t][r] (+)= sum_c x[t][c] W[r][c]; with w2 (same shape)
 * y = silu(min(W x, L)) * clamp(W2 x, -L, L) (SwiGLU, L = limit) instead; accumulate adds
 * into y. Every output is one warp-ordered sum (no atomics): results do not depend on timing. */
#define ENG_MAX_JOBS 8
typedef struct eng_gemv_job {
    const eng_mat *w, *w2;
    const float *x;
    float *y;
    float limit;
    int accumulate;
} eng_gemv_job;
int eng_matmul_jobs(const eng_gemv_job *jobs, int n, int T, void *stream);

/* y[t][r] = sum_c x[t][c] W[r][c] for t < T. */
int eng_matmul(const eng_mat *w, const float *x, int T, float *y, void *stream);
/* eng_matmul through the GEMV for any T (groups of 8 tokens): each row's bits equal those of a
 * T = 1 product, which the larger-T GEMM paths do not promise (verification windows). */
int eng_matmul_rowwise(const eng_mat *w, const float *x, int T, float *y, void *stream);
/* out[t][:] = row tokens[t] of w as f32 (the embedding), copied into each of `copies` rows:
 * out[(t * copies + k) * cols ...]. */
int eng_embed(const eng_mat *w, const int32_t *tokens, int T, int copies, float *out, void *stream);
/* Element (r, c) of w, for tests: writes one float. */
int eng_mat_element(const eng_mat *w, int r, int c, float *out_dev, void *stream);

/* ---- products of many rows through cuBLASLt (engine_gemm.cu) ---------------------------- */
#define ENG_GEMM_MIN_ROWS 8                   /* eng_matmul's GEMV path takes up to 8 rows */
#define ENG_GEMM_WORKSPACE ((size_t)32 << 20) /* cuBLAS workspace, one per stream */
/* A BF16 weight of at most ENG_GEMM_CONCAT_COLS columns whose three copies side by side fit
 * ENG_GEMM_CONCAT_BYTES (6 * rows * cols) runs its three parts as one GEMM over 3 * cols (see
 * eng_gemm); one buffer of those bytes per stream. */
#define ENG_GEMM_CONCAT_COLS 512
#define ENG_GEMM_CONCAT_BYTES ((size_t)16 << 20)
/* The fixed modes run a BF16 weight whose fp16 copy (2 * rows * cols bytes; 4 * for the narrow
 * ones above, twice side by side) fits this as two fp16 parts, one buffer of it per stream (grown
 * on first use); a larger one (an LM head) runs as three bf16 parts. It holds every dense weight
 * of GLM-5.3-Flash (the largest, the MLA output's 4096 x 16384, exactly). */
#define ENG_GEMM_HALF_BYTES ((size_t)128 << 20)
/* Whether a BF16 weight of rows x cols is narrow (its parts run as one GEMM side by side). */
static inline ENG_HOST_DEVICE int eng_gemm_narrow(int64_t rows, int64_t cols)
{
    return cols <= ENG_GEMM_CONCAT_COLS && 6 * (size_t)rows * (size_t)cols <= ENG_GEMM_CONCAT_BYTES;
}
/* The bytes of a BF16 weight's fp16 copy (twice side by side for a narrow one), and whether the
 * fp16 forms take the weight: the copy fits ENG_GEMM_HALF_BYTES (the CPU backend's emulation of
 * the one-part form asks the same). */
static inline ENG_HOST_DEVICE size_t eng_gemm_half_copy_bytes(int64_t rows, int64_t cols)
{
    return (eng_gemm_narrow(rows, cols) ? 4 : 2) * (size_t)rows * (size_t)cols;
}
static inline ENG_HOST_DEVICE int eng_gemm_half_takes(int64_t rows, int64_t cols)
{
    return eng_gemm_half_copy_bytes(rows, cols) <= ENG_GEMM_HALF_BYTES;
}
/* Whether eng_gemm takes this matrix at T rows: BF16 or F32 weights, T > ENG_GEMM_MIN_ROWS. */
int eng_gemm_takes(const eng_mat *w, int T);
/* y = x W^T through cuBLASLt, f32 accumulation, F32 weights in f32. A BF16 weight whose fp16 copy
 * fits ENG_GEMM_HALF_BYTES runs against two fp16 parts of x (about 22 bits of each input): the
 * weight scaled by one power of two into fp16 (exact for all but its tiniest values; Inf and NaN
 * kept out of the scale), each row of x by its own power of two into hi + lo, one pass scaling y's
 * rows back; a narrow one (ENG_GEMM_CONCAT_COLS) as one GEMM of [W' W'] against each row's
 * [lo hi], any other as two GEMMs accumulated in y, lo first. Any other BF16 weight runs against a
 * hi + mid + lo bf16 split of x (about 24 bits), narrow ones (ENG_GEMM_CONCAT_BYTES) as one GEMM
 * of [W W W] against [lo mid hi], others as three GEMMs, lo first. One algorithm per weight shape
 * and form (chosen at 1024 rows, checked at each T; split-K only with an out-of-place
 * reduction), so a row's bits do not depend on T or its place in the chunk. Each stream holds a
 * handle, ENG_GEMM_WORKSPACE bytes, a split buffer (6 * T * cols bytes plus 768 of alignment for
 * three parts, 4 * T * cols + 4 * T plus 1 KiB for two), the fp16 copy (ENG_GEMM_HALF_BYTES at
 * most) and for narrow three-part weights ENG_GEMM_CONCAT_BYTES (all grown on first use). */
int eng_gemm(const eng_mat *w, const float *x, int T, float *y, void *stream);
/* Frees what eng_gemm holds for this stream (eng_stream_free calls it). */
void eng_gemm_forget_stream(void *stream);
/* How eng_gemm picks its algorithm, process-wide (the engine's cuda.gemm): the fixed algorithms
 * (the default); the same with each shape's choice logged when made (kern_log, debug); fixed
 * algorithms without split-K (a second fixed choice to compare with); cublasGemmEx's own choice
 * over three bf16 parts (the former path, for comparison only: its row bits depend on T); the
 * fixed algorithms with every BF16 weight as three bf16 parts (the form the weights over
 * ENG_GEMM_HALF_BYTES take, for every weight: to compare the two forms); the fixed algorithms
 * with the two-part weights against one fp16 part of each input row, the hi part (lossy:
 * numfmt_one_part_row is its value on the host). */
enum { ENG_GEMM_FIXED = 0, ENG_GEMM_SHOW, ENG_GEMM_CUBLAS, ENG_GEMM_NOSPLIT, ENG_GEMM_THREE,
       ENG_GEMM_ONEPART };
/* 0, or -1 for a mode not above (the mode is then left as it was). */
int eng_gemm_set_mode(int mode);
/* 1 while the mode is ENG_GEMM_ONEPART (the products' numbers differ there, not only the time). */
int eng_gemm_one_part(void);

/* ---- norms and elementwise (engine_ops.cu) ----------------------------------------------- */
/* Per row of n: out = w * x / sqrt(mean(x^2) + eps) (w NULL: 1). rows may be strided by ld. */
int eng_rmsnorm(float *out, const float *x, const float *w, int rows, int n, float eps,
                void *stream);
/* out = (x - mean) / sqrt(var + eps) * w + b per row. */
int eng_layernorm(float *out, const float *x, const float *w, const float *b, int rows, int n,
                  float eps, void *stream);
/* g[i] = silu(min(g, L)) * clamp(u, -L, L). */
int eng_swiglu(float *g, const float *u, size_t n, float limit, void *stream);
int eng_add(float *y, const float *x, size_t n, void *stream); /* y += x */
/* Mean over S streams then RMSNorm with w: X [T][S][D] -> h [T][D]. */
int eng_stream_mean_norm(float *h, const float *X, const float *w, int T, int S, int D, float eps,
                         void *stream);

/* ---- hyper-connections (engine_ops.cu) --------------------------------------------------- */
/* Most column blocks of the decode path's HC step (D <= 32 * ENG_HC_MAX_SPLITS / S). */
#define ENG_HC_MAX_SPLITS 256
/* The decode path's HC step before a sublayer (T <= 8). eng_hc_fn_partial splits the hidden
 * positions over eng_hc_splits(S, D) blocks (-1: too many; S * D <= 32768 fits):
 * part[t][b][r] = block b's partial product of X[t] with fn row r < fn->rows,
 * part[t][b][fn->rows] its partial sum of squares; with y (else NULL) it first applies the
 * previous sublayer's update (eng_hc_post with y2, post, comb) to X. From the parts, summed in
 * block order and scaled by the RMS of X[t]: eng_hc_collapse_norm collapses the streams and
 * RMS-norms with norm into u (D <= 10240), with pre; eng_hc_sinkhorn mixes (Sinkhorn, as
 * eng_hc_mix) into post and comb. Only the next update reads post and comb, so the caller may
 * run the mix on a side stream and join it before that update. */
int eng_hc_splits(int S, int D);
int eng_hc_fn_partial(const eng_mat *fn, float *X, int T, int S, int D, const float *y,
                      const float *y2, const float *post, const float *comb, float *part,
                      void *stream);
int eng_hc_collapse_norm(const float *part, int mix_rows, const float *X, const float *base,
                         const float *scale, const float *norm, int T, int S, int D, float hc_eps,
                         float rms_eps, float *pre, float *u, void *stream);
int eng_hc_sinkhorn(const float *part, int mix_rows, const float *base, const float *scale, int T,
                    int S, int D, int iters, float hc_eps, float rms_eps, float *post, float *comb,
                    void *stream);
/* From mu [T][(2+S)*S] (the fn product of the normed flat streams): pre [T][S], post [T][S],
 * comb [T][S][S] with Sinkhorn; S <= 16. */
int eng_hc_mix(const float *mu, const float *base, const float *scale, int T, int S, int iters,
               float eps, float *pre, float *post, float *comb, void *stream);
/* out[t][d] = sum_s pre[t][s] X[t][s][d]. */
int eng_hc_collapse(const float *X, const float *pre, int T, int S, int D, float *out, void *stream);
/* X[t][j] = post[t][j] y[t] + sum_i comb[t][i][j] X[t][i]; with y2 (else NULL) the sublayer's
 * output is y[t] + y2[t], added here in the bits eng_add(y, y2) gives (the decode MoE's routed and
 * shared parts, summed without a launch of their own). Past the decode path's 8 rows with S 4 and
 * 16-byte aligned rows it runs four positions a thread, the same operations in the same order. */
int eng_hc_post(float *X, const float *y, const float *y2, const float *post, const float *comb,
                int T, int S, int D, void *stream);
/* The prefill path's HC input norm and mixing product in one pass over X [T][S * D]:
 * mu[t][r] = sum_c X[t][c] fn[r][c] / sqrt(mean_c(X[t][c]^2) + eps), what eng_rmsnorm (no
 * weight) then eng_matmul compute, in another order; each row's bits depend on that row alone
 * (not on T). Takes only what eng_hc_norm_mix_takes accepts (fn f32, or bf16 as checkpoints
 * store it, unscaled, of (2 + S) * S = 24 rows, S * D a multiple of 256); X 16-byte aligned. work: T * eng_hc_norm_mix_work(S, D) floats
 * (the column parts' sums; at most 200 a row). */
int eng_hc_norm_mix_takes(const eng_mat *fn, int S, int D);
size_t eng_hc_norm_mix_work(int S, int D);
int eng_hc_norm_mix(const eng_mat *fn, const float *X, int T, int S, int D, float eps, float *work,
                    float *mu, void *stream);
/* The prefill path's eng_hc_collapse then eng_rmsnorm (weight norm, NULL: 1) in one launch:
 * u[t] = RMSNorm(sum_s pre[t][s] X[t][s]); a row's bits depend on that row alone. D <= 10240
 * (eng_hc_collapse_rmsnorm_takes). */
int eng_hc_collapse_rmsnorm_takes(int D);
int eng_hc_collapse_rmsnorm(const float *X, const float *pre, const float *norm, int T, int S,
                            int D, float eps, float *u, void *stream);

/* ---- KDA (engine_kda.cu) ----------------------------------------------------------------- */
/* Causal depthwise conv over [state (K-1 rows of 3C) | q k v rows], SiLU, into qo ko vo (C =
 * H * dk, dk <= 128, K <= 17); then per head of dk: qo <- qo * qscale / |qo|, ko <- ko / |ko|
 * (eps 1e-6 under the root); then the state keeps the last K-1 rows. conv weights [C][K] each. */
int eng_kda_conv_norm(const float *q, const float *k, const float *v, float *state,
                      const float *qw, const float *kw, const float *vw, int T, int H, int dk,
                      int K, float qscale, float *qo, float *ko, float *vo, void *stream);
/* g <- lb * sigmoid(exp(A_log) (g + dt_bias)) when has_lb, else -exp(A_log) softplus(g +
 * dt_bias); beta <- sigmoid(beta). g [T][H*dk], beta [T][H]. */
int eng_kda_gate(float *g, float *beta, const float *A_log, const float *dt_bias, int T, int H,
                 int dk, int has_lb, float lb, void *stream);
/* Decode (T <= 8, K <= 8, dk <= 128): eng_kda_conv_norm and eng_kda_gate in one launch, with
 * the same results (C = H * dk). The decode path runs eng_kda_step_decode; this
 * launch and eng_kda_scan_norm are the two that tests/gpu/test_decode_gpu checks it against. */
int eng_kda_prep_decode(const float *q, const float *k, const float *v, float *state,
                        const float *qw, const float *kw, const float *vw, int T, int H, int dk,
                        int K, float qscale, float *qo, float *ko, float *vo, float *g, float *beta,
                        const float *A_log, const float *dt_bias, int has_lb, float lb,
                        void *stream);
/* The delta rule over T tokens, token by token (S [H][dk][dv] f32, dk = dv <= 128). */
int eng_kda_scan(float *S, const float *q, const float *k, const float *v, const float *g,
                 const float *beta, int T, int H, int dk, float *o, void *stream);
/* eng_kda_scan that also writes the state after each token t into trail + t*H*dk*dk (trail NULL:
 * eng_kda_scan); the verification windows of drafted decoding go back to any of them. */
int eng_kda_scan_trail(float *S, const float *q, const float *k, const float *v, const float *g,
                       const float *beta, int T, int H, int dk, float *o, float *trail,
                       void *stream);
/* The conv window before a chunk and the chunk's q k v rows as one [K-1+T][3C] array (the
 * window's layout): the window after the chunk's first j tokens is rows j .. j+K-2. Call it
 * before eng_kda_conv, which moves the window on. */
int eng_kda_conv_trail(const float *q, const float *k, const float *v, const float *state, int T,
                       int C, int K, float *trail, void *stream);
/* eng_kda_scan_trail, then each output row as eng_kda_out_norm makes it (its bits), in one launch
 * for each 8 tokens (a cluster of ceil(dk / 32) blocks a head: the decode path's T). */
int eng_kda_scan_norm(float *S, const float *q, const float *k, const float *v, const float *g,
                      const float *beta, int T, int H, int dk, float *o, float *trail,
                      const float *gate, const float *w, float eps, void *stream);
/* The forget and output gates' second (low-rank) products, g = lo_f f_b^T and gate = lo_g g_b^T
 * ([T][H * dk] each), for eng_kda_step_decode to run itself. eng_kda_lowrank_takes: 1 when it
 * can (f_b and g_b bf16 of H * dk rows and the same cols, at most 256 and a multiple of 8,
 * 16-byte aligned as lo_f and lo_g are; T <= 8, dk <= 128). */
typedef struct eng_kda_lowrank {
    const eng_mat *f_b, *g_b;
    const float *lo_f, *lo_g; /* [T][cols] */
} eng_kda_lowrank;
int eng_kda_lowrank_takes(const eng_kda_lowrank *lr, int T, int H, int dk);
/* eng_kda_prep_decode then eng_kda_scan_norm in one launch (T <= 8, K <= 8, dk <= 128): each head's
 * cluster of ceil(dk / 32) blocks (32 columns a block) runs its prep in shared memory, then the
 * scan; the same bits as the two, with the conv state updated the same way (g and beta are read,
 * not rewritten). With lr (else NULL; then eng_kda_lowrank_takes must hold) the blocks first
 * compute the head's g and gate rows themselves, in eng_matmul_jobs' bits, and g and gate may be
 * NULL (they are not written). */
int eng_kda_step_decode(const float *q, const float *k, const float *v, float *state,
                        const float *qw, const float *kw, const float *vw, int T, int H, int dk,
                        int K, float qscale, const float *g, const float *beta, const float *A_log,
                        const float *dt_bias, int has_lb, float lb, float *S, float *o,
                        float *trail, const float *gate, const float *w, float eps,
                        const eng_kda_lowrank *lr, void *stream);
/* How many clusters of eng_kda_step_decode's (ceil(dk / 32) blocks of 256 threads, reading each
 * other's shared memory) this device holds at once, into *clusters: 0 means it cannot launch the
 * step at all. Returns 0 or the CUDA error code (a device without clusters, a build without this
 * device's architecture); -1 for H < 1 or dk outside 1..128. */
int eng_kda_step_clusters(int H, int dk, int *clusters);
/* o_h <- rmsnorm(o_h) * w * sigmoid(gate_h) per head. */
int eng_kda_out_norm(float *o, const float *gate, const float *w, int T, int H, int dk, float eps,
                     void *stream);

/* ---- DSA (engine_index.cu, engine_attend.cu, engine_attend_prefill.cu) ------------------- */
typedef enum eng_cache_dtype { ENG_CACHE_F32 = 0, ENG_CACHE_BF16 = 1, ENG_CACHE_FP8 = 2 } eng_cache_dtype;

/* A cache of rows of `width` values: f32, bf16, or e4m3 with one power-of-two f32 scale per
 * row (scale 2^ceil(log2(amax / 448))). */
typedef struct eng_cache {
    int dtype, width;
    void *rows;
    float *scale; /* FP8: one per row */
} eng_cache;

/* Rows pos0 .. pos0+T-1 of the cache <- src [T][width]. */
int eng_cache_write(const eng_cache *c, const int *pos0, const float *src, int T, void *stream);
/* eng_rmsnorm(x, x, w, T, c->width, eps) then eng_cache_write(c, pos0, x, T) in one launch, the
 * same bits (the DSA latent's norm and its cache rows). */
int eng_rmsnorm_cache_write(float *x, const float *w, int T, float eps, const eng_cache *c,
                            const int *pos0, void *stream);
/* eng_layernorm(key, key, w, b, T, keys->width, eps), eng_cache_write(keys, pos0, key, T) and
 * eng_cache_write(gates, pos0, gate, T) in one launch, the same bits (the indexer's new rows). */
int eng_index_keys_write(float *key, const float *w, const float *b, float eps,
                         const eng_cache *keys, const float *gate, const eng_cache *gates,
                         const int *pos0, int T, void *stream);
/* The DSA decode's row steps after its input products, in one launch with the same bits as the
 * launches it replaces (each row's norm at its own kernel's block size): q_a's RMSNorm in place
 * (eng_rmsnorm), the kv_a RMSNorm in place with its latent cache rows (eng_rmsnorm_cache_write),
 * and with an indexer (key not NULL) its key LayerNorm in place with the key and gate cache rows
 * (eng_index_keys_write). Rows [T][width]: qa qa_width, kv latent.width, key keys.width, gate
 * gates.width (each at most 12288 floats). */
typedef struct eng_dsa_rows {
    float *qa;
    const float *qa_norm;
    int qa_width;
    float *kv;
    const float *kv_norm;
    eng_cache latent;
    float *key; /* NULL: no indexer */
    const float *key_w, *key_b;
    eng_cache keys;
    const float *gate;
    eng_cache gates;
    float eps, key_eps; /* the RMSNorms'; the key LayerNorm's */
} eng_dsa_rows;
int eng_dsa_rows_write(const eng_dsa_rows *r, const int *pos0, int T, void *stream);
/* Pool keys of the pools completed by tokens pos0..pos0+T-1: key[p][d] = sum_j softmax_j(gate
 * + ape)[j][d] key_j[d]. */
int eng_pool_keys(const eng_cache *keys, const eng_cache *gates, const eng_cache *pool,
                  const float *ape, const int *pos0, int T, int kpool, void *stream);
/* Selection of query t (pos = pos0 + t_off + t): with P = (pos+1)/kpool pools, all of them when
 * P <= budget, else the budget best by score = sum_h hw[h]/sqrt(IH) relu(iq_h . key / sqrt(ID))
 * (ties: lower pool; +0 and -0 one score), as their tokens in order, then the open tail.
 * idx [T][width], count [T]. P <= max_pools. scores: ENG_DSA_SCORE_FLOATS(T, max_pools) floats,
 * the T rows' scores then the selection's work area. eng_dsa_scores then eng_dsa_topk, the score
 * kernel zeroing the work area as eng_dsa_topk's first kernel does (three launches, not four). */
#define ENG_DSA_MAX_SPLITS 64 /* blocks a query's selection is split over, at most */
#define ENG_DSA_WORK_INTS (2048 + 4 + 2 * ENG_DSA_MAX_SPLITS) /* a query's work area */
#define ENG_DSA_SCORE_FLOATS(T, max_pools) ((size_t)(T) * ((size_t)(max_pools) + ENG_DSA_WORK_INTS))
int eng_dsa_select(const eng_cache *pool, const float *iq, const int *q_shift, const float *hw,
                   const int *pos0, int t_off, int T, int IH, int ID, int kpool, int budget,
                   int max_pools, float *scores, int width, int32_t *idx, int *count, void *stream);
/* The scores alone (rows of queries with P > budget, pools < P): for the bf16 and e4m3 caches with
 * IH <= 32 and ID <= 256 on the tensor cores (q split into three bf16 parts, keys exact in bf16:
 * every product exact, f32 sums in another order than a scalar loop's); the f32 cache (a
 * debugging mode) and other shapes in f32 scalar sums. q_shift: null, or iq was rounded to one
 * fp16 part a head by eng_one_part_rows (the one-part form, cuda_gemm = onepart) and these are its
 * shifts ([T][IH]): the e4m3 keys (exact in fp16) then take one fp16 product a tile instead of three
 * bf16 ones, the same exact products; the other caches the forms above on the rounded q. */
int eng_dsa_scores(const eng_cache *pool, const float *iq, const int *q_shift, const float *hw,
                   const int *pos0, int t_off, int T, int IH, int ID, int kpool, int budget,
                   int max_pools, float *scores, void *stream);
/* Each of rows rows of x (width floats) rounded in place to one power-of-two-scaled fp16 part, as
 * model/numfmt.h's numfmt_one_part_row does, its power of two to shift[row]: the indexer's query
 * heads under the one-part form (eng_dsa_scores' q_shift). */
int eng_one_part_rows(float *x, int rows, int width, int *shift, void *stream);
/* The selection alone from scores [T][max_pools] (followed by the work area, as above): a radix
 * select (its first digit over blocks of 16384 pools, the gather over up to ENG_DSA_MAX_SPLITS
 * blocks a query); the same result as the CPU's sort. */
int eng_dsa_topk(float *scores, const int *pos0, int t_off, int T, int kpool, int budget,
                 int max_pools, int width, int32_t *idx, int *count, void *stream);
/* qt[t][h][r] = sum_i q[t][h][i] kv_b[h*(dn+dv)+i][r]. */
int eng_mla_absorb(const eng_mat *kv_b, const float *q, int T, int H, int dn, int dv, int R,
                   float *qt, void *stream);
/* ot[t][h] = softmax_s(qt . lat[idx[s]] * scale) over the selection, weighted latent rows. */
int eng_mla_attend(const eng_cache *lat, const float *qt, const int32_t *idx, const int *count,
                   int width, int T, int H, int R, float scale, float *ot, void *stream);
/* eng_mla_attend for the decode step (T <= ENG_ATTEND_MAX_T). For R 512, a bf16 or e4m3 cache,
 * H a multiple of 16, at most ENG_ATTEND_MQA_MAX_SLICES slices and 16-byte aligned rows, qt, ot
 * and part (GLM's shapes), the MQA kernel: a token's selection is split in
 * ENG_ATTEND_MQA_SLICES(width) slices of at most ENG_ATTEND_MQA_KEYS rows; a block per (slice,
 * 16 heads, token) reads each of its rows once for its 16 heads and computes the scores and the
 * weighted latent sum on the tensor cores (q and the softmax weights split in three bf16 parts,
 * f32 sums); the slices' sums are rescaled and added in slice order by a second kernel. Any other
 * shape runs eng_mla_attend (part unused). part: ENG_ATTEND_PART_FLOATS(H, R, width) floats. The
 * slices depend on width and each row's own count, never on T, so a row's result is the same in
 * any launch of up to ENG_ATTEND_MAX_T rows (verification windows and prompt reuse rely on it). */
#define ENG_ATTEND_MAX_T 8
#define ENG_ATTEND_MQA_KEYS 64
#define ENG_ATTEND_MQA_SLICES(width)                                                               \
    (((size_t)(width) + ENG_ATTEND_MQA_KEYS - 1) / ENG_ATTEND_MQA_KEYS)
#define ENG_ATTEND_MQA_MAX_SLICES 64 /* wider selections run eng_mla_attend */
/* the MQA kernel's most (token, head, slice) triples a row: its sums (R) and maximum and sum of
 * exponentials (2) for each of ENG_ATTEND_MAX_T rows */
#define ENG_ATTEND_PART_FLOATS(H, R, width)                                                        \
    ((size_t)ENG_ATTEND_MAX_T * (size_t)(H) *                                                      \
     (ENG_ATTEND_MQA_SLICES(width) < ENG_ATTEND_MQA_MAX_SLICES ? ENG_ATTEND_MQA_SLICES(width)      \
                                                               : ENG_ATTEND_MQA_MAX_SLICES) *      \
     ((size_t)(R) + 2))
/* Whether eng_mla_attend_decode runs the MQA kernel for this shape and these buffers (1), or
 * eng_mla_attend (0). */
int eng_mla_attend_decode_takes(const eng_cache *lat, const float *qt, const float *ot,
                                const float *part, int width, int H, int R);
int eng_mla_attend_decode(const eng_cache *lat, const float *qt, const int32_t *idx,
                          const int *count, int width, int T, int H, int R, float scale, float *ot,
                          float *part, void *stream);
/* o[t][h][i] = kv_b[h*(dn+dv)+dn+i] . ot[t][h]. */
int eng_mla_expand(const eng_mat *kv_b, const float *ot, int T, int H, int dn, int dv, int R,
                   float *o, void *stream);
/* The prefill (T > 8) forms of the three above, on the tensor cores (bf16 mma, f32 sums): the
 * absorbed query and the value expansion as per-head GEMMs whose f32 inputs are split into three
 * bf16 parts (f32 precision against bf16 kv_b); the latent attention a token's heads at once over
 * tiles of its selected rows (bf16 or e4m3 cache, exact in bf16), qt and the softmax weights split
 * in two bf16 parts, an online softmax (eng_mla_attend_prefill_takes below). A row's result
 * depends on its own data only (any chunk, any T). Other dtypes and shapes (kv_b not bf16, the f32
 * cache, widths off the tiles) run the scalar kernels above, which compute the same sums. */
int eng_mla_absorb_prefill(const eng_mat *kv_b, const float *q, int T, int H, int dn, int dv, int R,
                           float *qt, void *stream);
int eng_mla_attend_prefill(const eng_cache *lat, const float *qt, const int32_t *idx,
                           const int *count, int width, int T, int H, int R, float scale, float *ot,
                           void *stream);
int eng_mla_expand_prefill(const eng_mat *kv_b, const float *ot, int T, int H, int dn, int dv, int R,
                           float *o, void *stream);
/* Whether eng_mla_attend_prefill runs its tensor-core (flash) kernel for this cache, shape, qt
 * and ot on the current device (1), or the scalar eng_mla_attend (0): the flash kernel takes latent
 * width 512 with a bf16 cache (rows by cp.async) or an e4m3 one (rows through registers, widened
 * into bf16 by their loader) where the device gives a block the shared memory one of its forms
 * needs (eng_mla_attend_prefill_form); the f32 cache and other widths run the scalar kernel. */
int eng_mla_attend_prefill_takes(const eng_cache *lat, int H, int R, const float *qt,
                                 const float *ot);
/* The flash kernel's form: heads a block (0: the scalar kernel runs), key tiles in shared memory
 * (2: the big form, the next tile's loads land while this one's products run, 120 KiB for 16
 * heads a block up to 226 KiB for 64, sm_90; 1: the small form, 16 heads a block, the next tile
 * waiting in registers, 88 KiB, sm_120/sm_121 whose blocks get 99 KiB), its bytes a block. Both
 * compute each head's sums in the same order for the same heads a block. */
typedef struct eng_mla_prefill_form {
    int heads, stages, smem;
} eng_mla_prefill_form;
/* The form eng_mla_attend_prefill_budget picks for a shape within smem_budget bytes of shared
 * memory a block (< 0: the device's opt-in limit; never above it). */
eng_mla_prefill_form eng_mla_attend_prefill_form(const eng_cache *lat, int H, int R,
                                                 const float *qt, const float *ot, int smem_budget);
/* eng_mla_attend_prefill with its form chosen within smem_budget (as above): the dispatch passes
 * -1; tests force the small form (or 16 heads a block) on a device that fits the big one. */
int eng_mla_attend_prefill_budget(const eng_cache *lat, const float *qt, const int32_t *idx,
                                  const int *count, int width, int T, int H, int R, float scale,
                                  float *ot, int smem_budget, void *stream);

/* ---- router and MoE (engine_moe.cu) ------------------------------------------------------ */
/* Sigmoid router with correction bias and groups (cpu_route): ids/weights [T][K]. scratch:
 * T * (3E + G) floats. */
int eng_route(const float *logits, const float *bias, int T, int E, int G, int topk_group, int K,
              int norm_topk, float scaling, float *scratch, int32_t *ids, float *weights,
              void *stream);
/* The routing's kernels, for tests and timings: ENG_ROUTE_WARP (a warp a row, one group, E <=
 * 512, K <= 32; eng_route's choice up to ENG_ROUTE_WARP_ROWS rows), ENG_ROUTE_RANK (a thread an
 * expert, one group, E <= 512), ENG_ROUTE_GROUPS (any groups; uses scratch). -1 when the kernel
 * does not take the shape. */
enum { ENG_ROUTE_WARP, ENG_ROUTE_RANK, ENG_ROUTE_GROUPS };
#define ENG_ROUTE_WARP_ROWS 16
int eng_route_with(int kernel, const float *logits, const float *bias, int T, int E, int G,
                   int topk_group, int K, int norm_topk, float scaling, float *scratch,
                   int32_t *ids, float *weights, void *stream);
/* The decode router and its routing in one launch: logits [T][E] = x [T][cols] W^T (E = w->rows)
 * in eng_matmul_jobs' bits, then the last block to finish routes each row as eng_route does for
 * one group up to ENG_ROUTE_WARP_ROWS rows (the same ids and weights). done: one unsigned on the
 * device, zero before the first call; every call leaves it zero (calls sharing it must be
 * ordered, as on one stream). eng_router_route_takes: 1 when the launch takes the shape (T <= 8,
 * one group, E <= 512, K <= 32, no Q4, not eng_matmul_jobs' skinny rows); else the caller runs
 * eng_matmul_jobs and eng_route. */
int eng_router_route_takes(const eng_mat *w, const float *x, int T, int G, int K);
int eng_router_route(const eng_mat *w, const float *x, int T, float *logits, const float *bias,
                     int K, int norm_topk, float scaling, int32_t *ids, float *weights,
                     unsigned *done, void *stream);
/* Routed experts of any dense dtype: tables of E matrices in device memory. h: T*K*I floats,
 * ye: T*K*D floats scratch. out[t] = sum_k w[t][k] down_e(swiglu(gate_e x, up_e x)). */
int eng_moe_dense(const eng_mat *gate, const eng_mat *up, const eng_mat *down, int E,
                  const float *x, int T, int K, int D, int I, const int32_t *ids, const float *w,
                  float limit, float *h, float *ye, float *out, void *stream);
/* out[t] = sum_k w[t][k] ye[t][k] (+ out when accumulate). */
int eng_moe_combine(const float *ye, const float *w, int T, int K, int D, int accumulate,
                    float *out, void *stream);

#ifdef __cplusplus
}
#endif

#endif
