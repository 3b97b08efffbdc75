/* test_tp_auth.c: Check suite for the ranks' shared key: HMAC-SHA256 against RFC 4231 vectors (SHA-256
 * itself is test_base's), key files (strict reading, mode 0600, never overwritten), the proofs. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tp/auth.h"
#include "tp/hmac_sha256.h"
#include "tests/common/check_main.h"

static void to_hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

typedef struct rfc4231_case {
    uint8_t key_byte;   /* the key is key_len of this byte, unless key_text is given */
    size_t key_len;
    const char *key_text;
    uint8_t data_byte;  /* the data is data_len of this byte, unless data_text is given */
    size_t data_len;
    const char *data_text;
    const char *mac;    /* hex; shorter than 64 digits: the MAC truncated (case 5) */
} rfc4231_case;

START_TEST(hmac_sha256_matches_rfc4231)
{
    static const rfc4231_case cases[] = {
        {0x0b, 20, NULL, 0, 0, "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        {0, 0, "Jefe", 0, 0, "what do ya want for nothing?",
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        {0xaa, 20, NULL, 0xdd, 50, NULL, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
        {0, 25, NULL, 0xcd, 50, NULL, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
        {0x0c, 20, NULL, 0, 0, "Test With Truncation", "a3b6167473100ee06e0c796c2955552b"},
        {0xaa, 131, NULL, 0, 0, "Test Using Larger Than Block-Size Key - Hash Key First",
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
        {0xaa, 131, NULL, 0, 0,
         "This is a test using a larger than block-size key and a larger than block-size data. The "
         "key needs to be hashed before being used by the HMAC algorithm.",
         "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const rfc4231_case *t = &cases[c];
        uint8_t key[131], data[200], mac[TP_SHA256_BYTES];
        size_t key_len = t->key_text ? strlen(t->key_text) : t->key_len;
        size_t data_len = t->data_text ? strlen(t->data_text) : t->data_len;
        if (t->key_text)
            memcpy(key, t->key_text, key_len);
        else if (c == 3) /* case 4: the key is 0x01, 0x02, ..., 0x19 */
            for (size_t i = 0; i < key_len; i++)
                key[i] = (uint8_t)(i + 1);
        else
            memset(key, t->key_byte, key_len);
        if (t->data_text)
            memcpy(data, t->data_text, data_len);
        else
            memset(data, t->data_byte, data_len);
        char hex[2 * TP_SHA256_BYTES + 1];
        tp_hmac_sha256_once(key, key_len, data, data_len, mac);
        to_hex(mac, sizeof mac, hex);
        hex[strlen(t->mac)] = '\0';
        ck_assert_msg(strcmp(hex, t->mac) == 0, "RFC 4231 case %zu: %s, want %s", c + 1, hex, t->mac);
        /* the same in pieces of 3 bytes */
        tp_hmac_sha256 h;
        tp_hmac_sha256_init(&h, key, key_len);
        for (size_t at = 0; at < data_len; at += 3)
            tp_hmac_sha256_update(&h, data + at, data_len - at < 3 ? data_len - at : 3);
        tp_hmac_sha256_final(&h, mac);
        to_hex(mac, sizeof mac, hex);
        hex[strlen(t->mac)] = '\0';
        ck_assert_msg(strcmp(hex, t->mac) == 0, "RFC 4231 case %zu in pieces: %s", c + 1, hex);
    }
}
END_TEST

START_TEST(equal_secret_compares_every_byte)
{
    uint8_t a[32], b[32];
    memset(a, 7, sizeof a);
    memcpy(b, a, sizeof b);
    ck_assert_int_eq(tp_equal_secret(a, b, sizeof a), 1);
    b[31] ^= 1;
    ck_assert_int_eq(tp_equal_secret(a, b, sizeof a), 0);
    b[31] ^= 1;
    b[0] ^= 0x80;
    ck_assert_int_eq(tp_equal_secret(a, b, sizeof a), 0);
}
END_TEST

static char dir[] = "/tmp/test_tp_auth.XXXXXX";

static void write_file(const char *path, const char *text, mode_t mode)
{
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fchmod(fd, mode), 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

START_TEST(key_files_are_made_and_read_strictly)
{
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256], other[256];
    snprintf(path, sizeof path, "%s/key", dir);
    snprintf(other, sizeof other, "%s/other", dir);
    glm_error err = {0};
    tp_key a, b;
    ck_assert_int_eq(tp_key_create(path, &err), GLM_OK);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0600);
    ck_assert_int_eq(st.st_size, 65); /* 64 hex digits and a newline */
    ck_assert_int_eq(tp_key_load(path, &a, &err), GLM_OK);
    ck_assert_int_eq(a.set, 1);
    /* never over an existing file */
    ck_assert_int_eq(tp_key_create(path, &err), GLM_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.message, "never replaced"));
    ck_assert_int_eq(tp_key_load(path, &b, &err), GLM_OK);
    ck_assert_mem_eq(a.bytes, b.bytes, TP_KEY_BYTES);
    /* two new keys differ */
    ck_assert_int_eq(tp_key_create(other, &err), GLM_OK);
    ck_assert_int_eq(tp_key_load(other, &b, &err), GLM_OK);
    ck_assert_int_eq(memcmp(a.bytes, b.bytes, TP_KEY_BYTES) != 0, 1);

    const char *hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
    write_file(path, hex, 0600); /* no newline, upper case: fine */
    ck_assert_int_eq(tp_key_load(path, &a, &err), GLM_OK);
    ck_assert_uint_eq(a.bytes[0], 0x00);
    ck_assert_uint_eq(a.bytes[31], 0xff);
    write_file(path, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n", 0640);
    ck_assert_int_eq(tp_key_load(path, &a, &err), GLM_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.message, "mode 0640"));
    ck_assert_ptr_nonnull(strstr(err.message, "chmod 600"));
    ck_assert_int_eq(a.set, 0);
    write_file(path, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n", 0604);
    ck_assert_int_eq(tp_key_load(path, &a, &err), GLM_ERR_IO);
    write_file(path, "0011223344556677\n", 0600);
    ck_assert_int_eq(tp_key_load(path, &a, &err), GLM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "holds 16 characters"));
    ck_assert_ptr_nonnull(strstr(err.message, path));
    write_file(path, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeefg\n", 0600);
    ck_assert_int_eq(tp_key_load(path, &a, &err), GLM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "offset 63"));
    write_file(path, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\nmore\n", 0600);
    ck_assert_int_eq(tp_key_load(path, &a, &err), GLM_ERR_FORMAT);
    unlink(path);
    ck_assert_int_eq(tp_key_load(path, &a, &err), GLM_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.message, "--new-key"));
    ck_assert_int_eq(tp_key_load(dir, &a, &err), GLM_ERR_IO); /* a directory */
    unlink(other);
    rmdir(dir);
}
END_TEST

START_TEST(proofs_depend_on_key_role_and_both_nonces)
{
    tp_key k1 = {.set = 1}, k2 = {.set = 1};
    memset(k1.bytes, 1, sizeof k1.bytes);
    memset(k2.bytes, 2, sizeof k2.bytes);
    uint8_t wn[TP_NONCE_BYTES], hn[TP_NONCE_BYTES], p[TP_PROOF_BYTES], q[TP_PROOF_BYTES];
    memset(wn, 3, sizeof wn);
    memset(hn, 4, sizeof hn);
    tp_auth_proof(&k1, "head", wn, hn, p);
    tp_auth_proof(&k1, "head", wn, hn, q);
    ck_assert_mem_eq(p, q, sizeof p);
    tp_auth_proof(&k2, "head", wn, hn, q);
    ck_assert_int_ne(memcmp(p, q, sizeof p), 0);
    tp_auth_proof(&k1, "worker", wn, hn, q); /* one role's proof is no use as the other's */
    ck_assert_int_ne(memcmp(p, q, sizeof p), 0);
    tp_auth_proof(&k1, "head", hn, wn, q); /* nonces swapped */
    ck_assert_int_ne(memcmp(p, q, sizeof p), 0);
    wn[31] ^= 1;
    tp_auth_proof(&k1, "head", wn, hn, q);
    ck_assert_int_ne(memcmp(p, q, sizeof p), 0);
}
END_TEST

START_TEST(loopback_addresses_are_told_apart)
{
    glm_error err;
    ck_assert_int_eq(tp_address_is_loopback("127.0.0.1:0", &err), 1);
    ck_assert_int_eq(tp_address_is_loopback("127.3.2.1:7070", &err), 1);
    ck_assert_int_eq(tp_address_is_loopback("[::1]:7070", &err), 1);
    ck_assert_int_eq(tp_address_is_loopback("0.0.0.0:7070", &err), 0);
    ck_assert_int_eq(tp_address_is_loopback("[::]:7070", &err), 0);
    ck_assert_int_eq(tp_address_is_loopback("192.168.100.2:7070", &err), 0);
    ck_assert_int_eq(tp_address_is_loopback("127.0.0.1", &err), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tp_auth");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, hmac_sha256_matches_rfc4231);
    tcase_add_test(tc, equal_secret_compares_every_byte);
    tcase_add_test(tc, key_files_are_made_and_read_strictly);
    tcase_add_test(tc, proofs_depend_on_key_role_and_both_nonces);
    tcase_add_test(tc, loopback_addresses_are_told_apart);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
