// engine_attend_prefill.cu: the prefill's latent attention on the tensor cores (architecture.md
// 2.5): the absorbed query and value expansion as per-head products, and MLA over the selection
// (the flash kernel; the former tiled one until the two are timed against each other).
#include "engine_common.cuh"

namespace {

// ---- prefill (T > 8) on the tensor cores: bf16 mma.sync m16n8k16 with f32 accumulation ----
// Each row's result depends on that row's data alone (fixed tile and k orders, no split that
// depends on the launch), so it is the same bits in any chunk of any size.

constexpr int kHgM = 64, kHgN = 64, kHgK = 32, kHgS = kHgK + 8; // block tile, k step, smem stride

// One head per blockIdx.z: C[t][h][n] = sum_k A[t][h][k] B_h(n, k), A f32 split into three bf16
// parts (hi + mid + lo carries the f32 value), so against bf16 weights the products keep f32
// precision. kn 1: B_h(n, k) = W[(h hs + off + k) ldw + n] (the absorbed query, W_k's rows);
// kn 0: B_h(n, k) = W[(h hs + off + n) ldw + k] (the value expansion, W_v's rows).
// Four warps, each 16 rows x 64 columns of the block's 64 x 64 tile.
__global__ void __launch_bounds__(128) head_gemm_kernel(const uint16_t *W, int ldw, int hs, int off,
                                                        int kn, const float *A, int T, int H, int K,
                                                        int N, float *C)
{
    pdl_prologue();
    __shared__ __align__(16) uint16_t as[3][kHgM][kHgS];
    __shared__ __align__(16) uint16_t bs[kHgN][kHgS];
    int h = blockIdx.z, t0 = blockIdx.x * kHgM, n0 = blockIdx.y * kHgN;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const uint16_t *Wh = W + (size_t)(h * hs + off) * ldw;
    float acc[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
        acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += kHgK) {
        { // A: 64 rows x 32; a thread 16 values of one row, split
            int r = tid >> 1, kk = (tid & 1) * 16, t = t0 + r;
            float v[16];
            if (t < T) {
                const float4 *p = reinterpret_cast<const float4 *>(A + ((size_t)t * H + h) * K + k0 + kk);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    float4 q = __ldg(p + j);
                    v[4 * j] = q.x, v[4 * j + 1] = q.y, v[4 * j + 2] = q.z, v[4 * j + 3] = q.w;
                }
            } else {
#pragma unroll
                for (int j = 0; j < 16; j++)
                    v[j] = 0.0f;
            }
#pragma unroll
            for (int j = 0; j < 16; j++) {
                uint16_t hi = bf16_rn(v[j]);
                float rest = v[j] - bf16_bits_to_f32(hi);
                uint16_t mid = bf16_rn(rest);
                as[0][r][kk + j] = hi;
                as[1][r][kk + j] = mid;
                as[2][r][kk + j] = bf16_rn(rest - bf16_bits_to_f32(mid));
            }
        }
        if (kn) { // W's rows are k, contiguous in n: stored transposed
            int kk = tid >> 2, nn = (tid & 3) * 16;
            const uint4 *p = reinterpret_cast<const uint4 *>(Wh + (size_t)(k0 + kk) * ldw + n0 + nn);
            uint4 q[2] = {__ldg(p), __ldg(p + 1)};
            const uint16_t *e = reinterpret_cast<const uint16_t *>(q);
#pragma unroll
            for (int j = 0; j < 16; j++)
                bs[nn + j][kk] = e[j];
        } else { // W's rows are n, contiguous in k
            int nn = tid >> 1, kk = (tid & 1) * 16;
            const uint4 *p = reinterpret_cast<const uint4 *>(Wh + (size_t)(n0 + nn) * ldw + k0 + kk);
            *reinterpret_cast<uint4 *>(&bs[nn][kk]) = __ldg(p);
            *reinterpret_cast<uint4 *>(&bs[nn][kk + 8]) = __ldg(p + 1);
        }
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < kHgK; ks += 16) {
            uint32_t b[8][2];
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                b[nt][0] = ld_pair(&bs[nt * 8 + g][ks + 2 * c]);
                b[nt][1] = ld_pair(&bs[nt * 8 + g][ks + 2 * c + 8]);
            }
            int row = warp * 16 + g;
#pragma unroll
            for (int part = 0; part < 3; part++) {
                uint32_t a[4] = {ld_pair(&as[part][row][ks + 2 * c]), ld_pair(&as[part][row + 8][ks + 2 * c]),
                                 ld_pair(&as[part][row][ks + 2 * c + 8]),
                                 ld_pair(&as[part][row + 8][ks + 2 * c + 8])};
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
                    mma_bf16(acc[nt], a, b[nt]);
            }
        }
        __syncthreads();
    }
    int ta = t0 + warp * 16 + g, tb = ta + 8;
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        int n = n0 + nt * 8 + 2 * c;
        if (ta < T)
            *reinterpret_cast<float2 *>(C + ((size_t)ta * H + h) * N + n) = make_float2(acc[nt][0], acc[nt][1]);
        if (tb < T)
            *reinterpret_cast<float2 *>(C + ((size_t)tb * H + h) * N + n) = make_float2(acc[nt][2], acc[nt][3]);
    }
}

// ENG_ATTEND_TILED, the former prefill attention (kept to time the flash kernel against):
// the latent attention of one token (blockIdx.x) for up to 64 of its heads (blockIdx.y): all of
// them share the token's selection, so the heads are the rows of the products. Per tile of 32
// selected cache rows (bf16 in shared memory; e4m3 rows times their power-of-two scale are exact
// in bf16): S = Q K^T with Q = hi + lo bf16 parts of qt, split over `wg` warps along the latent
// width and summed in warp order; an online softmax (running maximum and sum per head); then
// O += P V with P = hi + lo bf16 parts, each warp its QW columns of O. Warps: gp head groups of
// 16 rows x wg column slices of width QW = R / wg.
constexpr int kAtKeys = 32, kAtSS = kAtKeys + 4, kAtPS = kAtKeys + 8;

template <int QW, int CACHE>
__global__ void __launch_bounds__(512, 1) attend_mma_kernel(eng_cache lat, const float *qt,
                                                            const int32_t *idx, const int *count,
                                                            int width, int H, int R, int gp,
                                                            int wg, float scale, float *ot)
{
    pdl_prologue();
    constexpr int kBytes = CACHE == ENG_CACHE_FP8 ? 1 : 2;
    constexpr int kCPT = 2 * kBytes; // 16-byte pieces of a tile a thread loads, at most
    extern __shared__ __align__(16) unsigned char smem_raw[];
    int rows = 16 * gp, RS = R + 8;
    uint16_t *qhi = reinterpret_cast<uint16_t *>(smem_raw), *qlo = qhi + (size_t)rows * RS;
    uint16_t *ks = qlo + (size_t)rows * RS;                                // [kAtKeys][RS]
    float *spart = reinterpret_cast<float *>(ks + (size_t)kAtKeys * RS);  // [wg][rows][kAtSS]
    uint16_t *phi = reinterpret_cast<uint16_t *>(spart + (size_t)wg * rows * kAtSS); // [rows][kAtPS]
    uint16_t *plo = phi + (size_t)rows * kAtPS;
    float *alpha_s = reinterpret_cast<float *>(plo + (size_t)rows * kAtPS), *l_s = alpha_s + rows;

    int t = blockIdx.x, h0 = blockIdx.y * 64, nh = H - h0 < 64 ? H - h0 : 64;
    int tid = threadIdx.x, nthr = blockDim.x, lane = tid & 31, warp = tid >> 5;
    int g = lane >> 2, c = lane & 3, gi = warp / wg, wc = warp % wg, col0 = wc * QW;
    int n = count[t];
    const int32_t *sel = idx + (size_t)t * width;

    for (int i = tid; i < rows * R; i += nthr) { // Q, split
        int r = i / R, d = i % R;
        float v = r < nh ? qt[((size_t)t * H + h0 + r) * R + d] : 0.0f;
        uint16_t hi = bf16_rn(v);
        qhi[(size_t)r * RS + d] = hi;
        qlo[(size_t)r * RS + d] = bf16_rn(v - bf16_bits_to_f32(hi));
    }

    int pieces_row = R * kBytes / 16, pieces = kAtKeys * pieces_row;
    uint4 raw[kCPT];
    float rsc[kCPT];
    auto issue = [&](int s0) {
#pragma unroll
        for (int u = 0; u < kCPT; u++) {
            int i = tid + u * nthr;
            raw[u] = make_uint4(0u, 0u, 0u, 0u);
            rsc[u] = 0.0f;
            if (i < pieces) {
                int key = i / pieces_row, pc = i % pieces_row, s = s0 + key;
                if (s < n) {
                    size_t row = (size_t)sel[s];
                    raw[u] = __ldg(reinterpret_cast<const uint4 *>(
                                       static_cast<const uint8_t *>(lat.rows) + row * R * kBytes) + pc);
                    if (CACHE == ENG_CACHE_FP8)
                        rsc[u] = lat.scale[row];
                }
            }
        }
    };
    auto commit = [&]() {
#pragma unroll
        for (int u = 0; u < kCPT; u++) {
            int i = tid + u * nthr;
            if (i >= pieces)
                continue;
            int key = i / pieces_row, pc = i % pieces_row;
            uint16_t *dst = ks + (size_t)key * RS + pc * (16 / kBytes);
            if (CACHE == ENG_CACHE_FP8) {
                const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
                uint32_t o[8];
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    float a = fp8_to_f32((uint8_t)(w[j / 2] >> (16 * (j % 2)))) * rsc[u];
                    float b = fp8_to_f32((uint8_t)(w[j / 2] >> (16 * (j % 2) + 8))) * rsc[u];
                    o[j] = pack_pair(bf16_rn(a), bf16_rn(b));
                }
                reinterpret_cast<uint4 *>(dst)[0] = make_uint4(o[0], o[1], o[2], o[3]);
                reinterpret_cast<uint4 *>(dst)[1] = make_uint4(o[4], o[5], o[6], o[7]);
            } else {
                *reinterpret_cast<uint4 *>(dst) = raw[u];
            }
        }
    };

    float oacc[QW / 8][4];
#pragma unroll
    for (int nt = 0; nt < QW / 8; nt++)
        oacc[nt][0] = oacc[nt][1] = oacc[nt][2] = oacc[nt][3] = 0.0f;
    float m_run = -INFINITY, l_run = 0.0f; // the softmax threads' head (tid / 8)
    int sm_row = tid >> 3, sm_k = (tid & 7) * 4;
    bool sm_on = sm_row < rows;
    int ra = gi * 16 + g, rb = ra + 8;

    issue(0);
    for (int s0 = 0; s0 < n; s0 += kAtKeys) {
        __syncthreads(); // the last tile's P V is done with ks, phi, plo (and Q is stored)
        commit();
        if (s0 + kAtKeys < n)
            issue(s0 + kAtKeys); // in flight during this tile's products
        __syncthreads();
        { // S partial over this warp's latent columns
            float sacc[4][4];
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
                sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.0f;
#pragma unroll 1
            for (int k = 0; k < QW; k += 16) {
                int d = col0 + k + 2 * c;
                uint32_t ah[4] = {ld_pair(qhi + (size_t)ra * RS + d), ld_pair(qhi + (size_t)rb * RS + d),
                                  ld_pair(qhi + (size_t)ra * RS + d + 8), ld_pair(qhi + (size_t)rb * RS + d + 8)};
                uint32_t al[4] = {ld_pair(qlo + (size_t)ra * RS + d), ld_pair(qlo + (size_t)rb * RS + d),
                                  ld_pair(qlo + (size_t)ra * RS + d + 8), ld_pair(qlo + (size_t)rb * RS + d + 8)};
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    const uint16_t *kp = ks + (size_t)(nt * 8 + g) * RS + d;
                    uint32_t b[2] = {ld_pair(kp), ld_pair(kp + 8)};
                    mma_bf16(sacc[nt], ah, b);
                    mma_bf16(sacc[nt], al, b);
                }
            }
            float *sp = spart + (size_t)wc * rows * kAtSS;
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                int key = nt * 8 + 2 * c;
                *reinterpret_cast<float2 *>(sp + (size_t)ra * kAtSS + key) = make_float2(sacc[nt][0], sacc[nt][1]);
                *reinterpret_cast<float2 *>(sp + (size_t)rb * kAtSS + key) = make_float2(sacc[nt][2], sacc[nt][3]);
            }
        }
        __syncthreads();
        if (sm_on) { // eight threads a head, four keys each
            float v[4], mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int key = sm_k + j;
                float a = 0.0f;
                for (int w = 0; w < wg; w++)
                    a += spart[((size_t)w * rows + sm_row) * kAtSS + key];
                v[j] = s0 + key < n ? a * scale : -INFINITY;
                mx = fmaxf(mx, v[j]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            float m_new = fmaxf(m_run, mx), alpha = expf(m_run - m_new), psum = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float p = s0 + sm_k + j < n ? expf(v[j] - m_new) : 0.0f;
                psum += p;
                uint16_t hi = bf16_rn(p);
                phi[(size_t)sm_row * kAtPS + sm_k + j] = hi;
                plo[(size_t)sm_row * kAtPS + sm_k + j] = bf16_rn(p - bf16_bits_to_f32(hi));
            }
            psum += __shfl_xor_sync(0xffffffffu, psum, 1);
            psum += __shfl_xor_sync(0xffffffffu, psum, 2);
            psum += __shfl_xor_sync(0xffffffffu, psum, 4);
            l_run = l_run * alpha + psum;
            m_run = m_new;
            if ((tid & 7) == 0) {
                alpha_s[sm_row] = alpha;
                l_s[sm_row] = l_run;
            }
        } // (rows * 8 threads take part: whole warps, as 128 divides rows * 8 and blockDim.x)
        __syncthreads();
        { // O = alpha O + P V over this warp's columns
            float aa = alpha_s[ra], ab = alpha_s[rb];
#pragma unroll
            for (int nt = 0; nt < QW / 8; nt++) {
                oacc[nt][0] *= aa, oacc[nt][1] *= aa;
                oacc[nt][2] *= ab, oacc[nt][3] *= ab;
            }
#pragma unroll 1
            for (int k = 0; k < kAtKeys; k += 16) {
                int kc = k + 2 * c;
                uint32_t ph[4] = {ld_pair(phi + (size_t)ra * kAtPS + kc), ld_pair(phi + (size_t)rb * kAtPS + kc),
                                  ld_pair(phi + (size_t)ra * kAtPS + kc + 8),
                                  ld_pair(phi + (size_t)rb * kAtPS + kc + 8)};
                uint32_t pl[4] = {ld_pair(plo + (size_t)ra * kAtPS + kc), ld_pair(plo + (size_t)rb * kAtPS + kc),
                                  ld_pair(plo + (size_t)ra * kAtPS + kc + 8),
                                  ld_pair(plo + (size_t)rb * kAtPS + kc + 8)};
                const uint16_t *v0 = ks + (size_t)kc * RS, *v1 = v0 + RS, *v8 = v0 + 8 * RS, *v9 = v8 + RS;
#pragma unroll
                for (int nt = 0; nt < QW / 8; nt++) {
                    int col = col0 + nt * 8 + g;
                    uint32_t b[2] = {pack_pair(v0[col], v1[col]), pack_pair(v8[col], v9[col])};
                    mma_bf16(oacc[nt], ph, b);
                    mma_bf16(oacc[nt], pl, b);
                }
            }
        }
    }
    __syncthreads();
    float ia = 1.0f / l_s[ra], ib = 1.0f / l_s[rb];
#pragma unroll
    for (int nt = 0; nt < QW / 8; nt++) {
        int col = col0 + nt * 8 + 2 * c;
        if (ra < nh)
            *reinterpret_cast<float2 *>(ot + ((size_t)t * H + h0 + ra) * R + col) =
                make_float2(oacc[nt][0] * ia, oacc[nt][1] * ia);
        if (rb < nh)
            *reinterpret_cast<float2 *>(ot + ((size_t)t * H + h0 + rb) * R + col) =
                make_float2(oacc[nt][2] * ib, oacc[nt][3] * ib);
    }
}

template <int QW, int CACHE>
int launch_attend_mma(const eng_cache *lat, const float *qt, const int32_t *idx, const int *count,
                      int width, int T, int H, int R, int gp, int wg, float scale, float *ot,
                      size_t smem, cudaStream_t st)
{
    static int smem_set; // the opt-in above 48 KiB, once an instantiation
    if (!smem_set) {
        int rc = (int)cudaFuncSetAttribute(attend_mma_kernel<QW, CACHE>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
        if (rc)
            return rc;
        smem_set = 1;
    }
    dim3 grid(T, (H + 63) / 64);
    launch(attend_mma_kernel<QW, CACHE>, grid, 32 * gp * wg, smem, st, *lat, qt, idx, count, width,
           H, R, gp, wg, scale, ot);
    return (int)cudaGetLastError();
}

// The tile shape of attend_mma_kernel for H heads of width R: its head groups gp, column slices
// wg and shared bytes; 0 where the kernel does not take the shape (then the scalar kernels do).
int attend_mma_shape(const eng_cache *lat, int H, int R, const float *ot, int *gp_out,
                     int *wg_out, int *qw_out, size_t *smem_out)
{
    int gp = ((H < 64 ? H : 64) + 15) / 16;
    gp = gp == 3 ? 4 : gp;
    int wg = 16 / gp;
    while (wg > 4 && R / wg < 16)
        wg /= 2;
    int qw = R / wg, rows = 16 * gp;
    size_t smem = (size_t)2 * rows * (R + 8) * 2 + (size_t)kAtKeys * (R + 8) * 2 +
                  (size_t)wg * rows * kAtSS * 4 + (size_t)2 * rows * kAtPS * 2 + (size_t)2 * rows * 4;
    *gp_out = gp, *wg_out = wg, *qw_out = qw, *smem_out = smem;
    return R % 64 == 0 && qw * wg == R && (qw == 16 || qw == 32 || qw == 64 || qw == 128) &&
           lat->width == R && smem <= 227 * 1024 && (uintptr_t)ot % 8 == 0 &&
           (lat->dtype == ENG_CACHE_FP8 || lat->dtype == ENG_CACHE_BF16);
}

int attend_mma_run(const eng_cache *lat, const float *qt, const int32_t *idx, const int *count,
                   int width, int T, int H, int R, int gp, int wg, int qw, float scale, float *ot,
                   size_t smem, cudaStream_t st)
{
    if (lat->dtype == ENG_CACHE_FP8) {
        switch (qw) {
        case 16: return launch_attend_mma<16, ENG_CACHE_FP8>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
        case 32: return launch_attend_mma<32, ENG_CACHE_FP8>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
        case 64: return launch_attend_mma<64, ENG_CACHE_FP8>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
        default: return launch_attend_mma<128, ENG_CACHE_FP8>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
        }
    }
    switch (qw) {
    case 16: return launch_attend_mma<16, ENG_CACHE_BF16>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
    case 32: return launch_attend_mma<32, ENG_CACHE_BF16>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
    case 64: return launch_attend_mma<64, ENG_CACHE_BF16>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
    default: return launch_attend_mma<128, ENG_CACHE_BF16>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
    }
}


// ---- the flash form: a row's heads on the tensor cores over tiles of its selected keys ----
// One block a query row (blockIdx.x, long rows first) and up to 64 of its heads (blockIdx.y):
// the heads share the row's selection, so they are the M dimension of every product. Per tile
// of kFlKeys selected latent rows, brought in by cp.async one tile ahead (e4m3 rows raw, then
// widened once into bf16 in shared memory, exactly: their power-of-two scale is left out of the
// tile and applied to the scores and to the softmax weights instead):
//   S = Q K^T with Q = hi + lo bf16 parts of the f32 query (two mma a product, f32 sums); eight
//     warps, each one head group of 16 over a slice of the latent width, the slices' partial
//     sums added in slice order;
//   an online softmax (running maximum and sum a head, expf);
//   O += P V with P = hi + lo bf16 parts of the f32 weights (times the row's scale), V the same
//     bf16 tile read transposed by ldmatrix; each warp its head groups x a slice of O's columns.
// Every sum runs in an order fixed by the row's own selection alone, so a row's result is the
// same bits in any chunk and at any place in it.
constexpr int kFlKeys = 32;              // keys a tile
constexpr int kFlThreads = 256;          // eight warps
constexpr int kFlR = 512;                // the latent width it takes
constexpr int kFlRowB = kFlR * 2 + 16;   // bytes a bf16 row (Q, K) in shared memory: the 16-byte
                                         // shift a row puts ldmatrix's 8 rows in distinct banks
constexpr int kFlSS = kFlKeys + 8;       // floats a row of partial scores
constexpr int kFlPS = kFlKeys + 8;       // bf16 a row of softmax weights (80 bytes)

static __device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

static __device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// 16 bytes global -> shared without passing through registers; src_bytes 0 writes zeros.
static __device__ __forceinline__ void cp_async16_zfill(void *smem, const void *gmem, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)),
                 "l"(gmem), "r"(src_bytes)
                 : "memory");
}

static __device__ __forceinline__ void cp_async_commit_group()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

static __device__ __forceinline__ void cp_async_wait_groups_all()
{
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Two e4m3 bytes (the low one first) -> two bf16 (the low half first), exactly: e4m3 -> f16 is
// exact, f16 -> f32 too, and three mantissa bits fit bf16's seven.
static __device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two)
{
    __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu),
                                                __NV_E4M3);
    __half2 h(hr);
    float2 f = __half22float2(h);
    __nv_bfloat162 b = __float22bfloat162_rn(f);
    return *reinterpret_cast<uint32_t *>(&b);
}

// The layout of the flash kernel's shared memory for NG head groups of 16 and a cache format:
// byte offsets of its arrays and the total.
struct fl_layout {
    int q, kt, raw, spart, p, alpha, lsum, ksc, bytes;
};

static __host__ __device__ constexpr int fl_split(int ng) { return 8 / ng; }

static __host__ __device__ fl_layout fl_layout_for(int ng, int fp8)
{
    fl_layout l{};
    int rows = 16 * ng;
    l.q = 0;                                                   // [2][rows][kFlRowB]: hi, lo
    l.kt = l.q + 2 * rows * kFlRowB;                           // [1 or 2][kFlKeys][kFlRowB]
    l.raw = l.kt + (fp8 ? 1 : 2) * kFlKeys * kFlRowB;          // e4m3: [2][kFlKeys][kFlR]
    l.spart = l.raw + (fp8 ? 2 * kFlKeys * kFlR : 0);          // [split][rows][kFlSS] f32
    l.p = l.spart + fl_split(ng) * rows * kFlSS * 4;           // [2][rows][kFlPS] bf16: hi, lo
    l.alpha = l.p + 2 * rows * kFlPS * 2;                      // [rows] f32
    l.lsum = l.alpha + rows * 4;                               // [rows] f32
    l.ksc = l.lsum + rows * 4;                                 // [2][kFlKeys] f32
    l.bytes = l.ksc + 2 * kFlKeys * 4;
    return l;
}

template <int NG, int CACHE>
__global__ void __launch_bounds__(kFlThreads, 1)
    attend_flash_kernel(eng_cache lat, const float *qt, const int32_t *idx, const int *count,
                        int width, int T, int H, float scale, float *ot)
{
    pdl_prologue();
    constexpr bool kFp8 = CACHE == ENG_CACHE_FP8;
    constexpr int R = kFlR, ROWS = 16 * NG;
    constexpr int SPLIT = fl_split(NG), QKW = R / SPLIT;   // S: slices of the latent width
    constexpr int HGW = NG < 2 ? NG : 2;                    // O: head groups a warp
    constexpr int PVC = 8 / (NG / HGW), CW = R / PVC;       // O: column slices, their width
    constexpr int NT = CW / 8;
    constexpr int ROW_BYTES = kFp8 ? R : 2 * R;             // a cache row
    constexpr int CHUNKS = ROW_BYTES / 16, PER = kFlKeys * CHUNKS / kFlThreads;
    static_assert(QKW % 16 == 0 && NT % 2 == 0 && PER * kFlThreads == kFlKeys * CHUNKS, "tile");
    extern __shared__ __align__(16) unsigned char smem[];
    const fl_layout L = fl_layout_for(NG, kFp8);
    unsigned char *q_s = smem + L.q, *kt_s = smem + L.kt, *raw_s = smem + L.raw;
    float *spart = reinterpret_cast<float *>(smem + L.spart);
    uint16_t *p_s = reinterpret_cast<uint16_t *>(smem + L.p);
    float *alpha_s = reinterpret_cast<float *>(smem + L.alpha);
    float *l_s = reinterpret_cast<float *>(smem + L.lsum);
    float *ksc_s = reinterpret_cast<float *>(smem + L.ksc);

    const int t = T - 1 - (int)blockIdx.x; // the long rows (later in a chunk) first
    const int h0 = blockIdx.y * 64, nh = H - h0 < ROWS ? H - h0 : ROWS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int n = count[t];
    const int32_t *sel = idx + (size_t)t * width;

    // the tile's rows into shared memory (stage tile & 1), zeros past the selection
    auto issue = [&](int tile) {
        int s0 = tile * kFlKeys, stage = tile & 1;
        unsigned char *dst0 = kFp8 ? raw_s + stage * kFlKeys * R : kt_s + stage * kFlKeys * kFlRowB;
#pragma unroll
        for (int u = 0; u < PER; u++) {
            int i = tid + u * kFlThreads, key = i / CHUNKS, pc = i % CHUNKS, s = s0 + key;
            bool ok = s < n;
            size_t row = ok ? (size_t)(uint32_t)sel[s] : 0;
            const unsigned char *src = static_cast<const unsigned char *>(lat.rows) +
                                       row * ROW_BYTES + pc * 16;
            cp_async16_zfill(dst0 + key * (kFp8 ? R : kFlRowB) + pc * 16, src, ok ? 16 : 0);
            if (kFp8 && pc == 0)
                ksc_s[stage * kFlKeys + key] = ok ? lat.scale[row] : 0.0f;
        }
        cp_async_commit_group();
    };
    const int ntiles = (n + kFlKeys - 1) / kFlKeys;
    if (ntiles > 0)
        issue(0);

    { // Q, split into hi and lo bf16 parts; heads past H zero
        const float *qrow = qt + ((size_t)t * H + h0) * R;
        for (int i = tid; i < ROWS * R / 4; i += kFlThreads) {
            int r = i / (R / 4), d = (i % (R / 4)) * 4;
            float4 v = r < nh ? __ldg(reinterpret_cast<const float4 *>(qrow + (size_t)r * R + d))
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            float e[4] = {v.x, v.y, v.z, v.w};
            uint16_t hi[4], lo[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                hi[j] = bf16_rn(e[j]);
                lo[j] = bf16_rn(e[j] - bf16_bits_to_f32(hi[j]));
            }
            *reinterpret_cast<uint2 *>(q_s + r * kFlRowB + d * 2) =
                make_uint2(pack_pair(hi[0], hi[1]), pack_pair(hi[2], hi[3]));
            *reinterpret_cast<uint2 *>(q_s + (ROWS + r) * kFlRowB + d * 2) =
                make_uint2(pack_pair(lo[0], lo[1]), pack_pair(lo[2], lo[3]));
        }
    }

    // S: warp = (head group qg, latent slice qs); O: warp = (head groups og.., column slice oc)
    const int qg = warp % NG, qs = warp / NG;
    const int og = (warp / PVC) * HGW, oc = warp % PVC;
    float oacc[HGW][NT][4];
#pragma unroll
    for (int j = 0; j < HGW; j++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
            oacc[j][nt][0] = oacc[j][nt][1] = oacc[j][nt][2] = oacc[j][nt][3] = 0.0f;
    // the softmax's threads: four a head, eight keys each (all of a warp or none)
    const bool sm_on = tid < ROWS * 4;
    const int sm_row = tid >> 2, sm_k = (tid & 3) * 8;
    float m_run = -INFINITY, l_run = 0.0f;

    for (int tile = 0; tile < ntiles; tile++) {
        const int stage = tile & 1, s0 = tile * kFlKeys;
        cp_async_wait_groups_all();
        __syncthreads(); // the tile is in; the last tile's P V is done with kt, p_s (Q stored)
        if (tile + 1 < ntiles)
            issue(tile + 1); // in flight during this tile's products
        const unsigned char *kt = kFp8 ? kt_s : kt_s + stage * kFlKeys * kFlRowB;
        if (kFp8) { // widen the e4m3 rows into the bf16 tile, 8 values a piece
            const unsigned char *raw = raw_s + stage * kFlKeys * R;
#pragma unroll
            for (int u = 0; u < kFlKeys * R / 8 / kFlThreads; u++) {
                int i = tid + u * kFlThreads, key = i / (R / 8), pc = i % (R / 8);
                uint2 w = *reinterpret_cast<const uint2 *>(raw + key * R + pc * 8);
                uint4 o = make_uint4(e4m3x2_to_bf16x2(w.x), e4m3x2_to_bf16x2(w.x >> 16),
                                     e4m3x2_to_bf16x2(w.y), e4m3x2_to_bf16x2(w.y >> 16));
                *reinterpret_cast<uint4 *>(kt_s + key * kFlRowB + pc * 16) = o;
            }
            __syncthreads();
        }
        { // S partial: 16 heads x 32 keys over this warp's latent slice
            float sacc[4][4];
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
                sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.0f;
            const unsigned char *qa = q_s + (qg * 16 + (lane & 15)) * kFlRowB +
                                      (qs * QKW + (lane >> 4) * 8) * 2;
            const unsigned char *kb = kt + ((lane >> 4) * 8 + (lane & 7)) * kFlRowB +
                                      (qs * QKW + ((lane >> 3) & 1) * 8) * 2;
#pragma unroll 4
            for (int k = 0; k < QKW; k += 16) {
                uint32_t ah[4], al[4], b0[4], b1[4];
                ldsm_x4(ah, qa + k * 2);
                ldsm_x4(al, qa + ROWS * kFlRowB + k * 2);
                ldsm_x4(b0, kb + k * 2);
                ldsm_x4(b1, kb + 16 * kFlRowB + k * 2);
                mma_bf16(sacc[0], ah, b0);
                mma_bf16(sacc[0], al, b0);
                mma_bf16(sacc[1], ah, b0 + 2);
                mma_bf16(sacc[1], al, b0 + 2);
                mma_bf16(sacc[2], ah, b1);
                mma_bf16(sacc[2], al, b1);
                mma_bf16(sacc[3], ah, b1 + 2);
                mma_bf16(sacc[3], al, b1 + 2);
            }
            float *sp = spart + (size_t)qs * ROWS * kFlSS;
            int ra = qg * 16 + g, rb = ra + 8;
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                int key = nt * 8 + 2 * c;
                *reinterpret_cast<float2 *>(sp + ra * kFlSS + key) = make_float2(sacc[nt][0], sacc[nt][1]);
                *reinterpret_cast<float2 *>(sp + rb * kFlSS + key) = make_float2(sacc[nt][2], sacc[nt][3]);
            }
        }
        __syncthreads();
        if (sm_on) { // the slices' sums in slice order, the online softmax, P split
            float v[8], ks[8], mx = -INFINITY;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float4 a = *reinterpret_cast<const float4 *>(spart + sm_row * kFlSS + sm_k + 4 * h);
#pragma unroll
                for (int sl = 1; sl < SPLIT; sl++) {
                    float4 b = *reinterpret_cast<const float4 *>(
                        spart + (sl * ROWS + sm_row) * kFlSS + sm_k + 4 * h);
                    a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
                }
                v[4 * h] = a.x, v[4 * h + 1] = a.y, v[4 * h + 2] = a.z, v[4 * h + 3] = a.w;
            }
#pragma unroll
            for (int j = 0; j < 8; j++) {
                ks[j] = kFp8 ? ksc_s[stage * kFlKeys + sm_k + j] : 1.0f;
                v[j] = s0 + sm_k + j < n ? v[j] * ks[j] * scale : -INFINITY;
                mx = fmaxf(mx, v[j]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float m_new = fmaxf(m_run, mx), alpha = expf(m_run - m_new), psum = 0.0f;
            uint16_t hi[8], lo[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float p = s0 + sm_k + j < n ? expf(v[j] - m_new) : 0.0f;
                psum += p;
                float w = p * ks[j]; // the row's scale (a power of two: exact)
                hi[j] = bf16_rn(w);
                lo[j] = bf16_rn(w - bf16_bits_to_f32(hi[j]));
            }
            *reinterpret_cast<uint4 *>(p_s + sm_row * kFlPS + sm_k) =
                make_uint4(pack_pair(hi[0], hi[1]), pack_pair(hi[2], hi[3]),
                           pack_pair(hi[4], hi[5]), pack_pair(hi[6], hi[7]));
            *reinterpret_cast<uint4 *>(p_s + (ROWS + sm_row) * kFlPS + sm_k) =
                make_uint4(pack_pair(lo[0], lo[1]), pack_pair(lo[2], lo[3]),
                           pack_pair(lo[4], lo[5]), pack_pair(lo[6], lo[7]));
            psum += __shfl_xor_sync(0xffffffffu, psum, 1);
            psum += __shfl_xor_sync(0xffffffffu, psum, 2);
            l_run = l_run * alpha + psum;
            m_run = m_new;
            if ((tid & 3) == 0)
                alpha_s[sm_row] = alpha;
        }
        __syncthreads();
        { // O = alpha O + P V over this warp's head groups and columns
            float al[HGW][2];
            bool one = true;
#pragma unroll
            for (int j = 0; j < HGW; j++) {
                al[j][0] = alpha_s[(og + j) * 16 + g];
                al[j][1] = alpha_s[(og + j) * 16 + g + 8];
                one = one && al[j][0] == 1.0f && al[j][1] == 1.0f;
            }
            if (!__all_sync(0xffffffffu, one)) // (times 1 leaves the bits as they are)
#pragma unroll
                for (int j = 0; j < HGW; j++)
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        oacc[j][nt][0] *= al[j][0], oacc[j][nt][1] *= al[j][0];
                        oacc[j][nt][2] *= al[j][1], oacc[j][nt][3] *= al[j][1];
                    }
#pragma unroll
            for (int kk = 0; kk < kFlKeys; kk += 16) {
                uint32_t pa[HGW][2][4];
#pragma unroll
                for (int j = 0; j < HGW; j++) {
                    const uint16_t *pr = p_s + ((og + j) * 16 + (lane & 15)) * kFlPS + kk + (lane >> 4) * 8;
                    ldsm_x4(pa[j][0], pr);
                    ldsm_x4(pa[j][1], pr + ROWS * kFlPS);
                }
                const unsigned char *vb = kt + (kk + ((lane >> 3) & 1) * 8 + (lane & 7)) * kFlRowB +
                                          (oc * CW + (lane >> 4) * 8) * 2;
#pragma unroll
                for (int nt = 0; nt < NT; nt += 2) {
                    uint32_t b[4];
                    ldsm_x4_trans(b, vb + nt * 16);
#pragma unroll
                    for (int j = 0; j < HGW; j++) {
                        mma_bf16(oacc[j][nt], pa[j][0], b);
                        mma_bf16(oacc[j][nt], pa[j][1], b);
                        mma_bf16(oacc[j][nt + 1], pa[j][0], b + 2);
                        mma_bf16(oacc[j][nt + 1], pa[j][1], b + 2);
                    }
                }
            }
        }
    }
    if (sm_on && (tid & 3) == 0)
        l_s[sm_row] = l_run;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < HGW; j++) {
        int ra = (og + j) * 16 + g, rb = ra + 8;
        float ia = l_s[ra] > 0.0f ? 1.0f / l_s[ra] : 0.0f, ib = l_s[rb] > 0.0f ? 1.0f / l_s[rb] : 0.0f;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            int col = oc * CW + nt * 8 + 2 * c;
            if (ra < nh)
                *reinterpret_cast<float2 *>(ot + ((size_t)t * H + h0 + ra) * R + col) =
                    make_float2(oacc[j][nt][0] * ia, oacc[j][nt][1] * ia);
            if (rb < nh)
                *reinterpret_cast<float2 *>(ot + ((size_t)t * H + h0 + rb) * R + col) =
                    make_float2(oacc[j][nt][2] * ib, oacc[j][nt][3] * ib);
        }
    }
}

template <int NG, int CACHE>
int launch_attend_flash(const eng_cache *lat, const float *qt, const int32_t *idx, const int *count,
                        int width, int T, int H, float scale, float *ot, cudaStream_t st)
{
    size_t smem = (size_t)fl_layout_for(NG, CACHE == ENG_CACHE_FP8).bytes;
    static int smem_set; // the opt-in above 48 KiB, once an instantiation
    if (!smem_set) {
        int rc = (int)cudaFuncSetAttribute(attend_flash_kernel<NG, CACHE>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (rc)
            return rc;
        smem_set = 1;
    }
    dim3 grid(T, (H + 63) / 64);
    launch(attend_flash_kernel<NG, CACHE>, grid, kFlThreads, smem, st, *lat, qt, idx, count, width,
           T, H, scale, ot);
    return (int)cudaGetLastError();
}

// The head groups of 16 the flash kernel runs a block with for H heads (1, 2 or 4), or 0 where
// it does not take the shape: the latent width kFlR, a bf16 or e4m3 cache, 16-byte rows of qt,
// 8-byte rows of ot, and its shared memory within the device's limit.
int attend_flash_groups(const eng_cache *lat, int H, int R, const float *qt, const float *ot)
{
    int ng = ((H < 64 ? H : 64) + 15) / 16;
    ng = ng == 3 ? 4 : ng;
    if (R != kFlR || lat->width != R || (uintptr_t)qt % 16 || (uintptr_t)ot % 8 ||
        (lat->dtype != ENG_CACHE_FP8 && lat->dtype != ENG_CACHE_BF16) || H > 65535 * 64)
        return 0;
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return 0;
    return fl_layout_for(ng, lat->dtype == ENG_CACHE_FP8).bytes <= optin ? ng : 0;
}

int attend_flash_run(const eng_cache *lat, const float *qt, const int32_t *idx, const int *count,
                     int width, int T, int H, int ng, float scale, float *ot, cudaStream_t st)
{
    if (lat->dtype == ENG_CACHE_FP8) {
        switch (ng) {
        case 1: return launch_attend_flash<1, ENG_CACHE_FP8>(lat, qt, idx, count, width, T, H, scale, ot, st);
        case 2: return launch_attend_flash<2, ENG_CACHE_FP8>(lat, qt, idx, count, width, T, H, scale, ot, st);
        default: return launch_attend_flash<4, ENG_CACHE_FP8>(lat, qt, idx, count, width, T, H, scale, ot, st);
        }
    }
    switch (ng) {
    case 1: return launch_attend_flash<1, ENG_CACHE_BF16>(lat, qt, idx, count, width, T, H, scale, ot, st);
    case 2: return launch_attend_flash<2, ENG_CACHE_BF16>(lat, qt, idx, count, width, T, H, scale, ot, st);
    default: return launch_attend_flash<4, ENG_CACHE_BF16>(lat, qt, idx, count, width, T, H, scale, ot, st);
    }
}

} // namespace

extern "C" int eng_mla_absorb_prefill(const eng_mat *kv_b, const float *q, int T, int H, int dn,
                                      int dv, int R, float *qt, void *stream)
{
    if (T < 1 || H < 1)
        return -1;
    if (kv_b->dtype != ENG_BF16 || kv_b->cols != R || R % kHgN || dn % kHgK ||
        (uintptr_t)kv_b->data % 16 || (uintptr_t)q % 16 || (uintptr_t)qt % 8 || H > 65535)
        return eng_mla_absorb(kv_b, q, T, H, dn, dv, R, qt, stream); // the same sums, scalar
    dim3 grid(blocks_for((size_t)T, kHgM), R / kHgN, H);
    launch(head_gemm_kernel, grid, 128, 0, static_cast<cudaStream_t>(stream),
           static_cast<const uint16_t *>(kv_b->data), R, dn + dv, 0, 1, q, T, H, dn, R, qt);
    return (int)cudaGetLastError();
}

extern "C" int eng_mla_expand_prefill(const eng_mat *kv_b, const float *ot, int T, int H, int dn,
                                      int dv, int R, float *o, void *stream)
{
    if (T < 1 || H < 1)
        return -1;
    if (kv_b->dtype != ENG_BF16 || kv_b->cols != R || dv % kHgN || R % kHgK ||
        (uintptr_t)kv_b->data % 16 || (uintptr_t)ot % 16 || (uintptr_t)o % 8 || H > 65535)
        return eng_mla_expand(kv_b, ot, T, H, dn, dv, R, o, stream); // the same sums, scalar
    dim3 grid(blocks_for((size_t)T, kHgM), dv / kHgN, H);
    launch(head_gemm_kernel, grid, 128, 0, static_cast<cudaStream_t>(stream),
           static_cast<const uint16_t *>(kv_b->data), R, dn + dv, dn, 0, ot, T, H, R, dv, o);
    return (int)cudaGetLastError();
}

extern "C" int eng_mla_attend_prefill_with(int kernel, const eng_cache *lat, const float *qt,
                                           const int32_t *idx, const int *count, int width, int T,
                                           int H, int R, float scale, float *ot, void *stream)
{
    if (T < 1 || H < 1 || (kernel != ENG_ATTEND_FLASH && kernel != ENG_ATTEND_TILED))
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    int ng = kernel == ENG_ATTEND_FLASH ? attend_flash_groups(lat, H, R, qt, ot) : 0;
    if (ng)
        return attend_flash_run(lat, qt, idx, count, width, T, H, ng, scale, ot, st);
    int gp, wg, qw;
    size_t smem;
    if (attend_mma_shape(lat, H, R, ot, &gp, &wg, &qw, &smem))
        return attend_mma_run(lat, qt, idx, count, width, T, H, R, gp, wg, qw, scale, ot, smem, st);
    // the f32 cache (the exact one) and shapes outside the tiles: the scalar kernels, same sums
    return eng_mla_attend(lat, qt, idx, count, width, T, H, R, scale, ot, stream);
}

extern "C" int eng_mla_attend_prefill(const eng_cache *lat, const float *qt, const int32_t *idx,
                                      const int *count, int width, int T, int H, int R,
                                      float scale, float *ot, void *stream)
{
    return eng_mla_attend_prefill_with(ENG_ATTEND_FLASH, lat, qt, idx, count, width, T, H, R,
                                       scale, ot, stream);
}
