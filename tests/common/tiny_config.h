/* tiny_config.h: the tiny model whose costs test_traffic and test_prefill_projection compute by
 * hand, so both suites check their arithmetic against one shape. */
#ifndef GLMCHAT_TESTS_COMMON_TINY_CONFIG_H
#define GLMCHAT_TESTS_COMMON_TINY_CONFIG_H

#include <string.h>

#include "model/config.h"

/* D 256, 2 streams, vocab 512; layer 0 KDA (2 heads of 128, conv 4) + dense MLP (256 wide),
 * layer 1 DSA (2 heads, q rank 128, latent 64, nope 64, v 64; indexer 2 heads of 32, top 8
 * tokens, pools of 4) + MoE (4 experts 128 wide, top 2, one shared). */
static inline void tiny_config(glm_config *c)
{
    memset(c, 0, sizeof *c);
    c->vocab_size = 512, c->hidden_size = 256, c->num_layers = 2, c->hc_mult = 2;
    c->kda_heads = 2, c->kda_head_dim = 128, c->kda_conv_kernel = 4;
    c->num_heads = 2, c->q_lora_rank = 128, c->kv_lora_rank = 64;
    c->qk_nope_head_dim = 64, c->v_head_dim = 64;
    c->index_n_heads = 2, c->index_head_dim = 32, c->index_topk = 8, c->index_kpool = 4;
    c->n_routed_experts = 4, c->num_experts_per_tok = 2, c->n_shared_experts = 1;
    c->moe_intermediate_size = 128, c->intermediate_size = 256;
    c->attn[0] = GLM_ATTN_KDA, c->moe[0] = 0;
    c->attn[1] = GLM_ATTN_DSA, c->moe[1] = 1;
}

#endif
