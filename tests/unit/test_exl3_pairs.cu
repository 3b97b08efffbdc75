// test_exl3_pairs.cu: the MoE strips' 4-bit decode, paired products (products_k4_pairs,
// exl3_device.cuh), gives the products of the same eight states as states_k4, on the host.
// Compiled by nvcc for the host only (no GPU needed): the header's device code differs from
// what runs here only by mad_lo and funnel_r, one PTX instruction each.
#include <cstdint>
#include <cstdio>

#include "exl3_device.cuh"

namespace {

// The eight states of a 4-bit tile's lane as states_k4 makes them (byte_perm 0x4421 keeps bytes
// 1-2, 0x4410 bytes 0-1, zero-filled), written with shifts and masks.
void states_ref(uint32_t w, uint32_t prev, uint32_t st[8])
{
    uint32_t s = (prev << 12) | (w >> 20);
    st[0] = (s >> 8) & 0xFFFFu;
    st[1] = (s >> 4) & 0xFFFFu;
    st[2] = s & 0xFFFFu;
    st[3] = w >> 16;
    st[4] = (w >> 12) & 0xFFFFu;
    st[5] = (w >> 8) & 0xFFFFu;
    st[6] = (w >> 4) & 0xFFFFu;
    st[7] = w & 0xFFFFu;
}

uint64_t rng = 0x9E3779B97F4A7C15ull;
uint32_t next32()
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

template <int CB>
int check(uint32_t w, uint32_t prev)
{
    const uint32_t m = CB == 1 ? exl3::kMcgMult : 89226354u;
    const uint32_t a = CB == 1 ? 0u : 64248484u;
    uint32_t st[8], x[8];
    states_ref(w, prev, st);
    exl3::products_k4_pairs<CB>(w, prev, 0xFFFF0000u, x);
    uint64_t v = (uint64_t)prev << 32 | w;
    for (int i = 0; i < 8; i++) {
        // the state is window 28 - 4i of the stream bits prev:w
        uint32_t window = (uint32_t)(v >> (28 - 4 * i)) & 0xFFFFu;
        uint32_t want = st[i] * m + a;
        if (window != st[i] || x[i] != want) {
            fprintf(stderr, "FAIL: codebook %d, w %08x prev %08x, state %d: window %04x, state %04x, "
                            "product %08x, want %08x\n", CB, w, prev, i, window, st[i], x[i], want);
            return 1;
        }
    }
    return 0;
}

} // namespace

int main()
{
    int bad = 0;
    const uint32_t edges[] = {0u, 1u, 0xFFFFu, 0x10000u, 0x7FFFFFFFu, 0x80000000u, 0xFFFF0000u,
                              0xFFFFFFFFu, 0x0000FFFFu, 0x12345678u, 0xF0F0F0F0u, 0x0F0F0F0Fu};
    for (uint32_t w : edges)
        for (uint32_t p : edges)
            bad = bad || check<0>(w, p) || check<1>(w, p);
    // every window over all 65,536 states, the other stream bits random
    for (int p = 0; p <= 28 && !bad; p += 4)
        for (uint64_t i = 0; i < 65536u && !bad; i++) {
            uint64_t v = ((uint64_t)next32() << 32 | next32()) & ~(0xFFFFull << p);
            v |= i << p;
            bad = check<0>((uint32_t)v, (uint32_t)(v >> 32)) || check<1>((uint32_t)v, (uint32_t)(v >> 32));
        }
    const int n = 1 << 24;
    for (int i = 0; i < n && !bad; i++) {
        uint32_t w = next32(), p = next32();
        bad = check<0>(w, p) || check<1>(w, p);
    }
    if (bad)
        return 1;
    printf("PASS: paired products equal states_k4's, both codebooks: every window over all "
           "states, %d random word pairs, %d edge pairs\n", n,
           (int)(sizeof edges / sizeof edges[0]) * (int)(sizeof edges / sizeof edges[0]));
    return 0;
}
