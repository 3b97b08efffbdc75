/* emulate_noise.c: the link-time wrap of cpu_matmul that adds f32-sized noise to the CPU
 * backend's products when asked (emulate_noise.h); off, it is cpu_matmul itself. */
#include "tests/gpu/emulate_noise.h"

#include "cpu/ops.h"

static double noise_ulps;
static uint64_t noise_state, noise_products;

int __real_cpu_matmul(cpu_pool *pool, const glm_weight *w, const float *x, int T, float *y);
int __wrap_cpu_matmul(cpu_pool *pool, const glm_weight *w, const float *x, int T, float *y);

void emu_noise_set(double ulps, uint64_t seed)
{
    noise_ulps = ulps;
    /* seed mixed (splitmix64's finaliser): a small seed would start xorshift in a long run of
     * near-equal draws */
    uint64_t z = seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    noise_state = z ? z : 1;
    noise_products = 0;
}

uint64_t emu_noise_products(void)
{
    return noise_products;
}

int __wrap_cpu_matmul(cpu_pool *pool, const glm_weight *w, const float *x, int T, float *y)
{
    int rc = __real_cpu_matmul(pool, w, x, T, y);
    if (rc || noise_ulps <= 0)
        return rc;
    /* 2^-24 is half an ulp of a float in [1, 2) (emulate_noise.h) */
    double scale = noise_ulps * 5.9604644775390625e-8;
    size_t n = (size_t)T * (size_t)w->rows;
    for (size_t i = 0; i < n; i++) {
        noise_state ^= noise_state << 13;
        noise_state ^= noise_state >> 7;
        noise_state ^= noise_state << 17;
        double u = (double)(noise_state >> 11) * (2.0 / 9007199254740992.0) - 1.0;
        y[i] = (float)((double)y[i] * (1.0 + u * scale));
    }
    noise_products++;
    return 0;
}
