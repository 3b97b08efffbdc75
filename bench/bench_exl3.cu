// bench_exl3.cu: EXL3 kernel speed at GLM-5.3-Flash's shapes (gate/up 4096->2048, down
// 2048->4096, 288 experts, 8 a row): trellis bytes read per second over the device-to-device
// copy bandwidth measured in the same run; the grouped prefill experts' kernels at 32, 128 and
// 512 rows an expert, timed and checked bit for bit against each other, and the grouped products
// alone (gate, up, down) likewise and for chunks of 2,048-4,096 rows routed at random.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels.h"

#define CHECK(call)                                                                            \
    do {                                                                                       \
        cudaError_t rc_ = (call);                                                              \
        if (rc_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                      \
                    cudaGetErrorString(rc_));                                                  \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#define KCHECK(call)                                                                           \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != 0) {                                                                        \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                      \
                    kern_error_string(rc_));                                                   \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

__global__ void fill_random(uint32_t *p, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t v = (uint32_t)i * 0x9E3779B1u ^ seed;
        v ^= v >> 16;
        v *= 0x85EBCA6Bu;
        v ^= v >> 13;
        v *= 0xC2B2AE35u;
        v ^= v >> 16;
        p[i] = v;
    }
}

// fp16 scales of magnitude `scale` with random signs (bits of the random words)
__global__ void fill_scales(uint16_t *p, size_t n, float scale, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t v = (uint32_t)i * 0x9E3779B1u ^ seed;
        v ^= v >> 15;
        v *= 0x2C1B3C6Du;
        v ^= v >> 12;
        __half h = __float2half(((v & 1) ? -scale : scale) * (0.75f + 0.5f * ((v >> 8) & 255) / 255.0f));
        p[i] = *reinterpret_cast<uint16_t *>(&h);
    }
}

static void *dalloc(size_t bytes)
{
    void *p = nullptr;
    CHECK(cudaMalloc(&p, bytes));
    return p;
}

// Milliseconds n calls of call(it) take (it = 0 .. n - 1), between the events t0 and t1.
template <typename Call> static float elapsed_ms(Call call, int n, cudaEvent_t t0, cudaEvent_t t1)
{
    CHECK(cudaEventRecord(t0));
    for (int it = 0; it < n; it++)
        call(it);
    CHECK(cudaEventRecord(t1));
    CHECK(cudaEventSynchronize(t1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    return ms;
}

// Milliseconds a call: the median of 5 runs of n calls.
template <typename Call>
static float median_ms_per_call(Call call, int n, cudaEvent_t t0, cudaEvent_t t1)
{
    float times[5];
    for (int rep = 0; rep < 5; rep++)
        times[rep] = elapsed_ms(call, n, t0, t1) / n;
    std::sort(times, times + 5);
    return times[2];
}

// The grouped tables' last cell: outputs left unwritten (NaN), the reference (variant 0), or
// whether the variant's bits equal the reference's.
static const char *bits_verdict(size_t nan, int vi, size_t differ)
{
    return nan ? "FAIL: unwritten (NaN) outputs" : !vi ? "(the reference)"
           : differ ? "FAIL: differ" : "yes";
}

static uint32_t lcg = 12345;
static uint32_t rnd()
{
    lcg = lcg * 1664525u + 1013904223u;
    return lcg >> 8;
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 200;
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const int E = 288, H = 4096, I = 2048, SLOTS = 8;
    const size_t mat_bytes = (size_t)H / 16 * (I / 16) * 64 * 2; // 4 bits: 4 MiB
    const size_t mat_words = mat_bytes / 4;
    printf("device %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);

    // ---- ceiling: device-to-device copy ----
    size_t copy_bytes = (size_t)1 << 30;
    void *ca = dalloc(copy_bytes), *cbuf = dalloc(copy_bytes);
    CHECK(cudaMemset(ca, 1, copy_bytes));
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    CHECK(cudaMemcpy(cbuf, ca, copy_bytes, cudaMemcpyDeviceToDevice));
    float ms = elapsed_ms([&](int) {
        CHECK(cudaMemcpyAsync(cbuf, ca, copy_bytes, cudaMemcpyDeviceToDevice));
    }, 10, t0, t1);
    double copy_read = copy_bytes * 10.0 / (ms * 1e-3);   // bytes read per second
    double copy_traffic = 2.0 * copy_read;                // read + write
    CHECK(cudaFree(ca));
    CHECK(cudaFree(cbuf));

    // ---- 288 experts of random 4-bit mcg trellises ----
    kern_exl3_experts ex = {};
    ex.n_experts = E;
    ex.hidden = H;
    ex.inter = I;
    ex.bits = 4;
    ex.codebook = 1;
    ex.swiglu_limit = 10.0f;
    void *gt = dalloc(E * mat_bytes), *ut = dalloc(E * mat_bytes), *dt = dalloc(E * mat_bytes);
    fill_random<<<1024, 256>>>((uint32_t *)gt, E * mat_words, 1);
    fill_random<<<1024, 256>>>((uint32_t *)ut, E * mat_words, 2);
    fill_random<<<1024, 256>>>((uint32_t *)dt, E * mat_words, 3);
    void *scales[6];
    size_t scale_len[6] = {(size_t)E * H, (size_t)E * I, (size_t)E * H, (size_t)E * I,
                           (size_t)E * I, (size_t)E * H};
    float scale_mag[6] = {1.0f / 64, 2.0f, 1.0f / 64, 2.0f, 1.0f / 45, 1.0f};
    for (int i = 0; i < 6; i++) {
        scales[i] = dalloc(scale_len[i] * 2);
        fill_scales<<<256, 256>>>((uint16_t *)scales[i], scale_len[i], scale_mag[i], 10 + i);
    }
    CHECK(cudaGetLastError());
    ex.gate_trellis = gt;
    ex.up_trellis = ut;
    ex.down_trellis = dt;
    ex.gate_suh = scales[0];
    ex.gate_svh = scales[1];
    ex.up_suh = scales[2];
    ex.up_svh = scales[3];
    ex.down_suh = scales[4];
    ex.down_svh = scales[5];

    const int max_rows = 16;
    std::vector<float> hx((size_t)max_rows * H);
    for (auto &v : hx)
        v = (float)(rnd() % 2001) / 1000.0f - 1.0f;
    float *dx = (float *)dalloc(hx.size() * 4), *dy = (float *)dalloc(hx.size() * 4);
    CHECK(cudaMemcpy(dx, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    const int sets = 64; // routing sets cycled so that weights come from DRAM, not L2
    int32_t *dids = (int32_t *)dalloc((size_t)sets * max_rows * SLOTS * 4);
    float *dwts = (float *)dalloc((size_t)sets * max_rows * SLOTS * 4);
    void *work = dalloc(kern_exl3_moe_workspace(&ex, max_rows, SLOTS));
    CHECK(cudaMemset(work, 0, kern_exl3_moe_workspace(&ex, max_rows, SLOTS)));

    struct row_result {
        const char *what;
        int rows;
        double us, gbs, frac;
    };
    std::vector<row_result> results;
    int row_counts[3] = {1, 4, 16};
    for (int rc = 0; rc < 3; rc++) {
        int rows = row_counts[rc];
        std::vector<int32_t> ids((size_t)sets * rows * SLOTS);
        std::vector<float> wts(ids.size(), 0.125f);
        double unique_total = 0;
        for (int s = 0; s < sets; s++) {
            std::vector<char> used(E, 0);
            for (int r = 0; r < rows; r++)
                for (int k = 0; k < SLOTS; k++) {
                    int e;
                    bool dup;
                    do {
                        e = (int)(rnd() % E);
                        dup = false;
                        for (int q = 0; q < k; q++)
                            dup |= ids[((size_t)s * rows + r) * SLOTS + q] == e;
                    } while (dup);
                    ids[((size_t)s * rows + r) * SLOTS + k] = e;
                    if (!used[e]) {
                        used[e] = 1;
                        unique_total += 1;
                    }
                }
        }
        CHECK(cudaMemcpy(dids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dwts, wts.data(), wts.size() * 4, cudaMemcpyHostToDevice));
        for (int w = 0; w < 3; w++)
            KCHECK(kern_exl3_moe(&ex, dx, dids + (size_t)w * rows * SLOTS,
                                 dwts + (size_t)w * rows * SLOTS, dy, rows, SLOTS, work, nullptr));
        CHECK(cudaDeviceSynchronize());
        ms = elapsed_ms([&](int it) {
            int s = it % sets;
            KCHECK(kern_exl3_moe(&ex, dx, dids + (size_t)s * rows * SLOTS,
                                 dwts + (size_t)s * rows * SLOTS, dy, rows, SLOTS, work, nullptr));
        }, iters, t0, t1);
        double per_call = ms * 1e-3 / iters;
        double bytes = unique_total / sets * 3.0 * mat_bytes; // trellis bytes of one call
        double bw = bytes / per_call;
        results.push_back({"moe decode (gate/up+swiglu+down)", rows, per_call * 1e6, bw / 1e9,
                           bw / copy_traffic});
    }

    // ---- single linears, cycling over 288 different matrices ----
    for (int shape = 0; shape < 2; shape++) {
        for (int rc = 0; rc < 3; rc++) {
            int rows = row_counts[rc];
            kern_exl3_linear l = {};
            l.in = shape ? I : H;
            l.out = shape ? H : I;
            l.bits = 4;
            l.codebook = 1;
            l.suh = shape ? scales[4] : scales[0];
            l.svh = shape ? scales[5] : scales[1];
            void *lw = dalloc(kern_exl3_matmul_workspace(&l, rows));
            const char *base = (const char *)(shape ? dt : gt);
            for (int w = 0; w < 3; w++) {
                l.trellis = base + (size_t)w * mat_bytes;
                KCHECK(kern_exl3_matmul(&l, dx, dy, rows, lw, nullptr));
            }
            CHECK(cudaDeviceSynchronize());
            ms = elapsed_ms([&](int it) {
                l.trellis = base + (size_t)((it * 37) % E) * mat_bytes;
                KCHECK(kern_exl3_matmul(&l, dx, dy, rows, lw, nullptr));
            }, iters, t0, t1);
            double per_call = ms * 1e-3 / iters;
            double bw = mat_bytes / per_call;
            results.push_back({shape ? "linear 2048->4096 (down)" : "linear 4096->2048 (gate/up)",
                               rows, per_call * 1e6, bw / 1e9, bw / copy_traffic});
            CHECK(cudaFree(lw));
        }
    }

    // ---- prefill GEMM: 512 rows through gate/up-shaped linears ----
    {
        int rows = 512;
        kern_exl3_linear l = {};
        l.in = H;
        l.out = I;
        l.bits = 4;
        l.codebook = 1;
        l.suh = scales[0];
        l.svh = scales[1];
        float *px = (float *)dalloc((size_t)rows * H * 4), *py = (float *)dalloc((size_t)rows * I * 4);
        CHECK(cudaMemset(px, 0, (size_t)rows * H * 4));
        void *lw = dalloc(kern_exl3_matmul_workspace(&l, rows));
        int n = iters / 10 > 5 ? iters / 10 : 5;
        l.trellis = gt;
        KCHECK(kern_exl3_matmul(&l, px, py, rows, lw, nullptr));
        ms = elapsed_ms([&](int it) {
            l.trellis = (const char *)gt + (size_t)(it % E) * mat_bytes;
            KCHECK(kern_exl3_matmul(&l, px, py, rows, lw, nullptr));
        }, n, t0, t1);
        double per_call = ms * 1e-3 / n;
        double tflops = 2.0 * rows * H * I / per_call / 1e12;
        printf("prefill GEMM 4096->2048, 512 rows: %.1f us, %.1f TFLOP/s (fp16 mma, fp32 acc)\n",
               per_call * 1e6, tflops);
        CHECK(cudaFree(px));
        CHECK(cudaFree(py));
        CHECK(cudaFree(lw));
    }

    // ---- the routed experts of a prefill chunk, grouped by expert: each grouped kernel and the
    // automatic choice at 32, 128 and 512 rows an expert (balanced routing: pair p goes to expert
    // p mod E), its output bits against the pipe-64 kernel's ----
    int grouped_fail = 0;
    {
        const int per_expert[3] = {32, 128, 512};
        const int variants[3] = {KERN_EXL3_GROUPED_PIPE_64, KERN_EXL3_GROUPED_PIPE_128_ONCE,
                                 KERN_EXL3_GROUPED_AUTO};
        const char *vname[3] = {"pipe, 64 rows a pass", "pipe, 128 rows a pass, one decode",
                                "auto"};
        printf("\n| grouped experts (kern_exl3_moe_prefill) | rows/expert | rows | ms/call (median of 5) "
               "| TFLOP/s | same bits as pipe 64 |\n|---|---|---|---|---|---|\n");
        for (int pi = 0; pi < 3; pi++) {
            int rows = per_expert[pi] * E / SLOTS, P = rows * SLOTS;
            std::vector<float> hx((size_t)rows * H), hw((size_t)P);
            std::vector<int32_t> hid((size_t)P);
            for (auto &v : hx)
                v = ((int)(rnd() % 2001) - 1000) / 1000.0f;
            for (int p = 0; p < P; p++) {
                hid[p] = p % E; // a row's 8 slots are 8 consecutive experts: all different
                hw[p] = 0.05f + (rnd() % 1000) / 10000.0f;
            }
            float *gx = (float *)dalloc(hx.size() * 4), *gy = (float *)dalloc((size_t)rows * H * 4);
            float *gw = (float *)dalloc((size_t)P * 4);
            int32_t *gid = (int32_t *)dalloc((size_t)P * 4);
            CHECK(cudaMemcpy(gx, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy(gw, hw.data(), (size_t)P * 4, cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy(gid, hid.data(), (size_t)P * 4, cudaMemcpyHostToDevice));
            void *pw = dalloc(kern_exl3_moe_prefill_workspace(&ex, rows, SLOTS));
            std::vector<float> first((size_t)rows * H), got((size_t)rows * H);
            for (int vi = 0; vi < 3; vi++) {
                KCHECK(kern_exl3_set_grouped(variants[vi]));
                CHECK(cudaMemset(gy, 0xFF, (size_t)rows * H * 4)); // NaN: every output written?
                KCHECK(kern_exl3_moe_prefill(&ex, gx, gid, gw, gy, rows, SLOTS, pw, nullptr));
                CHECK(cudaDeviceSynchronize());
                CHECK(cudaMemcpy(vi ? got.data() : first.data(), gy, (size_t)rows * H * 4,
                                 cudaMemcpyDeviceToHost));
                size_t nan = 0;
                for (float v : vi ? got : first)
                    nan += v != v;
                size_t differ = 0;
                if (vi)
                    for (size_t i = 0; i < got.size(); i++)
                        differ += memcmp(&got[i], &first[i], 4) != 0;
                float med = median_ms_per_call([&](int) {
                    KCHECK(kern_exl3_moe_prefill(&ex, gx, gid, gw, gy, rows, SLOTS, pw, nullptr));
                }, per_expert[pi] >= 512 ? 2 : 5, t0, t1);
                double flops = 2.0 * P * 3.0 * H * I;
                printf("| %s | %d | %d | %.3f | %.1f | %s |\n", vname[vi], per_expert[pi], rows,
                       med, flops / (med * 1e-3) / 1e12, bits_verdict(nan, vi, differ));
                if (nan || differ) {
                    printf("FAIL: grouped kernel '%s' at %d rows an expert: %zu NaN, %zu of %zu "
                           "outputs differ from the pipe-64 kernel's bits\n", vname[vi],
                           per_expert[pi], nan, differ, got.size());
                    grouped_fail = 1;
                }
            }
            KCHECK(kern_exl3_set_grouped(KERN_EXL3_GROUPED_AUTO));
            CHECK(cudaFree(gx));
            CHECK(cudaFree(gy));
            CHECK(cudaFree(gw));
            CHECK(cudaFree(gid));
            CHECK(cudaFree(pw));
        }
    }

    // ---- the grouped products alone (kern_exl3_grouped_product): a call is one layer's gate, up
    // and down launches; each kernel at 32, 128 and 512 rows an expert (balanced) and for a
    // chunks of 4,096, 2,048, 3,072, 2,560 and 2,816 rows routed at random (8 distinct experts a
    // row: ~114 / 57 / 85 / 71 / 78 rows an expert, Poisson tails), its gate/up/down outputs' bits
    // against the pipe-64 kernel's; and the automatic choice ----
    {
        const int variants[3] = {KERN_EXL3_GROUPED_PIPE_64, KERN_EXL3_GROUPED_PIPE_128_ONCE,
                                 KERN_EXL3_GROUPED_AUTO};
        const char *vname[3] = {"pipe 64", "pipe 128 once", "auto"};
        const int even[5] = {16, 32, 64, 128, 512}; // rows an expert (balanced routing)
        // random chunks in the order they were added (each keeps the routing of the runs before
        // the later ones came): 114 / 57 / 85 / 71 / 78 rows an expert on average, around the
        // rows where the two kernels cross
        const int nroute = 10;
        const char *cname[nroute] = {"16 an expert", "32 an expert", "64 an expert", "128 an expert",
                                     "512 an expert", "4096-row chunk, random", "2048-row chunk, random",
                                     "3072-row chunk, random", "2560-row chunk, random",
                                     "2816-row chunk, random"};
        const int chunk_rows[nroute] = {0, 0, 0, 0, 0, 4096, 2048, 3072, 2560, 2816};
        printf("\n| grouped products alone (gate+up+down) | routing | pairs | us/call (median of 5) "
               "| TFLOP/s | same bits as pipe 64 |\n|---|---|---|---|---|---|\n");
        for (int pi = 0; pi < nroute; pi++) {
            std::vector<int> counts(E, 0), offs(E + 1, 0);
            if (pi < 5) {
                std::fill(counts.begin(), counts.end(), even[pi]);
            } else {
                for (int r = 0; r < chunk_rows[pi]; r++) {
                    int chosen[SLOTS];
                    for (int k = 0; k < SLOTS; k++) {
                        int e, dup;
                        do {
                            e = (int)(rnd() % E);
                            dup = 0;
                            for (int q = 0; q < k; q++)
                                dup |= chosen[q] == e;
                        } while (dup);
                        chosen[k] = e;
                        counts[e]++;
                    }
                }
            }
            for (int e = 0; e < E; e++)
                offs[e + 1] = offs[e] + counts[e];
            int P = offs[E], most = *std::max_element(counts.begin(), counts.end());
            int *doffs = (int *)dalloc((size_t)(E + 1) * 4);
            CHECK(cudaMemcpy(doffs, offs.data(), (size_t)(E + 1) * 4, cudaMemcpyHostToDevice));
            uint16_t *xg = (uint16_t *)dalloc((size_t)P * H * 2), *xd = (uint16_t *)dalloc((size_t)P * I * 2);
            fill_scales<<<1024, 256>>>(xg, (size_t)P * H, 1.0f, 77 + pi);
            fill_scales<<<1024, 256>>>(xd, (size_t)P * I, 1.0f, 88 + pi);
            CHECK(cudaGetLastError());
            size_t nzi = (size_t)P * I, nzh = (size_t)P * H;
            float *zg = (float *)dalloc(nzi * 4), *zu = (float *)dalloc(nzi * 4), *zd = (float *)dalloc(nzh * 4);
            std::vector<float> first_u(nzi), first_d(nzh), got_u(nzi), got_d(nzh);
            auto one_call = [&]() {
                KCHECK(kern_exl3_grouped_product(gt, 4, 1, H, I, E, doffs, P, xg, zg, nullptr));
                KCHECK(kern_exl3_grouped_product(ut, 4, 1, H, I, E, doffs, P, xg, zu, nullptr));
                KCHECK(kern_exl3_grouped_product(dt, 4, 1, I, H, E, doffs, P, xd, zd, nullptr));
            };
            for (int vi = 0; vi < 3; vi++) {
                KCHECK(kern_exl3_set_grouped(variants[vi]));
                CHECK(cudaMemset(zu, 0xFF, nzi * 4)); // NaN: every output written?
                CHECK(cudaMemset(zd, 0xFF, nzh * 4));
                one_call();
                CHECK(cudaDeviceSynchronize());
                CHECK(cudaMemcpy(vi ? got_u.data() : first_u.data(), zu, nzi * 4, cudaMemcpyDeviceToHost));
                CHECK(cudaMemcpy(vi ? got_d.data() : first_d.data(), zd, nzh * 4, cudaMemcpyDeviceToHost));
                size_t nan = 0, differ = 0;
                for (float v : vi ? got_u : first_u)
                    nan += v != v;
                for (float v : vi ? got_d : first_d)
                    nan += v != v;
                if (vi)
                    differ = (size_t)(memcmp(got_u.data(), first_u.data(), nzi * 4) != 0) +
                             (memcmp(got_d.data(), first_d.data(), nzh * 4) != 0);
                float med = median_ms_per_call([&](int) { one_call(); }, pi == 4 ? 2 : 5, t0, t1);
                double flops = 2.0 * P * 3.0 * H * I;
                char routing[64];
                snprintf(routing, sizeof routing, "%s (most %d)", cname[pi], most);
                printf("| %s | %s | %d | %.0f | %.1f | %s |\n", vname[vi], routing, P, med * 1e3,
                       flops / (med * 1e-3) / 1e12, bits_verdict(nan, vi, differ));
                if (nan || differ) {
                    printf("FAIL: grouped products '%s', %s: %zu NaN, outputs differ from the "
                           "pipe-64 kernel's: %s\n", vname[vi], cname[pi], nan, differ ? "yes" : "no");
                    grouped_fail = 1;
                }
            }
            KCHECK(kern_exl3_set_grouped(KERN_EXL3_GROUPED_AUTO));
            CHECK(cudaFree(doffs));
            CHECK(cudaFree(xg));
            CHECK(cudaFree(xd));
            CHECK(cudaFree(zg));
            CHECK(cudaFree(zu));
            CHECK(cudaFree(zd));
        }
    }

    printf("\ncopy ceiling, cudaMemcpy D2D of 1 GiB: %.0f GB/s (read + write, as bandwidthTest "
           "counts it; %.0f GB/s of bytes copied)\n", copy_traffic / 1e9, copy_read / 1e9);
    printf("| kernel | rows | us/call | trellis GB/s | of copy BW |\n");
    printf("|---|---|---|---|---|\n");
    for (auto &r : results)
        printf("| %s | %d | %.1f | %.0f | %.1f%% |\n", r.what, r.rows, r.us, r.gbs, 100 * r.frac);
    return grouped_fail;
}
