/* bench_exl3_quant.c: the EXL3 quantizer's relative weight error per bit width on Gaussian and
 * on real-shaped (GLM expert 2048 x 4096, heavy-tailed, uneven channels) weights, and its speed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/model/exl3.h"
#include "tests/common/rng.h"
#include "bench/bench_clock.h"

static uint64_t rng_state = 0xB5AD4ECEDA1CE2A9ull;

/* Gaussian, or "real-like": Student-t(5) entries with log-normal row and column scales. */
static void fill(float *w, int out, int in, int real_like)
{
    double *rs = malloc((size_t)out * sizeof *rs), *cs = malloc((size_t)in * sizeof *cs);
    if (!rs || !cs) {
        free(rs);
        free(cs);
        return;
    }
    for (int j = 0; j < out; j++)
        rs[j] = real_like ? exp(0.3 * test_rng_gauss(&rng_state)) : 1.0;
    for (int i = 0; i < in; i++)
        cs[i] = real_like ? exp(0.5 * test_rng_gauss(&rng_state)) : 1.0;
    for (int j = 0; j < out; j++)
        for (int i = 0; i < in; i++) {
            double v = test_rng_gauss(&rng_state);
            if (real_like) {
                double chi = 0;
                for (int d = 0; d < 5; d++) {
                    double g = test_rng_gauss(&rng_state);
                    chi += g * g;
                }
                v /= sqrt(chi / 5.0);
            }
            w[(size_t)j * in + i] = (float)(0.02 * rs[j] * cs[i] * v);
        }
    free(rs);
    free(cs);
}

static int run(int out, int in, int bits, int real_like, int threads)
{
    size_t n = (size_t)out * in;
    float *w = malloc(n * sizeof *w), *d = malloc(n * sizeof *d);
    uint16_t *trellis = malloc(n / 256 * 16 * (size_t)bits * sizeof *trellis);
    uint16_t *suh = malloc((size_t)in * sizeof *suh), *svh = malloc((size_t)out * sizeof *svh);
    int rc = 1;
    if (!w || !d || !trellis || !suh || !svh) {
        fprintf(stderr, "bench_exl3_quant: out of memory\n");
        goto done;
    }
    fill(w, out, in, real_like);
    exl3_quant_params p = {.bits = bits, .codebook = EXL3_CB_MCG, .seed = 1, .out_scales = 1,
                           .scale_search = 1, .threads = threads};
    exl3_quant_out o = {.trellis = trellis, .suh = suh, .svh = svh};
    glm_error err;
    double t0 = bench_now_s();
    if (exl3_quantize(w, out, in, NULL, &p, &o, &err) != GLM_OK) {
        fprintf(stderr, "bench_exl3_quant: %s\n", err.message);
        goto done;
    }
    double t1 = bench_now_s();
    exl3_tensor t = {.in = in, .out = out, .bits = bits, .codebook = EXL3_CB_MCG,
                     .trellis = trellis, .suh = suh, .svh = svh};
    if (exl3_dequantize_f32(&t, d, &err) != GLM_OK) {
        fprintf(stderr, "bench_exl3_quant: %s\n", err.message);
        goto done;
    }
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)d[i] - w[i]) * ((double)d[i] - w[i]);
        s += (double)w[i] * w[i];
    }
    printf("| %-9s | %4d x %-4d | %d | %.5f | %6.1f s | %6.0f tiles/s |\n",
           real_like ? "real-like" : "gaussian", out, in, bits, e / s, t1 - t0,
           (double)n / 256.0 / (t1 - t0));
    fflush(stdout);
    rc = 0;
done:
    free(w);
    free(d);
    free(trellis);
    free(suh);
    free(svh);
    return rc;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int full = argc > 2 && strcmp(argv[2], "full") == 0;
    printf("| weights   | out x in    | K | rel. MSE | time     | speed          |\n");
    printf("|-----------|-------------|---|----------|----------|----------------|\n");
    for (int bits = 1; bits <= 8; bits++)
        if (run(256, 512, bits, 0, threads))
            return 1;
    for (int bits = 2; bits <= 5; bits++)
        if (run(256, 512, bits, 1, threads))
            return 1;
    if (full) /* a GLM-5.3-Flash expert's gate/up shape */
        for (int real_like = 0; real_like < 2; real_like++)
            if (run(2048, 4096, 4, real_like, threads))
                return 1;
    return 0;
}
