/* emulate_noise.h: noise of the size f32 summation orders make, put on every product the CPU
 * backend computes, to measure how much a lossy mode's roundings amplify the backends' own noise
 * (test_cuda_emulate's mode floor). The program links with -Wl,--wrap=cpu_matmul. */
#ifndef GLMCHAT_TESTS_GPU_EMULATE_NOISE_H
#define GLMCHAT_TESTS_GPU_EMULATE_NOISE_H

#include <stdint.h>

/* From now on each output of cpu_matmul is multiplied by (1 + u * ulps * 2^-24), u uniform in
 * [-1, 1] from a generator started at seed (the same seed: the same noise); ulps 0: none. At
 * ulps 1 an output moves by at most half an ulp of itself before float rounding, which leaves
 * most outputs as they were and moves the rest by one ulp: the size of the differences two
 * summation orders leave. Not thread-safe: the CPU backend calls cpu_matmul from one thread. */
void emu_noise_set(double ulps, uint64_t seed);
/* Products that took the noise since the last emu_noise_set (0: the wrap is not linked in). */
uint64_t emu_noise_products(void);

#endif
