// engine_attend_prefill.cu: the prefill's latent attention on the tensor cores (architecture.md
// 2.5): the absorbed query and value expansion as per-head products, and MLA over the selection
// (the flash kernel; shapes it does not take run the scalar kernels of engine_attend.cu).

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

// ---- the flash form: a row's heads on the tensor cores over tiles of its selected keys ----
// One block a query row (long rows first) and up to 64 of its heads (blockIdx.x: row, group):
// the heads share the row's selection, so they are the M dimension of every product. Per tile
// of kFlKeys selected latent rows, brought in one tile ahead into the other of two bf16 tiles
// (bf16 rows by cp.async; e4m3 rows by register loads, widened exactly into bf16 by the thread
// that loaded them, with no barrier between: their power-of-two scale is left out of the tile
// and applied to the scores and to the softmax weights instead):
//   S = Q K^T with Q = hi + lo bf16 parts of the f32 query (two mma a product, f32 sums); eight
//     warps, each one head group of 16 over a slice of the latent width, the slices' partial
//     sums added in slice order;
//   an online softmax (running maximum and sum a head, expf);
//   O += P V with P = hi + lo bf16 parts of the f32 weights (times the row's scale), V the same
//     bf16 tile read transposed by ldmatrix; each warp its head groups x a slice of O's columns.
// Every sum runs in an order fixed by the row's own selection alone, so a row's result is the
// same bits in any chunk and at any place in it.
// STAGES 2 keeps two key tiles in shared memory (the next one lands while this one's products
// run); STAGES 1, the small form for devices with less shared memory a block (sm_120/sm_121, the
// GB10 Sparks: 99 KiB), keeps one, sixteen heads a block: the next tile's rows wait in registers
// (both caches) during this tile's products and are stored after its P V. A head's sums are the
// same in both forms for the same head groups a block, so STAGES 1 gives the bits of NG 1 STAGES 2.
constexpr int kFlKeys = 32;              // keys a tile
constexpr int kFlThreads = 256;          // eight warps
constexpr int kFlR = 512;                // the latent width it takes
constexpr int kFlRowB = kFlR * 2 + 16;   // bytes a bf16 row (Q, K) in shared memory: the 16-byte
                                         // shift a row puts ldmatrix's 8 rows in distinct banks
constexpr int kFlSS = kFlKeys + 8;       // floats a row of partial scores
constexpr int kFlPS = kFlKeys + 8;       // bf16 a row of softmax weights (80 bytes)

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

// The layout of the flash kernel's shared memory for NG head groups of 16 and STAGES key tiles:
// byte offsets of its arrays and the total.
struct fl_layout {
    int q, kt, spart, p, alpha, lsum, ksc, bytes;
};

static __host__ __device__ constexpr int fl_split(int ng) { return 8 / ng; }

static __host__ __device__ fl_layout fl_layout_for(int ng, int stages)
{
    fl_layout l{};
    int rows = 16 * ng;
    l.q = 0;                                                   // [2][rows][kFlRowB]: hi, lo
    l.kt = l.q + 2 * rows * kFlRowB;                           // [stages][kFlKeys][kFlRowB]
    l.spart = l.kt + stages * kFlKeys * kFlRowB;               // [split][rows][kFlSS] f32
    l.p = l.spart + fl_split(ng) * rows * kFlSS * 4;           // [2][rows][kFlPS] bf16: hi, lo
    l.alpha = l.p + 2 * rows * kFlPS * 2;                      // [rows] f32
    l.lsum = l.alpha + rows * 4;                               // [rows] f32
    l.ksc = l.lsum + rows * 4;                                 // [stages][kFlKeys] f32
    l.bytes = l.ksc + stages * kFlKeys * 4;
    return l;
}

template <int NG, int CACHE, int STAGES>
__global__ void __launch_bounds__(kFlThreads, 1)
    attend_flash_kernel(eng_cache lat, const float *qt, const int32_t *idx, const int *count,
                        int width, int T, int H, float scale, float *ot)
{
    pdl_prologue();
    constexpr bool kFp8 = CACHE == ENG_CACHE_FP8;
    // e4m3 rows through registers, widened by their loader; with one tile bf16 rows too (the
    // registers are the second stage)
    constexpr bool kRegs = kFp8 || STAGES == 1;
    constexpr int R = kFlR, ROWS = 16 * NG;
    constexpr int SPLIT = fl_split(NG), QKW = R / SPLIT;   // S: slices of the latent width
    constexpr int HGW = NG < 2 ? NG : 2;                    // O: head groups a warp
    constexpr int PVC = 8 / (NG / HGW), CW = R / PVC;       // O: column slices, their width
    constexpr int NT = CW / 8;
    constexpr int ROW_BYTES = kFp8 ? R : 2 * R;             // a cache row
    constexpr int CHUNKS = ROW_BYTES / 16, PER = kFlKeys * CHUNKS / kFlThreads;
    static_assert(QKW % 16 == 0 && NT % 2 == 0 && PER * kFlThreads == kFlKeys * CHUNKS, "tile");
    static_assert(STAGES == 1 || STAGES == 2, "stages");
    extern __shared__ __align__(16) unsigned char smem[];
    const fl_layout L = fl_layout_for(NG, STAGES);
    unsigned char *q_s = smem + L.q, *kt_s = smem + L.kt;
    float *spart = reinterpret_cast<float *>(smem + L.spart);
    uint16_t *p_s = reinterpret_cast<uint16_t *>(smem + L.p);
    float *alpha_s = reinterpret_cast<float *>(smem + L.alpha);
    float *l_s = reinterpret_cast<float *>(smem + L.lsum);
    float *ksc_s = reinterpret_cast<float *>(smem + L.ksc);

    // the long rows (later in a chunk) first; a row's head groups side by side, so its key rows
    // come from device memory once and from L2 for the other groups
    const int groups = (H + ROWS - 1) / ROWS;
    const int t = T - 1 - (int)(blockIdx.x / groups);
    const int h0 = (int)(blockIdx.x % groups) * ROWS, nh = H - h0 < ROWS ? H - h0 : ROWS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int n = count[t];
    const int32_t *sel = idx + (size_t)t * width;

    // bf16: the tile's rows into shared memory by cp.async (stage tile & 1), zeros past the
    // selection
    auto issue = [&](int tile) {
        int s0 = tile * kFlKeys, stage = tile % STAGES;
        unsigned char *dst0 = kt_s + stage * kFlKeys * kFlRowB;
#pragma unroll
        for (int u = 0; u < PER; u++) {
            int i = tid + u * kFlThreads, key = i / CHUNKS, pc = i % CHUNKS, s = s0 + key;
            bool ok = s < n;
            size_t row = ok ? (size_t)(uint32_t)sel[s] : 0;
            const unsigned char *src = static_cast<const unsigned char *>(lat.rows) +
                                       row * ROW_BYTES + pc * 16;
            cp_async16_zfill(dst0 + key * kFlRowB + pc * 16, src, ok ? 16 : 0);
        }
        cp_async_commit_group();
    };
    // kRegs: the tile's e4m3 (or bf16) pieces into registers, then (once the tile before is done
    // with the bf16 buffer) widened (or copied) into it by the thread that loaded them
    uint4 stg[PER];
    float stsc[PER];
    auto fetch = [&](int tile) {
        int s0 = tile * kFlKeys;
#pragma unroll
        for (int u = 0; u < PER; u++) {
            int i = tid + u * kFlThreads, key = i / CHUNKS, pc = i % CHUNKS, s = s0 + key;
            stg[u] = make_uint4(0u, 0u, 0u, 0u);
            stsc[u] = 0.0f;
            if (s < n) {
                size_t row = (size_t)(uint32_t)sel[s];
                stg[u] = __ldg(reinterpret_cast<const uint4 *>(static_cast<const unsigned char *>(lat.rows) +
                                                               row * ROW_BYTES) + pc);
                if (kFp8 && pc == 0)
                    stsc[u] = lat.scale[row];
            }
        }
    };
    auto widen = [&](int tile) {
        int stage = tile % STAGES;
        unsigned char *dst0 = kt_s + stage * kFlKeys * kFlRowB;
#pragma unroll
        for (int u = 0; u < PER; u++) {
            int i = tid + u * kFlThreads, key = i / CHUNKS, pc = i % CHUNKS;
            uint4 w = stg[u];
            if (!kFp8) { // bf16 pieces as they are (eight lanes: one row's 128 bytes)
                *reinterpret_cast<uint4 *>(dst0 + key * kFlRowB + pc * 16) = w;
                continue;
            }
            unsigned char *dst = dst0 + key * kFlRowB + pc * 32;
            uint4 a = make_uint4(e4m3x2_to_bf16x2(w.x), e4m3x2_to_bf16x2(w.x >> 16),
                                 e4m3x2_to_bf16x2(w.y), e4m3x2_to_bf16x2(w.y >> 16));
            uint4 b = make_uint4(e4m3x2_to_bf16x2(w.z), e4m3x2_to_bf16x2(w.z >> 16),
                                 e4m3x2_to_bf16x2(w.w), e4m3x2_to_bf16x2(w.w >> 16));
            // lanes 4-7 of each eight store their second half first: the eight 16-byte stores
            // of one instruction then fall in distinct banks
            bool swap = (pc >> 2) & 1;
            *reinterpret_cast<uint4 *>(dst + (swap ? 16 : 0)) = swap ? b : a;
            *reinterpret_cast<uint4 *>(dst + (swap ? 0 : 16)) = swap ? a : b;
            if (pc == 0)
                ksc_s[stage * kFlKeys + key] = stsc[u];
        }
    };
    const int ntiles = (n + kFlKeys - 1) / kFlKeys;
    if (ntiles > 0) {
        if (kRegs)
            fetch(0); // widened after the query's loads, so the two are in flight together
        else
            issue(0);
    }

    { // Q, split into hi and lo bf16 parts; heads past H zero. Sixteen loads in flight a thread
      // (the row's 128 KiB of qt come from device memory while nothing else runs on the SM)
        constexpr int QV = ROWS * R / 4 / kFlThreads, QB = QV < 16 ? QV : 16;
        static_assert(QV % QB == 0, "Q pieces");
        const float *qrow = qt + ((size_t)t * H + h0) * R;
#pragma unroll 1
        for (int b = 0; b < QV; b += QB) {
            float4 v[QB];
#pragma unroll
            for (int u = 0; u < QB; u++) {
                int i = tid + (b + u) * kFlThreads, r = i / (R / 4), d = (i % (R / 4)) * 4;
                v[u] = r < nh ? __ldg(reinterpret_cast<const float4 *>(qrow + (size_t)r * R + d))
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int u = 0; u < QB; u++) {
                int i = tid + (b + u) * kFlThreads, r = i / (R / 4), d = (i % (R / 4)) * 4;
                float e[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
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
    }

    if (kRegs && ntiles > 0)
        widen(0);

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
        const int stage = tile % STAGES, s0 = tile * kFlKeys;
        if (!kRegs)
            cp_async_wait_groups_all();
        __syncthreads(); // the tile is in; the last tile's P V is done with kt, p_s (Q stored)
        if (!kRegs && tile + 1 < ntiles)
            issue(tile + 1); // in flight during this tile's products
        if (kRegs && tile + 1 < ntiles)
            fetch(tile + 1); // in flight during this tile's products
        const unsigned char *kt = kt_s + stage * kFlKeys * kFlRowB;
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
            if (kFp8) {
                float4 k0 = *reinterpret_cast<const float4 *>(ksc_s + stage * kFlKeys + sm_k);
                float4 k1 = *reinterpret_cast<const float4 *>(ksc_s + stage * kFlKeys + sm_k + 4);
                ks[0] = k0.x, ks[1] = k0.y, ks[2] = k0.z, ks[3] = k0.w;
                ks[4] = k1.x, ks[5] = k1.y, ks[6] = k1.z, ks[7] = k1.w;
            } else {
#pragma unroll
                for (int j = 0; j < 8; j++)
                    ks[j] = 1.0f;
            }
#pragma unroll
            for (int j = 0; j < 8; j++) {
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
        if (kRegs && tile + 1 < ntiles) {
            if (STAGES == 1)
                __syncthreads(); // the one buffer: every warp's P V is done with it
            widen(tile + 1);     // STAGES 2: the other buffer, whose P V ended before S's barrier
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

template <int NG, int CACHE, int STAGES>
int launch_attend_flash(const eng_cache *lat, const float *qt, const int32_t *idx, const int *count,
                        int width, int T, int H, float scale, float *ot, cudaStream_t st)
{
    size_t smem = (size_t)fl_layout_for(NG, STAGES).bytes;
    int rc = (int)raise_smem_once<attend_flash_kernel<NG, CACHE, STAGES>>(
        smem, "the flash latent attention kernel");
    if (rc)
        return rc;
    long long blocks = (long long)T * ((H + 16 * NG - 1) / (16 * NG));
    if (blocks > 0x7fffffffLL)
        return (int)cudaErrorInvalidValue; // a grid's x is below 2^31
    dim3 grid((unsigned)blocks);
    launch(attend_flash_kernel<NG, CACHE, STAGES>, grid, kFlThreads, smem, st, *lat, qt, idx, count,
           width, T, H, scale, ot);
    return (int)cudaGetLastError();
}

// The flash kernel's form for H heads within `budget` bytes of shared memory a block (the
// device's opt-in limit where budget < 0, and never above it), or heads 0 where it does not take
// the shape: the latent width kFlR, a bf16 or e4m3 cache with 16-byte rows, 16-byte rows of qt,
// 8-byte rows of ot. The head groups a block are those H needs (1, 2 or 4 of 16), or fewer where
// those do not fit; two key tiles where one group fits (fl_layout_for: 120 KiB for one group,
// 226 KiB for four), else one (88 KiB): sm_90 (227 KiB a block) runs the big form, sm_120/sm_121
// (the GB10 Sparks: 99 KiB) the small one; a device below 88 KiB the scalar kernels.
eng_mla_prefill_form attend_flash_plan(const eng_cache *lat, int H, int R, const float *qt,
                                       const float *ot, int budget)
{
    eng_mla_prefill_form none = {0, 0, 0};
    if (H < 1 || R != kFlR || lat->width != R || (uintptr_t)qt % 16 || (uintptr_t)ot % 8 ||
        (uintptr_t)lat->rows % 16 || (lat->dtype != ENG_CACHE_FP8 && lat->dtype != ENG_CACHE_BF16))
        return none;
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return none;
    if (budget < 0 || budget > optin)
        budget = optin;
    int want = ((H < 64 ? H : 64) + 15) / 16;
    want = want == 3 ? 4 : want;
    for (int ng = want; ng >= 1; ng /= 2) {
        int bytes = fl_layout_for(ng, 2).bytes;
        if (bytes <= budget)
            return eng_mla_prefill_form{16 * ng, 2, bytes};
    }
    int bytes = fl_layout_for(1, 1).bytes;
    if (bytes <= budget)
        return eng_mla_prefill_form{16, 1, bytes};
    return none;
}

template <int NG, int STAGES>
int launch_attend_flash_cache(const eng_cache *lat, const float *qt, const int32_t *idx,
                              const int *count, int width, int T, int H, float scale, float *ot,
                              cudaStream_t st)
{
    if (lat->dtype == ENG_CACHE_FP8)
        return launch_attend_flash<NG, ENG_CACHE_FP8, STAGES>(lat, qt, idx, count, width, T, H,
                                                              scale, ot, st);
    return launch_attend_flash<NG, ENG_CACHE_BF16, STAGES>(lat, qt, idx, count, width, T, H, scale,
                                                           ot, st);
}

int attend_flash_run(const eng_cache *lat, const float *qt, const int32_t *idx, const int *count,
                     int width, int T, int H, eng_mla_prefill_form f, float scale, float *ot,
                     cudaStream_t st)
{
    if (f.stages == 1)
        return launch_attend_flash_cache<1, 1>(lat, qt, idx, count, width, T, H, scale, ot, st);
    switch (f.heads) {
    case 16: return launch_attend_flash_cache<1, 2>(lat, qt, idx, count, width, T, H, scale, ot, st);
    case 32: return launch_attend_flash_cache<2, 2>(lat, qt, idx, count, width, T, H, scale, ot, st);
    default: return launch_attend_flash_cache<4, 2>(lat, qt, idx, count, width, T, H, scale, ot, st);
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

extern "C" eng_mla_prefill_form eng_mla_attend_prefill_form(const eng_cache *lat, int H, int R,
                                                         const float *qt, const float *ot,
                                                         int smem_budget)
{
    return attend_flash_plan(lat, H, R, qt, ot, smem_budget);
}

extern "C" int eng_mla_attend_prefill_takes(const eng_cache *lat, int H, int R, const float *qt,
                                            const float *ot)
{
    return attend_flash_plan(lat, H, R, qt, ot, -1).heads != 0;
}

extern "C" int eng_mla_attend_prefill_budget(const eng_cache *lat, const float *qt,
                                             const int32_t *idx, const int *count, int width, int T,
                                             int H, int R, float scale, float *ot, int smem_budget,
                                             void *stream)
{
    if (T < 1 || H < 1)
        return -1;
    eng_mla_prefill_form f = attend_flash_plan(lat, H, R, qt, ot, smem_budget);
    if (f.heads)
        return attend_flash_run(lat, qt, idx, count, width, T, H, f, scale, ot,
                                static_cast<cudaStream_t>(stream));
    // The shapes the flash kernel does not take run the scalar kernels (eng_mla_attend, the same
    // sums, checked against the CPU by test_mla_gpu): the f32 cache, latent widths other than
    // 512, misaligned qt, ot or cache rows, and every shape on a device (or under a budget)
    // whose shared memory a block is below the small form's 88 KiB.
    return eng_mla_attend(lat, qt, idx, count, width, T, H, R, scale, ot, stream);
}

// Which form runs where: sm_90 the big form (two key tiles, up to 64 heads a block), sm_120 and
// sm_121 (99 KiB a block) the small one (one tile, 16 heads a block), smaller devices the scalar
// kernels; eng_mla_attend_prefill_form says which for a shape.
extern "C" int eng_mla_attend_prefill(const eng_cache *lat, const float *qt, const int32_t *idx,
                                      const int *count, int width, int T, int H, int R,
                                      float scale, float *ot, void *stream)
{
    return eng_mla_attend_prefill_budget(lat, qt, idx, count, width, T, H, R, scale, ot, -1, stream);
}
