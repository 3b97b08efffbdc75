/* test_tp_rdma.c: Check suite for the hardware-free half of the rdma transport: region layout,
 * slot and flag logic, striping, GID choice from a (fake sysfs) table, the parameter blob. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tp/rdma.h"
#include "tp/rdma_logic.h"
#include "tests/common/check_main.h"

START_TEST(layout_is_page_aligned_and_disjoint)
{
    tp_rdma_layout l;
    glm_error err;
    ck_assert_int_eq(tp_rdma_layout_make(1 << 20, 2, &l, &err), GLM_OK);
    ck_assert_uint_eq(l.recv_off[0], 0);
    ck_assert_uint_eq(l.recv_off[1], 1 << 20);
    ck_assert_uint_eq(l.flag_off, 2u << 20);
    ck_assert_uint_eq(l.send_off[0] % 4096, 0);
    ck_assert_uint_ge(l.send_off[0], l.flag_off + 2 * TP_RDMA_MAX_HCA * TP_RDMA_FLAG_STRIDE);
    ck_assert_uint_eq(l.send_off[1], l.send_off[0] + (1 << 20));
    ck_assert_uint_eq(l.total, l.send_off[1] + (1 << 20));
    /* every flag sits in its own 64-byte line inside the flag page */
    for (unsigned s = 0; s < 2; s++)
        for (unsigned h = 0; h < TP_RDMA_MAX_HCA; h++) {
            size_t off = tp_rdma_flag_offset(&l, s, h);
            ck_assert_uint_eq(off % 64, 0);
            ck_assert_uint_ge(off, l.flag_off);
            ck_assert_uint_lt(off + 8, l.send_off[0]);
            if (s || h)
                ck_assert_uint_ne(off, tp_rdma_flag_offset(&l, 0, 0));
        }
    ck_assert_int_eq(tp_rdma_layout_make(0, 1, &l, &err), GLM_ERR_ARG);
    ck_assert_int_eq(tp_rdma_layout_make(4097, 1, &l, &err), GLM_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "4097"));
    ck_assert_int_eq(tp_rdma_layout_make(4096, 0, &l, &err), GLM_ERR_ARG);
    ck_assert_int_eq(tp_rdma_layout_make(4096, 5, &l, &err), GLM_ERR_ARG);
    ck_assert_int_eq(tp_rdma_layout_make(SIZE_MAX / 4096 * 4096, 1, &l, &err), GLM_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "too large"));
}
END_TEST

START_TEST(two_slots_and_flags_follow_the_sequence)
{
    ck_assert_uint_eq(tp_rdma_slot(1), 1);
    ck_assert_uint_eq(tp_rdma_slot(2), 0);
    ck_assert_uint_eq(tp_rdma_slot(3), 1);
    /* before anything arrived, a zeroed flag means wait */
    ck_assert_int_eq(tp_rdma_flag_state(0, 1), TP_FLAG_WAIT);
    ck_assert_int_eq(tp_rdma_flag_state(0, 2), TP_FLAG_WAIT);
    ck_assert_int_eq(tp_rdma_flag_state(1, 1), TP_FLAG_READY);
    /* a slot holds the value from two exchanges ago until the new one lands */
    ck_assert_int_eq(tp_rdma_flag_state(5, 7), TP_FLAG_WAIT);
    ck_assert_int_eq(tp_rdma_flag_state(7, 7), TP_FLAG_READY);
    /* anything else is out of step: a peer two ahead, or behind by more than one round */
    ck_assert_int_eq(tp_rdma_flag_state(9, 7), TP_FLAG_BAD);
    ck_assert_int_eq(tp_rdma_flag_state(3, 7), TP_FLAG_BAD);
    ck_assert_int_eq(tp_rdma_flag_state(0, 3), TP_FLAG_BAD);
    /* simulate a run: the flag of each slot only ever moves forward by two */
    uint64_t flag[2] = {0, 0};
    for (uint64_t seq = 1; seq < 1000; seq++) {
        unsigned s = tp_rdma_slot(seq);
        ck_assert_int_eq(tp_rdma_flag_state(flag[s], seq), TP_FLAG_WAIT);
        flag[s] = seq;
        ck_assert_int_eq(tp_rdma_flag_state(flag[s], seq), TP_FLAG_READY);
    }
}
END_TEST

START_TEST(stripes_cover_the_buffer_in_16_byte_packs)
{
    size_t sizes[] = {0, 1, 15, 16, 17, 4096, 16384, 16388, 1000003};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (unsigned n = 1; n <= TP_RDMA_MAX_HCA; n++) {
            size_t next = 0, biggest = 0, smallest = (size_t)-1;
            for (unsigned h = 0; h < n; h++) {
                size_t off, len;
                tp_rdma_stripe(sizes[si], n, h, &off, &len);
                ck_assert_uint_eq(off, next);
                if (off < sizes[si])
                    ck_assert_uint_eq(off % 16, 0);
                next = off + len;
                if (len > biggest)
                    biggest = len;
                if (len < smallest)
                    smallest = len;
            }
            ck_assert_uint_eq(next, sizes[si]);
            /* near-equal: no stripe is more than one pack (plus the short tail) larger */
            ck_assert_uint_le(biggest - smallest, 32);
        }
    size_t off, len;
    tp_rdma_stripe(16384, 2, 1, &off, &len);
    ck_assert_uint_eq(off, 8192);
    ck_assert_uint_eq(len, 8192);
}
END_TEST

static tp_gid_entry entry(int index, tp_gid_type type, const char *text)
{
    tp_gid_entry e = {index, type, {0}};
    ck_assert_int_eq(tp_gid_parse(text, e.gid), 0);
    return e;
}

START_TEST(gid_choice_prefers_roce_v2_ipv4)
{
    tp_gid_entry t[] = {
        entry(0, TP_GID_IB_ROCE_V1, "fe80:0000:0000:0000:4a2d:a0ff:fe12:3456"),
        entry(1, TP_GID_ROCE_V2, "fe80:0000:0000:0000:4a2d:a0ff:fe12:3456"),
        entry(2, TP_GID_IB_ROCE_V1, "0000:0000:0000:0000:0000:ffff:c0a8:6401"),
        entry(4, TP_GID_ROCE_V2, "0000:0000:0000:0000:0000:ffff:c0a8:6401"),
        entry(5, TP_GID_ROCE_V2, "0000:0000:0000:0000:0000:ffff:0a00:0002"),
    };
    /* The usual index 3 is gone (a re-added address moved to 4): the scan still finds it. */
    ck_assert_int_eq(tp_rdma_pick_gid(t, 5, NULL), 4);
    uint8_t want[4] = {10, 0, 0, 2};
    ck_assert_int_eq(tp_rdma_pick_gid(t, 5, want), 5);
    uint8_t absent[4] = {10, 0, 0, 9};
    ck_assert_int_eq(tp_rdma_pick_gid(t, 5, absent), -1);
    ck_assert_int_eq(tp_rdma_pick_gid(t, 3, NULL), -1);
    uint8_t v4[4];
    ck_assert(tp_gid_is_ipv4(t[3].gid, v4));
    ck_assert_uint_eq(v4[0], 192);
    ck_assert_uint_eq(v4[3], 1);
    ck_assert(!tp_gid_is_ipv4(t[1].gid, NULL));
}
END_TEST

START_TEST(gid_text_is_parsed_strictly)
{
    uint8_t g[16];
    ck_assert_int_eq(tp_gid_parse("0000:0000:0000:0000:0000:ffff:0a00:0002\n", g), 0);
    ck_assert_uint_eq(g[10], 0xff);
    ck_assert_uint_eq(g[15], 2);
    ck_assert_int_eq(tp_gid_parse("0000:0000:0000:0000:0000:ffff:0a00", g), -1);
    ck_assert_int_eq(tp_gid_parse("0000:0000:0000:0000:0000:ffff:0a00:00021", g), -1);
    ck_assert_int_eq(tp_gid_parse("000g:0000:0000:0000:0000:ffff:0a00:0002", g), -1);
    ck_assert_int_eq(tp_gid_parse("", g), -1);
    ck_assert_int_eq(tp_gid_type_parse("RoCE v2\n"), TP_GID_ROCE_V2);
    ck_assert_int_eq(tp_gid_type_parse("IB/RoCE v1\n"), TP_GID_IB_ROCE_V1);
    ck_assert_int_eq(tp_gid_type_parse("RoCE v22"), TP_GID_UNKNOWN);
}
END_TEST

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(gid_table_is_read_from_sysfs)
{
    char root[] = "/tmp/glmchat-sysfs-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(root));
    char gids[256], types[256], cmd[1024];
    snprintf(gids, sizeof gids, "%s/rocep1s0f0/ports/1/gids", root);
    snprintf(types, sizeof types, "%s/rocep1s0f0/ports/1/gid_attrs/types", root);
    snprintf(cmd, sizeof cmd, "mkdir -p %s %s", gids, types);
    ck_assert_int_eq(system(cmd), 0);
    write_file(gids, "0", "fe80:0000:0000:0000:4a2d:a0ff:fe12:3456\n");
    write_file(types, "0", "IB/RoCE v1\n");
    write_file(gids, "1", "fe80:0000:0000:0000:4a2d:a0ff:fe12:3456\n");
    write_file(types, "1", "RoCE v2\n");
    write_file(gids, "2", "0000:0000:0000:0000:0000:0000:0000:0000\n"); /* a deleted entry */
    write_file(gids, "3", "0000:0000:0000:0000:0000:0000:0000:0000\n");
    write_file(gids, "4", "0000:0000:0000:0000:0000:ffff:c0a8:6401\n");
    write_file(types, "4", "RoCE v2\n");
    tp_gid_entry t[TP_RDMA_MAX_GIDS];
    size_t n = 0;
    glm_error err;
    ck_assert_int_eq(tp_rdma_read_gids(root, "rocep1s0f0", 1, t, TP_RDMA_MAX_GIDS, &n, &err), GLM_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(t[2].index, 4);
    ck_assert_int_eq(tp_rdma_pick_gid(t, n, NULL), 4);
    ck_assert_int_eq(tp_rdma_read_gids(root, "roceP2p1s0f0", 1, t, TP_RDMA_MAX_GIDS, &n, &err), GLM_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.message, "roceP2p1s0f0"));
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static tp_rdma_params sample_params(void)
{
    tp_rdma_params p = {0};
    p.n_hca = 2;
    p.slot_bytes = 1 << 20;
    p.addr = 0x7f0012345000ull;
    for (unsigned h = 0; h < 2; h++) {
        p.hca[h].qpn = 0x1234 + h;
        p.hca[h].psn = 0xabcdef - h;
        p.hca[h].rkey = 0xdeadbeef;
        p.hca[h].lid = 0;
        p.hca[h].port = 1;
        p.hca[h].mtu = 5;
        tp_gid_parse("0000:0000:0000:0000:0000:ffff:0a00:0002", p.hca[h].gid);
        snprintf(p.hca[h].name, sizeof p.hca[h].name, h ? "roceP2p1s0f0" : "rocep1s0f0");
    }
    return p;
}

START_TEST(params_blob_round_trips_and_rejects_corruption)
{
    tp_rdma_params p = sample_params(), q;
    uint8_t buf[TP_RDMA_BLOB_BYTES];
    glm_error err;
    size_t n = tp_rdma_params_encode(&p, buf);
    ck_assert_uint_eq(n, TP_RDMA_BLOB_BYTES);
    ck_assert_int_eq(tp_rdma_params_decode(buf, n, &q, &err), GLM_OK);
    ck_assert_mem_eq(&p, &q, sizeof p);
    ck_assert_int_eq(tp_rdma_params_compatible(&p, &q, &err), GLM_OK);

    ck_assert_int_eq(tp_rdma_params_decode(buf, n - 1, &q, &err), GLM_ERR_PEER);
    /* each corruption at (offset, byte) must be refused */
    struct { size_t off; uint8_t v; const char *why; } bad[] = {
        {0, 0x00, "magic"},       {4, 0x02, "version"},    {8, 0x00, "HCA count"},
        {8, 0x05, "HCA count"},   {12, 0x01, "slot size"}, {24 + 3, 0x01, "24 bits"},
        {24 + 7, 0x01, "24 bits"}, {24 + 14, 0x00, "port"}, {24 + 15, 0x06, "MTU"},
        {24 + 32, ' ', "name"},   {24 + 2 * 64 + 5, 1, "unused"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t copy[TP_RDMA_BLOB_BYTES];
        memcpy(copy, buf, n);
        copy[bad[i].off] = bad[i].v;
        ck_assert_msg(tp_rdma_params_decode(copy, n, &q, &err) == GLM_ERR_PEER, "corruption %zu accepted", i);
        ck_assert_msg(strstr(err.message, bad[i].why) != NULL, "case %zu: %s", i, err.message);
    }
    q = p;
    q.n_hca = 1;
    ck_assert_int_eq(tp_rdma_params_compatible(&p, &q, &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "2 here, 1 on the peer"));
    q = p;
    q.slot_bytes = 4096;
    ck_assert_int_eq(tp_rdma_params_compatible(&p, &q, &err), GLM_ERR_PEER);
}
END_TEST

START_TEST(mtu_and_psn)
{
    ck_assert_uint_eq(tp_rdma_path_mtu(5, 3), 3);
    ck_assert_uint_eq(tp_rdma_path_mtu(3, 5), 3);
    uint32_t a = tp_rdma_psn(1), b = tp_rdma_psn(2);
    ck_assert_uint_le(a, 0xffffff);
    ck_assert_uint_le(b, 0xffffff);
    ck_assert_uint_ne(a, b);
}
END_TEST

START_TEST(no_device_is_a_clear_error)
{
    char names[4][32];
    int n = tp_rdma_list_devices(names, 4);
    tp_rdma_options o = {0};
    tp_rdma_params local;
    glm_error err = {0};
    /* Ask for a device name that cannot exist, so this holds on a machine with HCAs too. */
    o.hca_list = n > 0 ? "glmchat-no-such-hca" : NULL;
    tp_rdma *r = tp_rdma_prepare(0, &o, &local, &err);
    ck_assert_ptr_null(r);
    ck_assert_int_eq(err.status, GLM_ERR_UNSUPPORTED);
    if (n == 0)
        ck_assert_ptr_nonnull(strstr(err.message, "no RDMA device on this machine"));
    else
        ck_assert_ptr_nonnull(strstr(err.message, "GLMCHAT_RDMA_HCA"));
    ck_assert_ptr_nonnull(strstr(err.message, n == 0 ? "--transport tcp" : "ibv_devices"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tp_rdma");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, layout_is_page_aligned_and_disjoint);
    tcase_add_test(tc, two_slots_and_flags_follow_the_sequence);
    tcase_add_test(tc, stripes_cover_the_buffer_in_16_byte_packs);
    tcase_add_test(tc, gid_choice_prefers_roce_v2_ipv4);
    tcase_add_test(tc, gid_text_is_parsed_strictly);
    tcase_add_test(tc, gid_table_is_read_from_sysfs);
    tcase_add_test(tc, params_blob_round_trips_and_rejects_corruption);
    tcase_add_test(tc, mtu_and_psn);
    tcase_add_test(tc, no_device_is_a_clear_error);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
